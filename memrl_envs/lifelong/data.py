"""Reading LifelongAgentBench task files (OS and DB alike) and pinning train/validation splits.

The benchmark ships each task set as one JSON object keyed by sample index
(``{"0": {...}, "1": {...}}``); on the Hugging Face hub the same rows come as a table in
which nested fields may be stored as Python-literal strings (``"{'direct': None, ...}"``).
This module turns either into ``{key: row}`` with the nested fields parsed, skips rows that
do not fit the env's schema (each reported with its key), and keeps the split of the keys
into train / validation in a small JSON file, so that every run on the same data agrees.

API (shared by the OS and the DB env):

``load_samples(source, literal_fields=(), validate=None, hub_split="train", key_field="sample_index") -> Loaded``
    ``source`` is a local ``.json`` (object keyed by sample index, or a list of rows),
    a local ``.jsonl`` (one row a line), or ``hf://<repo>[/<config>]`` (read with
    ``datasets.load_dataset``; needs the ``datasets`` package and a network).
    ``literal_fields``: names of fields that hold a dict/list and may arrive as a string;
    such strings are parsed with ``ast.literal_eval`` (JSON as a fallback).
    ``validate(row)`` raises ``ValueError`` (or KeyError/TypeError) for a malformed row;
    the row is then skipped and listed in ``Loaded.skipped`` as ``Skipped(key, reason)``
    and logged as a warning. Rows come out in sample-index order (numeric keys by value).
    ``Loaded.fingerprint`` is a sha256 over the kept rows (goes in run cards / split files).

``resolve_split(keys, split, split_file=None, val_fraction=0.3, seed=0) -> list[str]``
    ``split="all"`` returns ``keys``. ``"train"`` / ``"validation"`` read the split file
    when it exists (an unknown key there is an error: the file belongs to other data) and
    otherwise write it first: a seeded, hash-ordered partition of the sorted keys, written
    atomically. ``split_file=None`` puts it in ``default_split_path``.

``select(keys, task_ids=None, max_tasks=None) -> list[str]``
    keeps ``task_ids`` (every one must exist), then the first ``max_tasks``.

``val_source(data_path, val_path, val_file) -> str | None`` / ``merge_loaded(train, val) -> Loaded``
    The benchmark's validation tasks added to its train tasks, as the official code runs them
    (MemTensor/MemRL @ 7c3beba, ``scripts/merge_llb_train_val.py``): ``val_path: auto`` is the
    file ``val_file`` beside the train file, or the hub's ``validation`` split of the same
    dataset; a key in both files is an error naming the key and both files.

``run_order(keys, task_order) -> list[str]``
    ``"numeric"``: as given (sample-index order); ``"string"``: keys sorted as strings, so
    "10" < "2" (the official runner, ``memrl/run/llb_rl_runner.py``).

``task_key(task_id, prefix)`` / ``make_task_id(prefix, key)`` convert between sample keys
and the env's task ids (``"db-17"``, ``"os-17"``), which stay distinct when OS and DB
memories share one bank.
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from memrl.core.records import EpisodeResult, RetrievedMemory, Task, write_json_atomic
from memrl.llm.base import ModelProbe

if TYPE_CHECKING:
    from memrl.llm.client import EpisodeLLM

log = logging.getLogger(__name__)

HUB_PREFIX = "hf://"
SPLITS = ("all", "train", "validation")
VAL_AUTO = "auto"             # val_path: the validation tasks beside the train tasks
HUB_VAL_SPLIT = "validation"  # the hub split that holds them
TASK_ORDERS = ("numeric", "string")


class DataError(ValueError):
    """The task file cannot be read at all (missing, not JSON, wrong shape, split mismatch)."""


@dataclass(frozen=True)
class Skipped:
    """A row left out, with the reason (shown to the user and kept for reports)."""

    key: str
    reason: str


@dataclass
class Loaded:
    """The usable rows of a task file, in sample-index order, and the ones skipped."""

    source: str
    rows: dict[str, dict[str, Any]]
    skipped: list[Skipped] = field(default_factory=list)
    # where each row was read from, for a merged set (`merge_loaded`); empty: all from `source`
    origin: dict[str, str] = field(default_factory=dict)

    @property
    def keys(self) -> list[str]:
        return list(self.rows)

    @property
    def fingerprint(self) -> str:
        blob = json.dumps(self.rows, sort_keys=True, ensure_ascii=False, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()


def sort_keys(keys: Iterable[str]) -> list[str]:
    """Numeric keys by value first, then any other keys alphabetically."""
    keys = list(keys)
    return sorted(keys, key=lambda k: (0, int(k), "") if k.isdigit() else (1, 0, k))


def make_task_id(prefix: str, key: str) -> str:
    return f"{prefix}-{key}"


def task_key(task_id: str, prefix: str) -> str:
    head = f"{prefix}-"
    if not task_id.startswith(head):
        raise ValueError(f"task id {task_id!r} does not start with {head!r}")
    return task_id[len(head):]


# -- reading -------------------------------------------------------------------------------
def _read_local(path: Path, key_field: str) -> list[tuple[str, Any]]:
    if not path.is_file():
        raise DataError(f"no task file at {path}")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        pairs = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                pairs.append((f"line {n}", exc))  # reported as a malformed row below
                continue
            pairs.append((_row_key(row, key_field, n - 1), row))
        return pairs
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not valid JSON ({exc})") from exc
    if isinstance(data, dict):
        return [(str(k), v) for k, v in data.items()]
    if isinstance(data, list):
        return [(_row_key(row, key_field, i), row) for i, row in enumerate(data)]
    raise DataError(f"{path}: expected a JSON object keyed by sample index (or a list of rows)")


def _row_key(row: Any, key_field: str, position: int) -> str:
    if isinstance(row, Mapping) and row.get(key_field) is not None:
        return str(row[key_field])
    return str(position)


def _read_hub(source: str, split: str, key_field: str) -> list[tuple[str, Any]]:
    spec = source[len(HUB_PREFIX):].strip("/")
    parts = spec.split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise DataError(f"{source}: expected hf://<owner>/<name>[/<config>]")
    repo, config = "/".join(parts[:2]), (parts[2] if len(parts) == 3 else None)
    try:
        import datasets  # optional: only for reading from the hub
    except ImportError as exc:
        raise DataError(f"{source}: reading from the hub needs the `datasets` package "
                        "(pip install datasets), or download the JSON and pass its path") from exc
    try:
        table = datasets.load_dataset(repo, name=config, split=split)
    except Exception as exc:  # offline, gated, unknown config: one clear message
        raise DataError(f"{source}: could not load split {split!r} from the hub ({type(exc).__name__}: {exc})") from exc
    return [(_row_key(row, key_field, i), dict(row)) for i, row in enumerate(table)]


def parse_literal(value: Any) -> Any:
    """A structure stored as a string (Python literal, or JSON) becomes the structure."""
    if not isinstance(value, str):
        return value
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not a Python literal or JSON value: {value[:60]!r}") from exc


def load_samples(
    source: str | os.PathLike[str],
    literal_fields: Sequence[str] = (),
    validate: Callable[[dict[str, Any]], None] | None = None,
    hub_split: str = "train",
    key_field: str = "sample_index",
) -> Loaded:
    """Rows of a task file keyed by sample index; see the module docstring."""
    source_str = str(source)
    if source_str.startswith(HUB_PREFIX):
        pairs = _read_hub(source_str, hub_split, key_field)
    else:
        pairs = _read_local(Path(source_str).expanduser(), key_field)
    rows: dict[str, dict[str, Any]] = {}
    skipped: list[Skipped] = []
    for key, raw in pairs:
        try:
            if isinstance(raw, Exception):
                raise ValueError(f"not valid JSON ({raw})")
            if key in rows:
                raise ValueError("duplicate sample index")
            if not isinstance(raw, Mapping):
                raise ValueError(f"expected an object, got {type(raw).__name__}")
            row = dict(raw)
            row.pop(key_field, None)
            for name in literal_fields:
                if name in row:
                    try:
                        row[name] = parse_literal(row[name])
                    except ValueError as exc:
                        raise ValueError(f"field {name!r}: {exc}") from exc
            if validate is not None:
                validate(row)
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
            reason = str(exc) if not isinstance(exc, KeyError) else f"missing field {exc}"
            skipped.append(Skipped(key, reason))
            continue
        rows[key] = row
    for s in skipped:
        log.warning("%s: skipped malformed sample %s: %s", source_str, s.key, s.reason)
    ordered = {k: rows[k] for k in sort_keys(rows)}
    return Loaded(source=source_str, rows=ordered, skipped=skipped)


# -- train and validation as one set (the official task set) ---------------------------------
def val_source(data_path: str, val_path: str | None, val_file: str) -> str | None:
    """Where the validation tasks are read from: None (``val_path`` null: none), the hub
    dataset of ``data_path`` (``auto`` with hub data; its ``validation`` split), the file
    ``val_file`` in the train file's folder (``auto``), or ``val_path`` itself."""
    if val_path is None:
        return None
    if val_path != VAL_AUTO:
        return val_path
    if data_path.startswith(HUB_PREFIX):
        return data_path
    return str(Path(data_path).expanduser().parent / val_file)


