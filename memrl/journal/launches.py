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
- `memories`: the retrieved memories as they were (id, Q, similarity, score, success and
  the hash of the memory's text, which the run's `memories.jsonl` resolves, as for the
  episode records), i.e. what the episode is handed before its model-side `select`. Logs
  written before texts were named by hash carry each memory's intent and experience instead.

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
from typing import Any, Iterable, Mapping

from memrl.core.records import RetrievalStats, Retrieved, RetrievedMemory, append_jsonl, iter_jsonl
from memrl.core.storage import writing
from memrl.memory.textstore import cut_torn_tail


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
        rows = []
        for m in memories:
            row = asdict(m)
            del row["intent"], row["experience"]
            if row["record"] is None:  # a text without a record (memrl.core.memory_record)
                del row["record"]
            row["text"] = m.text_hash
            rows.append(row)
        return cls(epoch=epoch, task_id=task_id, launch=launch, bank_version=bank_version,
                   memories=rows, stats=asdict(stats) if stats is not None else None)

    def retrieved(self, texts: Mapping[str, Any] | Any = None) -> list[RetrievedMemory]:
        """The logged memories, as the episode was handed them; `texts` (the run's text store,
        memrl.memory.textstore) resolves the texts they name."""
        named = [str(m["text"]) for m in self.memories if "text" in m]
        found = texts.get_many(named) if named and texts is not None else {}
        out = []
        for m in self.memories:
            m = dict(m)
            if "text" in m:
                h = str(m.pop("text"))
                if h not in found:
                    raise ValueError(f"launch {self.launch} of epoch {self.epoch} ({self.task_id}) names "
                                     f"memory text {h}, which the run's memory texts lack")
                m.update(intent=found[h]["intent"], experience=found[h]["experience"])
            out.append(RetrievedMemory(**m))
        return Retrieved(out, RetrievalStats(**self.stats) if self.stats else None)

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

    def repair(self) -> None:
        """Cut a torn last line (so the next append starts on a line of its own), reading
        only the end of the log."""
        with writing(self.path, "the launch log"):
            cut_torn_tail(self.path)

    def append(self, launch: Launch, *, sync: bool = True) -> None:
        """One line (`sync=False`: flushed, synced with the commits, memrl.journal.commit)."""
        with writing(self.path, "the launch log"):
            append_jsonl(self.path, [launch.to_json()], sync=sync)
