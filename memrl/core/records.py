"""Record types shared by every seam (env, memory, runner, metrics) and their JSONL I/O.

Everything a paper figure needs is derivable from `EpisodeRecord`s, so the record is
deliberately complete: outcome, injected memories (with their Q *before* the update),
token use, errors and the transcript. A record also explains itself: each injected memory
names its text by a content hash that the run's `memories.jsonl` resolves (memrl.journal.memtexts),
`written` is the id of the memory the episode wrote, and `model_calls` lists each model
call's purpose and cache key, under which the response cache keeps the prompt and the
answer (memrl.llm.response_cache). Records written before these fields read with them empty.

Every episode has an `outcome` from one vocabulary shared by all envs (`OUTCOMES`) and an
`outcome_detail`, the env's own finer class (BigCodeBench `syntax_error`, Lifelong-DB
`wrong_answer`, ...). Records written before the shared vocabulary carried only the env's
name, in `info["outcome"]`; reading them derives the shared one (`LEGACY_OUTCOMES`).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from memrl.core.memory_parts import MemoryParts, parts_of

# The shared outcome vocabulary: what happened to an episode, in the same words for every env.
OUTCOMES = (
    "success",      # solved
    "failure",      # the agent's attempt was judged and did not solve the task
    "timeout",      # the attempt (or its check) ran past the benchmark's time limit
    "env_error",    # the environment could not play or judge the episode (not the agent's fault)
    "llm_error",    # the agent's model call failed (after retries)
    "judge_error",  # a judge model gave no verdict
)

# The env-specific names `info["outcome"]` held before the shared vocabulary, as they map to
# it; used only to read old records (new ones carry `outcome` themselves). Never extended.
LEGACY_OUTCOMES = {
    "pass": "success", "correct": "success", "success": "success",
    "fail": "failure", "syntax_error": "failure", "incorrect": "failure", "failed": "failure",
    "wrong_answer": "failure", "no_answer": "failure", "table_mismatch": "failure",
    "timeout": "timeout", "eval_timeout": "timeout",
    "env_error": "env_error", "unsupported_input": "env_error",
    "llm_error": "llm_error", "solver_error": "llm_error",
    "judge_error": "judge_error",
}


def derive_outcome(success: bool, errors: Iterable[str], legacy: str | None = None) -> str:
    """The shared outcome of an episode that does not state one: from an old record's
    env-specific name where it has one, else from success and errors (a failed model call
    names `LLMError`; any other error is the environment's)."""
    if legacy in LEGACY_OUTCOMES:
        return LEGACY_OUTCOMES[legacy]
    if success:
        return "success"
    errors = list(errors)
    if any("LLMError" in e for e in errors):
        return "llm_error"
    return "env_error" if errors else "failure"


def check_outcome(outcome: str, success: bool) -> None:
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome {outcome!r} is not one of {OUTCOMES}")
    if success != (outcome == "success"):
        raise ValueError(f"outcome {outcome!r} contradicts success={success}")


HASH_CHARS = 16  # 64 bits of sha256: collisions are out of reach for any run's texts


def text_hash(intent: str, experience: str) -> str:
    """The content hash that names a memory's text (intent and experience)."""
    blob = json.dumps([intent, experience], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:HASH_CHARS]


@dataclass(frozen=True)
class Task:
    """One benchmark task. `task_id` is stable across epochs; `intent` is what retrieval embeds."""

    task_id: str
    intent: str
    payload: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass
class RetrievedMemory:
    """A memory chosen for injection into one episode, with the scores that chose it."""

    memory_id: str
    intent: str
    experience: str
    q: float  # utility at retrieval time (before this batch's update)
    similarity: float
    score: float  # Phase-B score (or similarity for similarity-only modules)
    success: bool | None = None
    # where its parts lie in its text (memrl.core.memory_record; None: a text without one)
    record: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    def parts(self) -> "MemoryParts":
        """Its parts (task, notes, trajectory ...), what a display shows (memrl.env.displays)."""
        return parts_of(self.experience, self.record)

    @property
    def text_hash(self) -> str:
        """The content hash of its text (intent and experience), resolved by memories.jsonl."""
        return text_hash(self.intent, self.experience)

    def to_record(self) -> dict[str, Any]:
        # chars: the memory's size as shown (intent + experience), for the plan's model of
        # how prompts grow with injected memories (memrl.control.plan)
        return {"id": self.memory_id, "q": self.q, "sim": self.similarity, "score": self.score,
                "chars": len(self.intent) + len(self.experience), "text": self.text_hash}


@dataclass(frozen=True)
class RetrievalStats:
    """What one retrieval's Phase-A pool looked like (recorded as `info.retrieval`)."""

    pool: int  # memories in the Phase-A pool, before Phase B picks the injected ones
    own_only: bool  # the pool was non-empty and held only memories written by this same task


class Retrieved(list):  # list[RetrievedMemory]
    """What a memory module's `retrieve` returns: the memories to inject, plus (for modules
    that record it) the `RetrievalStats` of the pool they were chosen from."""

    def __init__(self, memories: Iterable[RetrievedMemory] = (), stats: RetrievalStats | None = None):
        super().__init__(memories)
        self.stats = stats


@dataclass
class Step:
    """One turn of an episode: what the agent did and what the environment answered."""

    action: str
    observation: str


@dataclass
class EpisodeResult:
    """What an env adapter returns from `solve`: the episode minus bookkeeping. An env states
    `outcome` (one of `OUTCOMES`) and its own `outcome_detail`; left empty, the outcome is
    derived from success and errors."""

    success: bool
    reward: float
    steps: int
    transcript: list[Step] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    outcome: str = ""
    outcome_detail: str = ""
    # The episode as the official code hands it to its memory writer (each env's own text:
    # ALFWorld the whole dialogue, BigCodeBench the raw reply, HLE question + solution,
    # Lifelong the chat history); used by `memory.writer.layout=official`, never recorded.
    # None: the writer formats the transcript instead.
    memory_trajectory: str | None = None

    def __post_init__(self) -> None:
        if not self.outcome:
            self.outcome = derive_outcome(self.success, self.errors)
        check_outcome(self.outcome, self.success)

    @property
    def crashed(self) -> bool:
        """The env raised instead of returning a result (the runner recorded the crash)."""
        return self.outcome_detail == CRASH_DETAIL


CRASH_DETAIL = "env_crash"  # outcome_detail of an episode whose env raised (memrl.control.runner)


@dataclass
class EpisodeRecord:
    """One line of `episodes.jsonl`."""

    epoch: int
    batch: int
    task_id: str
    intent: str
    success: bool
    reward: float
    steps: int
    injected: list[dict[str, Any]] = field(default_factory=list)
    tokens: dict[str, int] = field(default_factory=dict)
    llm_calls: int = 0
    cache_hits: int = 0
    errors: list[str] = field(default_factory=list)
    transcript: list[dict[str, str]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    duration_s: float = 0.0
    outcome: str = ""         # one of OUTCOMES
    outcome_detail: str = ""  # the env's own class of the outcome
    written: str | None = None  # id of the memory this episode wrote (None: none)
    model_calls: list[dict[str, Any]] = field(default_factory=list)  # [{purpose, key}] in order
    cost_usd: float = 0.0  # the model calls' cost as recorded (a cached answer keeps its cost)
    # training episodes (None in eval records and in records written before these existed):
    # how many episode updates the bank held when this episode retrieved, and how many were
    # committed between that retrieval and this episode's own update (memrl.control.runner: the
    # batch schedule's staleness is the episode's place in its batch, async's is timing)
    bank_version: int | None = None
    staleness: int | None = None

    def __post_init__(self) -> None:
        if not self.outcome:  # an old record: its env-specific name was info["outcome"]
            legacy = (self.info or {}).get("outcome")
            self.outcome = derive_outcome(self.success, self.errors, legacy)
            if (self.outcome == "success") != bool(self.success):  # a name that says otherwise
                self.outcome = derive_outcome(self.success, self.errors)
            self.outcome_detail = self.outcome_detail or str(legacy or "")
        check_outcome(self.outcome, bool(self.success))

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "EpisodeRecord":
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in known})