def source_label(source: str, hub_split: str) -> str:
    """A source as records name it: a hub dataset with its split (``hf://a/b#validation``)."""
    return f"{source}#{hub_split}" if source.startswith(HUB_PREFIX) else source


def merge_loaded(train: Loaded, val: Loaded) -> Loaded:
    """The train rows, then the validation rows, as one set. Keys stay the benchmark's sample
    indices (both files number the same 500 tasks), so a key in both is an error naming the
    key(s) and both files; the rows skipped in either stay listed. Each row's file is kept in
    ``origin``."""
    def keys(part: Loaded) -> set[str]:  # a skipped row's key too (not a JSONL line's number)
        return set(part.rows) | {k.key for k in part.skipped if not k.key.startswith("line ")}

    both = sorted(keys(train) & keys(val), key=str)
    if both:
        raise DataError(f"sample {', '.join(both[:10])}{' ...' if len(both) > 10 else ''} "
                        f"is in both {train.source} and {val.source}: the validation tasks must "
                        "be other tasks than the train tasks")
    rows = {**train.rows, **val.rows}
    origin = {**{k: train.source for k in train.rows}, **{k: val.source for k in val.rows}}
    return Loaded(source=f"{train.source} + {val.source}", rows=rows,
                  skipped=[*train.skipped, *val.skipped], origin=origin)


