"""BigCodeBench tasks: reading them (hub or local JSONL), checking each row, and the seeded
train/validation division that every run reads from one split file.

Rows follow the hub's schema (bigcode/bigcodebench, bigcode/bigcodebench-hard): task_id,
complete_prompt, instruct_prompt, canonical_solution, code_prompt, test, entry_point, libs
(a string holding a Python list, or a list) and optionally doc_struct. A malformed row is
reported with its line number and skipped; only a source with no usable row is an error.
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from memrl.core.records import write_json_atomic

log = logging.getLogger(__name__)

HUB_DATASETS = {"full": "bigcode/bigcodebench", "hard": "bigcode/bigcodebench-hard"}
TEXT_FIELDS = ("task_id", "complete_prompt", "instruct_prompt", "canonical_solution",
               "code_prompt", "test", "entry_point")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class MalformedRow(ValueError):
    """One row that cannot be used as a task (the message says why)."""


@dataclass(frozen=True)
class BCBProblem:
    """One BigCodeBench task as the hub ships it, with `libs` parsed to a tuple."""

    task_id: str
    complete_prompt: str
    instruct_prompt: str
    canonical_solution: str
    code_prompt: str
    test: str
    entry_point: str
    libs: tuple[str, ...]
    doc_struct: str = ""

    @property
    def content_hash(self) -> str:
        """Changes whenever anything the episode uses changes (prompts, tests, solution)."""
        h = hashlib.sha256()
        for name in (*TEXT_FIELDS, "libs"):
            h.update(json.dumps(getattr(self, name)).encode())
        return h.hexdigest()[:16]


@dataclass
class LoadReport:
    """The usable problems of one source, and one line per skipped row."""

    source: str
    problems: list[BCBProblem]
    skipped: list[str] = field(default_factory=list)


def parse_libs(value: Any) -> tuple[str, ...]:
    """`libs` as the hub stores it ("['os', 'pandas']") or as a real list."""
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError) as exc:
            raise MalformedRow(f"libs is not a Python list literal ({exc.__class__.__name__})") from None
    if not isinstance(value, (list, tuple)) or not all(isinstance(x, str) for x in value):
        raise MalformedRow("libs must be a list of module names")
    return tuple(value)


def parse_row(row: Any) -> BCBProblem:
    """A checked problem, or MalformedRow naming what is wrong."""
    if not isinstance(row, Mapping):
        raise MalformedRow(f"expected a JSON object, got {type(row).__name__}")
    missing = [k for k in (*TEXT_FIELDS, "libs") if k not in row]
    if missing:
        raise MalformedRow(f"missing field(s) {', '.join(missing)}")
    for key in TEXT_FIELDS:
        if not isinstance(row[key], str):
            raise MalformedRow(f"{key} must be a string, got {type(row[key]).__name__}")
    for key in ("task_id", "test", "entry_point", "canonical_solution"):
        if not row[key].strip():
            raise MalformedRow(f"{key} is empty")
    if not _IDENTIFIER.match(row["entry_point"]):
        raise MalformedRow(f"entry_point {row['entry_point']!r} is not a Python identifier")
    doc = row.get("doc_struct", "")
    return BCBProblem(
        task_id=row["task_id"].strip(), complete_prompt=row["complete_prompt"],
        instruct_prompt=row["instruct_prompt"], canonical_solution=row["canonical_solution"],
        code_prompt=row["code_prompt"], test=row["test"], entry_point=row["entry_point"],
        libs=parse_libs(row["libs"]), doc_struct=doc if isinstance(doc, str) else json.dumps(doc))


def _collect(source: str, rows: Iterable[tuple[str, Any]]) -> LoadReport:
    """Parse (where, row) pairs; skip and report bad rows and repeated task ids. A row that is
    a `MalformedRow` instance (e.g. a line that is not JSON) is reported as it is."""
    report = LoadReport(source=source, problems=[])
    seen: dict[str, str] = {}
    for where, row in rows:
        try:
            if isinstance(row, MalformedRow):
                raise row
            problem = parse_row(row)
        except MalformedRow as exc:
            report.skipped.append(f"{where}: {exc}")
            continue
        if problem.task_id in seen:
            report.skipped.append(f"{where}: task_id {problem.task_id!r} repeats {seen[problem.task_id]}")
            continue
        seen[problem.task_id] = where
        report.problems.append(problem)
    for line in report.skipped:
        log.warning("bigcodebench: skipped %s", line)
    return report


def read_jsonl(path: str | os.PathLike[str]) -> LoadReport:
    """Every usable row of a local JSONL file; bad lines are reported as `<file>:<line>`."""
    path = Path(path).expanduser()

    def rows() -> Iterable[tuple[str, Any]]:
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    yield f"{path.name}:{n}", json.loads(line)
                except json.JSONDecodeError as exc:
                    yield f"{path.name}:{n}", MalformedRow(f"not valid JSON ({exc.msg} at column {exc.colno})")

    return _collect(str(path), rows())


def load_hub(subset: str, version: str) -> LoadReport:
    """The split `version` of the hub dataset for `subset`, through `datasets` (needs a
    connection the first time; `datasets` caches it)."""
    try:
        import datasets  # optional: only hub loading needs it
    except ImportError as exc:
        raise RuntimeError("loading BigCodeBench from the hub needs the `datasets` package "
                           "(pip install datasets), or pass env.data_path=<local JSONL>") from exc
    name = HUB_DATASETS[subset]
    try:
        ds = datasets.load_dataset(name, split=version)
    except Exception as exc:
        raise RuntimeError(f"could not load {name} split {version} from the hub "
                           f"({type(exc).__name__}: {exc}); pass env.data_path=<local JSONL>") from exc
    return _collect(f"{name}@{version}", ((f"{name}@{version} row {i}", dict(r)) for i, r in enumerate(ds)))


def load_problems(data_path: str | None, subset: str, version: str) -> LoadReport:
    report = read_jsonl(data_path) if data_path is not None else load_hub(subset, version)
    if not report.problems:
        detail = f" ({len(report.skipped)} malformed rows: {report.skipped[0]} ...)" if report.skipped else ""
        raise ValueError(f"no usable BigCodeBench task in {report.source}{detail}")
    return report


# ------------------------------------------------------------------ train/validation division
def task_sort_key(task_id: str) -> tuple[int, str]:
    """'BigCodeBench/15' sorts by its number, other ids after, by name."""
    tail = task_id.rsplit("/", 1)[-1]
    return (int(tail), task_id) if tail.isdigit() else (10**9, task_id)


def divide(task_ids: Sequence[str], seed: int, train_ratio: float) -> tuple[list[str], list[str]]:
    """Seeded train/validation division, the one the paper's code makes: ids sorted as
    strings, shuffled by `random.Random(seed)`, the first floor(n * train_ratio) are train
    (seed 42 on Hard gives the 103 train tasks of the official `hard_seed42` split file, seed
    123 on Full its `full_seed123` file). Both parts come back in numeric order."""
    ordered = sorted(set(task_ids), key=task_sort_key)
    shuffled = sorted(set(task_ids))
    random.Random(seed).shuffle(shuffled)
    n_train = int(len(shuffled) * train_ratio)
    train = set(shuffled[:n_train])
    return [t for t in ordered if t in train], [t for t in ordered if t not in train]


@dataclass
class Division:
    """What a split file holds."""

    seed: int
    train_ratio: float
    train: list[str]
    validation: list[str]

    def part(self, name: str) -> set[str]:
        if name == "train":
            return set(self.train)
        if name == "validation":
            return set(self.validation)
        return set(self.train) | set(self.validation)


def ids_fingerprint(task_ids: Iterable[str]) -> str:
    return hashlib.sha256("\n".join(sorted(task_ids)).encode()).hexdigest()[:10]


def default_split_path(cache_dir: Path, subset: str, task_ids: Sequence[str], seed: int,
                       train_ratio: float) -> Path:
    ratio = f"{train_ratio:g}".replace(".", "p")
    # "-strsort": divisions made before `divide` sorted ids as strings are not reused
    name = f"{subset}-{len(task_ids)}tasks-{ids_fingerprint(task_ids)}-seed{seed}-r{ratio}-strsort.json"
    return cache_dir / "bigcodebench" / "splits" / name


def read_split_file(path: Path) -> Division:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        division = Division(seed=int(data["seed"]), train_ratio=float(data["train_ratio"]),
                            train=[str(t) for t in data["train"]],
                            validation=[str(t) for t in data["validation"]])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"split_file {path}: not a split file ({type(exc).__name__}: {exc}); "
                         "expected JSON with seed, train_ratio, train, validation") from exc
    both = set(division.train) & set(division.validation)
    if both:
        raise ValueError(f"split_file {path}: ids in both parts: {sorted(both)[:5]}")
    return division


def write_split_file(path: Path, division: Division) -> None:
    write_json_atomic(path, {"seed": division.seed, "train_ratio": division.train_ratio,
                             "train": division.train, "validation": division.validation}, indent=1)


def load_or_create_division(path: Path, task_ids: Sequence[str], seed: int,
                            train_ratio: float) -> Division:
    """The division in `path` if it exists (it must assign every task id of the data), else a
    new seeded one, written there so later runs read the same."""
    if path.is_file():
        division = read_split_file(path)
        unassigned = sorted(set(task_ids) - set(division.train) - set(division.validation),
                            key=task_sort_key)
        if unassigned:
            raise ValueError(f"split_file {path} does not assign {len(unassigned)} task(s) of the "
                             f"data, e.g. {unassigned[:3]}; delete it or choose another split_file")
        return division
    train, validation = divide(task_ids, seed, train_ratio)
    division = Division(seed=seed, train_ratio=train_ratio, train=train, validation=validation)
    write_split_file(path, division)
    return division
