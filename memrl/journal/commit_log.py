"""How the runner records episodes and batches so that a run explains itself.

- `episode_record`: one `EpisodeRecord` from the parts of a played episode: the injected
  memories named by their text hash, the model calls' purposes and cache keys, tokens, cost.
- `mark_written`: after a batch is planned, each record gets the id of the memory its
  episode wrote (`written`).
- `memory_texts`: the texts a batch's records name (hash -> intent, experience).
- `CommitLog`: what a commit appends beside the episode records, `memories.jsonl`
  (memrl.journal.memtexts) and `bank_updates.jsonl` (memrl.journal.banklog). Its lines are prepared
  before the bank is touched and kept in the batch's journal, so a commit that is
  replayed after a crash appends exactly what the first attempt would have, once.

The commit protocol itself (journal, bank, records, logs, checkpoint) is
`memrl.journal.commit.RunJournal`'s; this module only builds what it writes.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from memrl.core.records import EpisodeRecord, EpisodeResult, RetrievedMemory, Task, append_jsonl, keep_committed
from memrl.core.rundir import RunDir
from memrl.journal.banklog import plan_line
from memrl.journal.memtexts import MemoryTexts, merge

if TYPE_CHECKING:
    from memrl.llm.base import UsageMeter
    from memrl.memory.base import MemoryModule
    from memrl.memory.entry import BankUpdate


def episode_record(*, epoch: int, batch: int, task: Task, result: EpisodeResult,
                   memories: Sequence[RetrievedMemory], meter: "UsageMeter | None", seed: int,
                   duration_s: float, info: dict[str, Any]) -> EpisodeRecord:
    """The record of one played episode (the `written` id is set later, by `mark_written`)."""
    return EpisodeRecord(
        epoch=epoch, batch=batch, task_id=task.task_id, intent=task.intent,
        success=bool(result.success), reward=float(result.reward), steps=int(result.steps),
        injected=[m.to_record() for m in memories],
        tokens=meter.tokens() if meter else {"prompt": 0, "completion": 0},
        llm_calls=meter.calls if meter else 0, cache_hits=meter.cache_hits if meter else 0,
        errors=list(result.errors), transcript=[asdict(s) for s in result.transcript],
        info=info, seed=seed, duration_s=round(duration_s, 3),
        outcome=result.outcome, outcome_detail=result.outcome_detail,
        model_calls=[dict(c) for c in meter.model_calls] if meter else [],
        cost_usd=float(meter.cost_usd) if meter else 0.0)


def mark_written(records: list[dict[str, Any]], update: "BankUpdate") -> None:
    """Set each record's `written` to the id of the entry its episode added, if any (an added
    entry is the episode's when it carries the record's task id and epoch)."""
    by_episode = {(e.task_id, int(e.epoch)): e.memory_id for e in update.add}
    for r in records:
        r["written"] = by_episode.get((r["task_id"], int(r["epoch"])))


def memory_texts(memories: Iterable[Sequence[RetrievedMemory]]) -> dict[str, dict[str, str]]:
    """hash -> {"intent", "experience"} of every memory injected into these episodes."""
    return merge({m.text_hash: {"intent": m.intent, "experience": m.experience} for m in ms}
                 for ms in memories)


def bank_update_lines(extras: dict[str, Any] | None) -> list[str]:
    """The bank-update log lines a commit appends (none, or its batch's line)."""
    if extras and extras.get("bank_update") is not None:
        return [json.dumps(extras["bank_update"], ensure_ascii=False, sort_keys=True)]
    return []


class CommitLog:
    """`memories.jsonl` and `bank_updates.jsonl` of one run, as the commit step writes them."""

    def __init__(self, run_dir: str | RunDir) -> None:
        self.rd = RunDir(run_dir)
        self.texts = MemoryTexts(self.rd.memories)

    def prepare(self, epoch: int, batch: int, update: "BankUpdate", memory: "MemoryModule",
                texts: dict[str, dict[str, str]], *, first: bool) -> dict[str, Any]:
        """What this batch's commit appends (kept in the journal): its bank-update line and
        the texts its records and the update name. Before the update is applied."""
        line, named = plan_line(epoch, batch, update, memory, first=first)
        return {"bank_update": line, "texts": merge([texts, named])}

    def write_texts(self, extras: dict[str, Any] | None, *, sync: bool = True) -> None:
        """Before the records that name them are appended (and before the bank, which reads
        its texts from the same file)."""
        if extras and extras.get("texts"):
            self.texts.add(extras["texts"], sync=sync)

    def write_bank_update(self, extras: dict[str, Any] | None, *, sync: bool = True) -> None:
        """After the records, before the checkpoint (recovery drops a line past it)."""
        lines = bank_update_lines(extras)
        if lines:
            append_jsonl(self.rd.bank_updates, lines, sync=sync)

    def truncate(self, committed: Callable[[int, int], bool]) -> None:
        """On recovery: keep only the bank-update lines of committed batches."""
        keep_committed(self.rd.bank_updates, committed)
