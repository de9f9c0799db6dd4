"""What a teacher bank did to a student: copy accuracy and the teacher memories' utilities.

Inputs are run directories: a teacher run (`memrl.demo.teach`: the oracle's episodes, whose
memories are `e001:<task id>` in its bank) and student runs seeded from it
(`memory.bank.init_from`, so the copies are `init:e001:<task id>` in the student's bank).

- Copy accuracy. For a student episode and the teacher's episode on the same task, the steps
  compared are t = 1..min(student steps, teacher steps); a step is copied when the student's
  action equals the teacher's action at that step (after collapsing whitespace). Copy accuracy
  = copied steps / compared steps, summed over episodes. It is reported separately for
  episodes that were given the same task's teacher memory (`with_teacher`: what the issue
  calls copy accuracy) and for the others (`without`: how often the student picks the
  teacher's action anyway, e.g. with no memory at all). An exact replay is an episode whose
  actions are all the teacher's, in order, to the teacher's end.
- Teacher memories' Q. From the student's final bank: every teacher memory (id prefix
  `init:`), its Q and visits, how many of the episodes it was injected into were solved,
  and its movement from the Q it was seeded with (`extra.seeded_q`, written by
  `init_from.seed_once`; 0 after `init_q=reset`): rose (Q above it), fell (below), or unused.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from memrl.core.records import iter_jsonl
from memrl.core.rundir import RunDir
from memrl.memory.init_from import SEED_PREFIX


def _norm(action: str) -> str:
    return " ".join(str(action).split())


@dataclass
class TeacherEpisode:
    task_id: str
    success: bool
    actions: list[str]
    intent: str = ""


def teacher_episodes(teacher_run: str | Path) -> dict[str, TeacherEpisode]:
    """task id -> the teacher's (last) episode on it."""
    out: dict[str, TeacherEpisode] = {}
    for r in iter_jsonl(RunDir(teacher_run).episodes):
        out[r["task_id"]] = TeacherEpisode(r["task_id"], bool(r["success"]),
                                           [_norm(s["action"]) for s in r.get("transcript") or []],
                                           str(r.get("intent") or ""))
    return out


def teacher_memory(memory_id: str) -> tuple[str, str] | None:
    """(label, task id) of a seeded teacher memory: `init:e<epoch>:<task id>` (label "") or,
    from a merged bank (`memrl.teach.history_bank`), `init:<label>:e<epoch>:<task id>`; else None."""
    if not memory_id.startswith(SEED_PREFIX):
        return None
    rest = memory_id[len(SEED_PREFIX):]
    for label in ("", rest.partition(":")[0]):
        tail = rest[len(label) + 1:] if label else rest
        head, sep, task = tail.partition(":")
        if sep and head.startswith("e") and head[1:].isdigit():
            return label, task
    return None


def teacher_memory_task(memory_id: str) -> str | None:
    """The task id of a seeded teacher memory (see `teacher_memory`), else None."""
    found = teacher_memory(memory_id)
    return found[1] if found else None


@dataclass
class CopyCounts:
    episodes: int = 0
    steps: int = 0
    copied: int = 0
    replays: int = 0
    solved: int = 0

    @property
    def accuracy(self) -> float | None:
        return self.copied / self.steps if self.steps else None

    def add(self, student: list[str], teacher: TeacherEpisode, success: bool) -> None:
        n = min(len(student), len(teacher.actions))
        self.episodes += 1
        self.steps += n
        self.copied += sum(a == b for a, b in zip(student[:n], teacher.actions[:n]))
        self.replays += int(bool(teacher.actions) and student[:len(teacher.actions)] == teacher.actions)
        self.solved += int(success)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "accuracy": self.accuracy}


@dataclass
class CopyReport:
    with_teacher: CopyCounts = field(default_factory=CopyCounts)
    without: CopyCounts = field(default_factory=CopyCounts)

    def to_dict(self) -> dict[str, Any]:
        return {"with_teacher": self.with_teacher.to_dict(), "without": self.without.to_dict()}


def copy_accuracy(student_run: str | Path, teacher: dict[str, TeacherEpisode],
                  epochs: Iterable[int] | None = None, label: str | None = None) -> dict[int, CopyReport]:
    """Copy accuracy per epoch of one student run (see module docstring). `label`: only a
    teacher memory of that label (a merged bank's `expert`) counts as given (None: any)."""
    wanted = set(epochs) if epochs is not None else None
    out: dict[int, CopyReport] = {}
    for r in iter_jsonl(RunDir(student_run).episodes):
        epoch = int(r["epoch"])
        if (wanted is not None and epoch not in wanted) or (r.get("info") or {}).get("carried"):
            continue
        t = teacher.get(r["task_id"])
        if t is None:
            continue
        given = any((found := teacher_memory(m.get("id", ""))) is not None and found[1] == r["task_id"]
                    and (label is None or found[0] == label) for m in r.get("injected") or [])
        rep = out.setdefault(epoch, CopyReport())
        (rep.with_teacher if given else rep.without).add(
            [_norm(s["action"]) for s in r.get("transcript") or []], t, bool(r["success"]))
    return dict(sorted(out.items()))


@dataclass
class TeacherMemoryQ:
    memory_id: str
    task_id: str
    teacher_solved: bool
    q_start: float
    q: float
    visits: int
    used_solved: int  # student episodes it was injected into that were solved
    used_failed: int
    label: str = ""  # a merged bank's part (`attempt` / `expert`), "" for a plain teacher bank

    @property
    def movement(self) -> str:
        if self.used_solved + self.used_failed == 0:
            return "unused"
        return "rose" if self.q > self.q_start else "fell" if self.q < self.q_start else "unchanged"


def teacher_q(student_run: str | Path) -> list[TeacherMemoryQ]:
    """The teacher memories of a student run's final bank, by Q (highest first)."""
    from memrl.memory.bank import ChromaBank

    run = RunDir(student_run)
    used: dict[str, list[int]] = {}
    for r in iter_jsonl(run.episodes):
        for m in r.get("injected") or []:
            used.setdefault(m.get("id", ""), [0, 0])[0 if r["success"] else 1] += 1
    bank = ChromaBank(run.bank, create=False)
    try:
        entries = [e for e in bank.iter_entries() if e.memory_id.startswith(SEED_PREFIX)]
    finally:
        bank.close()
    out = []
    for e in entries:
        q0 = float((e.extra or {}).get("seeded_q", 0.0))
        s, f = used.get(e.memory_id, [0, 0])
        found = teacher_memory(e.memory_id)
        out.append(TeacherMemoryQ(e.memory_id, e.task_id, bool(e.success), q0, float(e.q),
                                  int(e.visits), s, f, found[0] if found else ""))
    out.sort(key=lambda m: (-m.q, m.memory_id))
    return out
