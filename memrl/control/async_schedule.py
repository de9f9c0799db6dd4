"""The async schedule (`runner.schedule=async`; docs/design.md §1, §8 "Async commits"): a free
pool of `runner.max_in_flight` episodes, each retrieving when it starts (logged first,
memrl.journal.launches) and committed, as a "batch" of one, as soon as it finishes and its
epoch's turn has come; the replay of a crashed session's launches and of another run
(`runner.replay_from`).
"""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from memrl.core.records import EpisodeRecord, RetrievedMemory, Task, iter_jsonl
from memrl.core.rundir import RunDir
from memrl.core.seeding import derive_seed
from memrl.core.stops import BUDGET, FAILED, RunRefused, RunStopped
from memrl.journal import recovery
from memrl.journal.commit import Checkpoint
from memrl.journal.launches import Launch, LaunchLog, first_launches
from memrl.memory.textstore import TextStore

if TYPE_CHECKING:
    from tqdm import tqdm

    from memrl.control.schedule_seam import ScheduledRun
    from memrl.memory.base import LearnItem

Source = tuple[list[Launch], dict[int, list[str]]]  # a replayed run's launches, its commit orders
Cell = tuple[int, str]  # (epoch, task id)


def replay_source(run: str, tasks: Sequence[Task]) -> Source:
    """`runner.replay_from`: the source run's launches of the epochs it finished, in the
    order it launched them (its log's order, across epochs), and per such epoch its
    commit order (task ids)."""
    src = RunDir(Path(str(run)).expanduser())
    launches = LaunchLog(src.launches).read()
    records = recovery.read_records(src.episodes) if src.episodes.exists() else []
    ids = {t.task_id for t in tasks}
    orders: dict[int, list[str]] = {}
    firsts: dict[Cell, Launch] = {}
    for epoch in sorted({int(r["epoch"]) for r in records}):
        order = [str(r["task_id"]) for r in sorted((r for r in records if int(r["epoch"]) == epoch),
                                                      key=lambda r: int(r["batch"]))]
        logged = first_launches(launches, epoch)
        if set(order) != ids or set(logged) != ids:
            continue  # an epoch the source did not finish (or over other tasks)
        orders[epoch] = order
        firsts.update(((epoch, tid), rec) for tid, rec in logged.items())
    plan = [rec for rec in launches if firsts.get((rec.epoch, rec.task_id)) is rec]
    return plan, orders


