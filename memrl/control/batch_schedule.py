"""The batch schedule (`runner.schedule=batch`, docs/design.md §1): an epoch's batches in
order, each retrieved against the bank as of its start, played concurrently and committed
(`Runner.commit_played`); and the transfer evaluation after an epoch, batch by batch over
the frozen bank (both schedules).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from memrl.control.guards import counts_against_error_rate
from memrl.core.records import EpisodeRecord, Task, iter_jsonl
from memrl.core.seeding import derive_seed
from memrl.journal.commit import Checkpoint

if TYPE_CHECKING:
    from memrl.control.schedule_seam import ScheduledRun
    from memrl.memory.base import LearnItem


def play_batch(runner: "ScheduledRun", pool: ThreadPoolExecutor, epoch: int, b: int, batch: list[Task], *,
               learn: bool = True) -> list[tuple[EpisodeRecord, "LearnItem"]]:
    """Batch `b`'s episodes, once the gate lets it start: retrieved first (in task order),
    then played concurrently. `learn=False`: the transfer evaluation's."""
    runner.gate.before_batch(len(batch))
    tag = "retrieve" if learn else "eval-retrieve"
    memories = [runner.retrieve(t, derive_seed(runner.seed, tag, epoch, t.task_id)) for t in batch]
    return list(pool.map(lambda tm: runner.play(epoch, b, tm[0], tm[1], learn=learn), zip(batch, memories)))


def train_epoch(runner: "ScheduledRun", pool: ThreadPoolExecutor, epoch: int, batches: list[list[Task]],
                todo: list[int]) -> Checkpoint:
    """The batches `todo` of a training epoch (the others are committed), then the epoch's end."""
    total = sum(map(len, batches))
    bar = runner.progress(total, total - sum(len(batches[b]) for b in todo), f"epoch {epoch}/{runner.s.epochs}")
    errored = runner.tally.epoch(epoch).rate_errors  # committed before (a resumed epoch)
    try:
        for b in todo:
            played = play_batch(runner, pool, epoch, b, batches[b])
            errored += runner.commit_played(epoch, b, played, bar=bar, errored_before=errored, epoch_size=total,
                                            bank_versions=[runner.version] * len(played))
    finally:
        bar.close()
    runner.end_epoch(epoch)
    return Checkpoint(epoch, todo[-1])


def errored_so_far(path: Path, epoch: int) -> int:
    """Errored episodes of `epoch` already committed to `path` (a resumed epoch)."""
    return sum(1 for r in iter_jsonl(path) if int(r["epoch"]) == epoch and counts_against_error_rate(r))


def eval_epoch(runner: "ScheduledRun", pool: ThreadPoolExecutor, epoch: int, batches: list[list[Task]],
               todo: list[int]) -> Checkpoint:
    """The evaluation batches `todo` after training epoch `epoch`: no learning, records in
    `eval_episodes.jsonl`."""
    total = sum(map(len, batches))
    bar = runner.progress(total, total - sum(len(batches[b]) for b in todo), f"eval after epoch {epoch}")
    errored = errored_so_far(runner.run_dir.eval_episodes, epoch)
    try:
        for b in todo:
            played = play_batch(runner, pool, epoch, b, batches[b], learn=False)
            errored += runner.commit_played(epoch, b, played, bar=bar, errored_before=errored, epoch_size=total,
                                            bank_versions=None)
    finally:
        bar.close()
    return Checkpoint(epoch, todo[-1])