def append_jsonl(path: str | Path, rows: Iterable[str], *, sync: bool = True) -> None:
    """Append pre-serialised JSON lines and fsync, so a crash never leaves half a batch
    (`sync=False`: flushed only, for a commit whose durability comes later, `sync_file`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        for row in rows:
            fh.write(row + "\n")
        fh.flush()
        if sync:
            os.fsync(fh.fileno())


def sync_file(path: str | Path) -> None:
    """fsync a file written before (nothing when it does not exist)."""
    path = Path(path)
    if not path.exists():
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def iter_jsonl(path: str | Path, start: int = 0) -> Iterator[dict[str, Any]]:
    """Yield rows, streamed (from byte `start`, a line's beginning); a torn last line (crash
    mid-write) is ignored, any other bad line raises."""
    path = Path(path)
    if not path.exists():
        return
    with open(path, encoding="utf-8", newline="\n") as fh:
        fh.seek(start)
        for i, line in enumerate(fh):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                if not line.endswith("\n"):
                    return  # only the last line can lack its newline
                where = f"{path}:{i + 1}" if not start else f"{path} (line {i + 1} after byte {start})"
                raise ValueError(f"{where}: not valid JSON ({exc})") from exc


def rewrite_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> None:
    """Replace a JSONL file by `rows` (atomic: a temp file, fsync, rename)."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def keep_committed(path: str | Path, committed: Callable[[int, int], bool]) -> None:
    """Rewrite a JSONL file of per-batch rows (bank-update lines) keeping only the rows whose
    (epoch, batch) is `committed` (drops a torn or orphaned append)."""
    path = Path(path)
    if not path.exists():
        return
    rewrite_jsonl(path, [r for r in iter_jsonl(path) if committed(int(r["epoch"]), int(r["batch"]))])


HEAVY = ("transcript", "model_calls")  # what only a reader of single episodes needs


def read_episodes(path: str | Path, *, light: bool = False) -> list[EpisodeRecord]:
    """The records of an episodes file; `light`: without their transcripts and model calls
    (most of a record's size), which tables, metrics and pages never read."""
    if not light:
        return [EpisodeRecord.from_dict(d) for d in iter_jsonl(path)]
    out = []
    for d in iter_jsonl(path):
        for key in HEAVY:
            d.pop(key, None)
        out.append(EpisodeRecord.from_dict(d))
    return out


def write_json_atomic(path: str | Path, obj: Any, indent: int | None = 2) -> None:
    """Write JSON via a temp file + rename so readers never see a partial file. The temp file
    is unique, so concurrent writers (e.g. the jobs of a parallel sweep) do not clash."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(obj, fh, indent=indent, sort_keys=True, ensure_ascii=False)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