def run_order(keys: Sequence[str], task_order: str) -> list[str]:
    """The keys in the order a run plays them (module doc)."""
    if task_order not in TASK_ORDERS:
        raise DataError(f"unknown task order {task_order!r}; expected one of {TASK_ORDERS}")
    return sorted(keys, key=str) if task_order == "string" else list(keys)


# -- splits --------------------------------------------------------------------------------
def default_split_path(source: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None,
                       val_fraction: float, seed: int) -> Path:
    """Where a split file lives unless the config names one: the cache folder, named after
    the data file, the fraction and the seed."""
    from memrl.core.cachedir import default_cache_dir

    base = Path(cache_dir) if cache_dir else default_cache_dir()
    stem = Path(str(source).replace(HUB_PREFIX, "hf_").replace("/", "_")).stem
    return base.expanduser() / "lifelong_splits" / f"{stem}.val{val_fraction:g}.seed{seed}.json"


def make_split(keys: Sequence[str], val_fraction: float, seed: int) -> dict[str, list[str]]:
    """A partition of ``keys``: order by sha256(seed, key), the first share is validation."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError("val_fraction must lie strictly between 0 and 1")
    ranked = sorted(keys, key=lambda k: hashlib.sha256(f"{seed}:{k}".encode()).hexdigest())
    n_val = max(1, round(len(ranked) * val_fraction)) if ranked else 0
    val = set(ranked[:n_val])
    return {"train": sort_keys(k for k in keys if k not in val), "validation": sort_keys(val)}


def resolve_split(keys: Sequence[str], split: str, split_file: str | os.PathLike[str] | None = None,
                  val_fraction: float = 0.3, seed: int = 0, source: str = "",
                  cache_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """The keys of ``split``; see the module docstring."""
    if split not in SPLITS:
        raise DataError(f"unknown split {split!r}; expected one of {SPLITS}")
    if split == "all":
        return list(keys)
    path = Path(split_file).expanduser() if split_file else default_split_path(source, cache_dir, val_fraction, seed)
    if path.is_file():
        try:
            parts = json.loads(path.read_text(encoding="utf-8"))
            chosen = [str(k) for k in parts[split]]
        except (ValueError, KeyError, TypeError) as exc:
            raise DataError(f"split file {path}: unreadable or has no {split!r} list ({exc})") from exc
        known = set(keys)
        unknown = [k for k in chosen if k not in known]
        if unknown:
            raise DataError(f"split file {path} names samples that the data does not have "
                            f"(e.g. {unknown[:5]}): it was made for other data; delete it or pass another")
        return chosen
    parts = make_split(keys, val_fraction, seed)
    write_json_atomic(path, {"source": source, "val_fraction": val_fraction, "seed": seed, **parts})
    log.info("wrote split file %s (%d train / %d validation)", path, len(parts["train"]), len(parts["validation"]))
    return parts[split]


def select(keys: Sequence[str], task_ids: Sequence[str] | None = None, max_tasks: int | None = None,
           id_of: Callable[[str], str] = str) -> list[str]:
    """Keep the keys whose task id is in ``task_ids`` (all must exist), then the first ``max_tasks``."""
    chosen = list(keys)
    if task_ids is not None:
        by_id = {id_of(k): k for k in chosen}
        missing = [t for t in task_ids if t not in by_id]
        if missing:
            raise DataError(f"unknown task ids (not in this split): {missing[:5]}")
        wanted = set(task_ids)
        chosen = [k for k in chosen if id_of(k) in wanted]
    if max_tasks is not None:
        chosen = chosen[:max_tasks]
    return chosen


def env_error_result(errors: list[str], info: dict[str, Any]) -> EpisodeResult:
    """The result of an episode whose system could not be set up or broke down; its chat
    history (`memory_trajectory`) is empty: the agent never got the task."""
    return EpisodeResult(success=False, reward=0.0, steps=0, errors=errors, info=info,
                         outcome="env_error", outcome_detail="env_error", memory_trajectory="")


class TaskListing:
    """Loading, splitting, filtering and looking up an env's tasks, and playing one with the
    configured policy; shared by the OS and DB envs (before `Env` in their bases). The env
    keeps its settings (a ``LifelongTaskSettings``) as ``s`` and sets, in `__init__`:
    skipped, fingerprint, _tasks (None) and _lock; and, on the class: TASK_PREFIX, LABEL,
    LITERAL_FIELDS, `check_row`, `make_task(key, row)` and `run_episode(task, policy, injected)`."""

    TASK_PREFIX: str
    LABEL: str
    LITERAL_FIELDS: Sequence[str]
    # the file each task was read from, when train and validation tasks are merged (None: one file)
    task_files: dict[str, str] | None = None

    def _list_tasks(self) -> list[Task]:
        return [Task(task_id=make_task_id(self.TASK_PREFIX, key), intent=t.instruction,
                     payload={"key": key, **self._payload(t)})
                for key, t in self._load().items()]

    def data_skipped(self) -> list[dict[str, str]]:
        return [{"item": f"sample {k.key}", "reason": k.reason} for k in self.skipped]

    def _payload(self, task: Any) -> dict[str, Any]:
        """What a task's `payload` carries besides its key."""
        return {"skills": list(task.skills)}

    def solve(self, task: Task, memories: Sequence[RetrievedMemory], llm: "EpisodeLLM | None",
              seed: int) -> EpisodeResult:
        policy = self.new_policy(llm, memories)
        return self.run_episode(self.task(task.task_id), policy, injected=len(policy.memories))

    def model_probes(self, task: Task, llm: "EpisodeLLM") -> list[ModelProbe]:
        """The first turn of `task` as the model agent asks it (memrl.control.preflight)."""
        if not self.policy_cls.needs_llm:
            return []
        policy = self.new_policy(llm, [])
        return [ModelProbe(role="llm", purpose="act", prompt=policy.prompt(self.task(task.task_id), []),
                           answer_tokens=self.s.max_tokens, budget_key="env.max_tokens",
                           stop=policy.STOP)]

    def _read(self) -> Loaded:
        """The configured task rows: the train file, plus the validation tasks when
        ``val_path`` is set (`merge_loaded`)."""
        s = self.s
        train = load_samples(s.data_path, literal_fields=self.LITERAL_FIELDS,
                             validate=self.check_row, hub_split=s.hub_split)
        val_from = val_source(s.data_path, s.val_path, s.VAL_FILE)
        if val_from is None:
            return train
        train.source = source_label(s.data_path, s.hub_split)
        val = load_samples(val_from, literal_fields=self.LITERAL_FIELDS,
                           validate=self.check_row, hub_split=HUB_VAL_SPLIT)
        val.source = source_label(val_from, HUB_VAL_SPLIT)
        merged = merge_loaded(train, val)
        log.info("%s: %d tasks from %s and %d from %s", self.LABEL, len(train.rows), train.source,
                 len(val.rows), val.source)
        return merged

    def _load(self) -> dict[str, Any]:
        with self._lock:
            if self._tasks is None:
                s = self.s
                loaded = self._read()
                self.skipped, self.fingerprint = loaded.skipped, loaded.fingerprint
                keys = resolve_split(sort_keys(loaded.keys), s.split, s.split_file, s.val_fraction,
                                     s.split_seed, source=loaded.source, cache_dir=s.cache_dir)
                keys = run_order(keys, s.task_order)
                keys = select(keys, s.task_ids, s.max_tasks,
                              id_of=lambda k: make_task_id(self.TASK_PREFIX, k))
                if not keys:
                    raise ValueError(f"no {self.LABEL} tasks in {loaded.source} "
                                     f"(split {s.split!r}, after filters)")
                self.task_files = {k: loaded.origin[k] for k in keys} if loaded.origin else None
                self._tasks = {k: self.make_task(k, loaded.rows[k]) for k in keys}
            return self._tasks

    def note_task_file(self, info: dict[str, Any], key: str) -> None:
        """Name, in an episode's info (its record), the file its task came from, when the
        task set merges two files (nothing otherwise)."""
        if self.task_files is not None and key in self.task_files:
            info["task_file"] = self.task_files[key]

    def task(self, task_id: str) -> Any:
        key = task_key(task_id, self.TASK_PREFIX)
        try:
            return self._load()[key]
        except KeyError:
            raise ValueError(f"unknown {self.LABEL} task {task_id!r}") from None
