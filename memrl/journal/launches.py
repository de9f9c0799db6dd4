"""The launch log of an async run (`runner.schedule=async`): what each episode was given
before it started.

An async run starts an episode whenever a slot frees and commits its update when it
finishes, so what an episode retrieved depends on timing. Before an episode starts, one line
is appended (fsync) to `state/launches.jsonl` (`memrl.core.rundir.RunDir.launches`):

    {"epoch": 2, "task_id": "t17", "launch": 5, "bank_version": 41, "memories": [...]}

- `launch`: the episode's place in its epoch's launch order (0, 1, ...); the log's own order
  is the run's launch order across epochs (the next epoch's episodes start during an
  epoch's drain, `runner.epoch_overlap`);
- `bank_version`: how many episode updates the bank held when the episode retrieved (the
  run's committed training episodes, all epochs); the episode's own commit comes later, and
  its staleness is the number of commits in between (recorded with the episode);
- `memories`: the retrieved memories as they were (id, intent, experience, Q, similarity,
  score), i.e. what the episode is handed before its model-side `select`.

The commit position of an episode is the `batch` of its record in `episodes.jsonl` (async
commits one episode at a time, numbered within the epoch in completion order; the
checkpoint names the last one). The log and the records together are the run's schedule:

- after a crash, an episode that was launched but not committed replays with its logged
  memories (the response cache makes the replay free and identical), so a resumed run never
  retrieves twice for one episode;
- `runner.replay_from=<run dir>` plays a finished async run again from its log and its
  commit order, and checks each retrieval against the log (`memrl.control.async_schedule`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from memrl.core.records import RetrievalStats, Retrieved, RetrievedMemory, append_jsonl, iter_jsonl, rewrite_jsonl
from memrl.core.storage import writing


@dataclass
class Launch:
    """One line of the launch log."""

    epoch: int
    task_id: str
    launch: int
    bank_version: int
    memories: list[dict[str, Any]] = field(default_factory=list)
    stats: dict[str, Any] | None = None  # the retrieval's Phase-A pool (RetrievalStats), if recorded

    @classmethod
    def of(cls, epoch: int, task_id: str, launch: int, bank_version: int,
           memories: Iterable[RetrievedMemory]) -> "Launch":
        stats = getattr(memories, "stats", None)
        return cls(epoch=epoch, task_id=task_id, launch=launch, bank_version=bank_version,
                   memories=[asdict(m) for m in memories],
                   stats=asdict(stats) if stats is not None else None)

    def retrieved(self) -> list[RetrievedMemory]:
        """The logged memories, as the episode was handed them."""
        return Retrieved((RetrievedMemory(**m) for m in self.memories),
                         RetrievalStats(**self.stats) if self.stats else None)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Launch":
        return cls(epoch=int(d["epoch"]), task_id=str(d["task_id"]), launch=int(d["launch"]),
                   bank_version=int(d["bank_version"]), memories=list(d.get("memories") or []),
                   stats=d.get("stats"))


def first_launches(launches: Iterable[Launch], epoch: int) -> dict[str, Launch]:
    """task id -> its first launch in `epoch` among `launches`."""
    out: dict[str, Launch] = {}
    for rec in launches:
        if rec.epoch == epoch:
            out.setdefault(rec.task_id, rec)
    return out


class LaunchLog:
    """The launch log of one run directory: read, repaired (a torn last line dropped) and
    appended to by the runner's main thread only."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def read(self) -> list[Launch]:
        """Every launch logged (a torn last line, from a crash mid-append, is left out; a bad
        line elsewhere raises ValueError)."""
        return [Launch.from_dict(d) for d in iter_jsonl(self.path)]

    def repair(self) -> list[Launch]:
        """Rewrite the log without a torn last line (so the next append starts on a line of
        its own); returns what it holds."""
        launches = self.read()
        if not self.path.exists():
            return launches
        text = "".join(rec.to_json() + "\n" for rec in launches)
        if text.encode("utf-8") != self.path.read_bytes():
            with writing(self.path, "the launch log"):
                rewrite_jsonl(self.path, [asdict(rec) for rec in launches])
        return launches

    def append(self, launch: Launch) -> None:
        with writing(self.path, "the launch log"):
            append_jsonl(self.path, [launch.to_json()])