class AsyncSchedule:
    """The free pool over `epochs` (module doc). Episodes start in (epoch, task) order, after
    any launched-but-uncommitted ones of a crashed session (they replay with their logged
    memories); each commits as soon as it finishes and its epoch's turn has come (commits
    never interleave epochs). With more than one epoch the next epoch's episodes start
    during this one's drain (`runner.epoch_overlap`): a task's next episode once its
    previous one is committed. With `source` (replay_from), the launches and the commit
    order are the source run's: an episode starts once the bank holds as many updates as
    when it started there (its retrieval is checked against the logged one) and commits at
    its logged place."""

    def __init__(self, runner: "ScheduledRun", pool: ThreadPoolExecutor, epochs: list[int], tasks: list[Task],
                 source: Source | None) -> None:
        self.runner, self.pool, self.epochs, self.source = runner, pool, epochs, source
        self.texts = TextStore(runner.run_dir.memories, read_only=True)  # what launches name
        self.source_texts = TextStore(RunDir(Path(str(runner.s.replay_from)).expanduser()).memories,
                                      read_only=True) if source is not None else None
        self.total = len(tasks)
        self.by_id = {t.task_id: t for t in tasks}
        live = set(epochs)
        self.done: dict[int, set[str]] = {e: set() for e in epochs}  # committed, per epoch
        for r in iter_jsonl(runner.run_dir.episodes, runner.tail_start):  # epochs before are complete
            if int(r["epoch"]) in live:
                self.done[int(r["epoch"])].add(str(r["task_id"]))
        self.mine: dict[Cell, Launch] = {}  # launched (this session or a stopped one), in log order
        for rec in runner.launch_log.read():
            if rec.epoch in live:
                self.mine.setdefault((rec.epoch, rec.task_id), rec)
        self.next_launch = {e: 1 + max((rec.launch for (ep, _), rec in self.mine.items() if ep == e), default=-1)
                            for e in epochs}
        self.forced: list[Cell] | None = None  # a replay's commit order
        if source is not None:
            plan, orders = source
            missing = [e for e in epochs if e not in orders]
            if missing:
                raise RunRefused(f"runner.replay_from: {runner.s.replay_from} has no finished epoch "
                                 f"{missing[0]} over these tasks; replay at most the epochs it finished "
                                 "(runner.epochs)")
            self.forced = [(e, tid) for e in epochs for tid in orders[e] if tid not in self.done[e]]
            self.queue = [rec for rec in plan if rec.epoch in live and rec.task_id not in self.done[rec.epoch]]
        else:
            # a crashed session's in flight first (`mine` is in log order), then the rest in
            # (epoch, task) order
            self.queue = [rec for cell, rec in self.mine.items() if cell[1] not in self.done[cell[0]]]
            self.queue += [Launch(e, t.task_id, -1, -1) for e in epochs for t in tasks
                           if t.task_id not in self.done[e] and (e, t.task_id) not in self.mine]
        self.turn = epochs[0]  # the epoch whose episodes commit now
        while self.turn in live and len(self.done[self.turn]) == self.total:
            self.turn += 1
        self.in_flight: dict[Future, Launch] = {}
        self.finished: dict[Cell, tuple[EpisodeRecord, "LearnItem", Launch]] = {}
        self.stop: RunStopped | None = None  # a budget stop that waits for what is in flight
        self.errored: dict[int, int] = {}
        self.bar: "tqdm | None" = None  # made by `run`

    def run(self) -> Checkpoint:
        runner, epochs, total = self.runner, self.epochs, self.total
        remaining = sum(total - len(self.done[e]) for e in epochs)
        span = f"epoch {epochs[0]}/{runner.s.epochs}" if len(epochs) == 1 else \
            f"epochs {epochs[0]}-{epochs[-1]}/{runner.s.epochs}"
        self.bar = runner.progress(total * len(epochs), total * len(epochs) - remaining, span)
        self.errored = {e: runner.tally.epoch(e).rate_errors for e in epochs}  # committed before (resumed)
        try:
            while self.queue or self.in_flight or self.finished:
                self.launch_ready()
                self.collect_finished()
                self.commit_ready()
                if self.stop is not None and not self.in_flight:
                    runner.sync()
                    raise self.stop
                self.check_stall()
            runner.sync()
        finally:
            self.bar.close()
        return Checkpoint(epochs[-1], total - 1)  # the loop ends with every epoch committed

    # ------------------------------------------------------------------ launches
    def may_launch(self, nxt: Launch) -> bool:
        """Logged by a session that stopped (it replays as it was); or, with the source,
        the bank holds what it held when the source launched it; else its epoch's turn has
        come, or overlap lets it start in this epoch's drain once the task's episode of
        this epoch is committed."""
        if (nxt.epoch, nxt.task_id) in self.mine:
            return True
        if self.source is not None:
            return nxt.bank_version <= self.runner.version
        return nxt.epoch == self.turn or (self.runner.s.epoch_overlap and nxt.epoch == self.turn + 1
                                          and nxt.task_id in self.done[self.turn])

    def next_launch_at(self) -> int:
        """The queue index of the next episode to start, -1 for none now (a replay keeps
        the source's launch order)."""
        if self.source is not None:
            return 0 if self.queue and self.may_launch(self.queue[0]) else -1
        return next((j for j, rec in enumerate(self.queue) if self.may_launch(rec)), -1)

    def launch_ready(self) -> None:
        """Start what may start while a slot is free. A budget stop lets what is in flight
        (paid for) finish and commit; any other stop raises."""
        while self.queue and self.stop is None and len(self.in_flight) < self.runner.workers:
            i = self.next_launch_at()
            if i < 0:
                return
            try:
                self.runner.gate.before_batch(len(self.in_flight) + 1)
            except RunStopped as exc:
                if exc.status != BUDGET or not (self.in_flight or self.finished):
                    raise
                self.stop = exc
                return
            self.launch(self.queue.pop(i))

    def launch(self, nxt: Launch) -> None:
        """Retrieve (or take a stopped session's logged retrieval), log it, start the episode."""
        runner = self.runner
        epoch, task = nxt.epoch, self.by_id[nxt.task_id]
        logged = self.mine.get((epoch, task.task_id))
        if logged is not None:  # launched by a session that stopped: replay it
            launch, memories = logged, logged.retrieved(self.texts)
        else:
            memories = runner.retrieve(task, derive_seed(runner.seed, "retrieve", epoch, task.task_id))
            if self.source is not None:
                self.check_replayed(nxt, memories)
                memories = nxt.retrieved(self.source_texts)
            launch = Launch.of(epoch, task.task_id, self.next_launch[epoch], runner.version, memories)
            self.next_launch[epoch] += 1
            runner.launch_log.append(launch, sync=False)  # before the episode starts (synced with commits)
            self.mine[(epoch, task.task_id)] = launch
        self.in_flight[self.pool.submit(runner.play, epoch, -1, task, memories)] = launch

    def check_replayed(self, logged: Launch, memories: list[RetrievedMemory]) -> None:
        """A replayed launch retrieves what the source run logged, or the replay stops."""
        got = [(m.memory_id, round(m.q, 9)) for m in memories]
        want = [(m["memory_id"], round(float(m["q"]), 9)) for m in logged.memories]
        if got != want:
            raise RunStopped(FAILED, f"runner.replay_from: task {logged.task_id} of epoch {logged.epoch} "
                                     f"retrieved {got} at bank version {self.runner.version}, the source run "
                                     f"logged {want}: the replay diverged (another bank, memory "
                                     "config or embedder than the source run's)")

    # ------------------------------------------------------------------ commits
    def collect_finished(self) -> None:
        """Wait for at least one episode in flight to finish; keep what finished."""
        if not self.in_flight:
            return
        ready, _ = wait(list(self.in_flight), return_when=FIRST_COMPLETED)
        for fut in sorted(ready, key=lambda f: (self.in_flight[f].epoch, self.in_flight[f].launch)):
            launch = self.in_flight.pop(fut)
            record, item = fut.result()
            self.finished[(launch.epoch, launch.task_id)] = (record, item, launch)

    def next_commit(self) -> Cell | None:
        """The finished episode to commit now: the turn's epoch, in completion order or the
        source's; None for none now."""
        head = self.queue[0] if self.queue else None
        if self.source is not None and head is not None and (head.epoch, head.task_id) not in self.mine \
                and head.bank_version <= self.runner.version:
            return None  # it retrieved before this commit in the source run: launch it first
        if self.forced is not None:
            if self.forced[0] not in self.finished:
                return None
            return self.forced.pop(0)
        return next((c for c in self.finished if c[0] == self.turn), None)  # None: the next epoch's waits

    def commit_ready(self) -> None:
        while self.finished:
            cell = self.next_commit()
            if cell is None:
                return
            self.commit(cell)

    def commit(self, cell: Cell) -> None:
        """Commit one finished episode at the next position of its epoch; the epoch's end
        when it was its last."""
        runner = self.runner
        record, item, launch = self.finished.pop(cell)
        epoch, tid = cell
        self.errored[epoch] += runner.commit_played(
            epoch, len(self.done[epoch]), [(record, item)], bar=self.bar, errored_before=self.errored[epoch],
            epoch_size=self.total, bank_versions=[launch.bank_version], in_flight=len(self.in_flight))
        self.done[epoch].add(tid)
        if len(self.done[epoch]) == self.total:  # the epoch is complete: its line, its metrics
            self.turn = epoch + 1
            runner.end_epoch(epoch)

    def check_stall(self) -> None:
        """Nothing runs, nothing may start or commit: a schedule that cannot go on stops."""
        if self.in_flight or not (self.queue or self.finished) or self.next_launch_at() >= 0:
            return
        forced = self.forced
        if forced and forced[0] not in self.finished:
            raise RunStopped(FAILED, f"runner.replay_from: the commit of {forced[0][1]} in "
                                     f"epoch {forced[0][0]} cannot be played before the "
                                     "commits it depends on: the source run's launch log "
                                     "and records disagree")
        if not forced and not any(c[0] == self.turn for c in self.finished):
            raise RunStopped(FAILED, f"the async schedule cannot continue epoch {self.turn}: no "
                                     "episode can start or commit (a bug: please report it)")
