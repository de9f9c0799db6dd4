"""Epochs × batches: retrieve against the bank as of batch start, play the batch's episodes
concurrently, learn in task order, commit. Killing the process at any moment and starting
the same command again continues the run and ends in the same state.

Commit protocol for one batch (paths named by `memrl.core.rundir.RunDir`):
  1. state/journal.json    ← the planned bank update, the batch's records and what the
                             commit logs (its bank-update line, the texts it names) (atomic)
  2. bank/                 ← apply the update (idempotent: absolute values)
  3. memories.jsonl        ← the texts the records name (content-addressed: idempotent)
  4. episodes.jsonl        ← append the records (fsync)
  5. bank_updates.jsonl    ← append the batch's line: Q before -> after, added, removed (fsync)
  6. state/checkpoint.json ← (epoch, batch) committed and the bank's entry count (atomic
                             write); then the journal becomes state/last_commit.json.
On start (memrl.journal.recovery): episode lines beyond the checkpoint (a torn append) are dropped,
a committed last batch that lost records is restored from its copy, the bank's entry count
is checked against the checkpoint's, bank-update lines beyond the checkpoint are dropped,
and a journal newer than the checkpoint is re-applied, so a replayed commit appends each
line exactly once. A batch that never reached its journal is replayed; the response cache
makes that replay free and identical. Record building and the logs are in
memrl/journal/recording.py; the progress bar and the per-epoch log line in memrl/control/live.py.

What stops a run between batches (model errors that no retry cures, storage failures, too
many errored episodes, a budget, SIGTERM / SIGINT) is decided by a `memrl.control.guards.Gate` at
the commit boundaries: before a batch, after it is played, and around the commit.

Two schedules (`runner.schedule`):

- `batch` (default): the above. Deterministic: the same command gives the same run.
- `async`: a free pool of `runner.max_in_flight` episodes. An episode retrieves
  against the bank as it is when it starts (its retrieval is appended to the launch log,
  `memrl.journal.launches`, before it starts) and its update is committed, by the protocol above
  with a "batch" of one episode, as soon as it finishes: commits are numbered within the
  epoch in completion order (the record's `batch`). Commits never interleave epochs (epoch
  e+1's wait for epoch e's last), so the checkpoint's (epoch, commit) stays the run's
  order; but the pool does not drain at an epoch's end: epoch e+1's episodes start in
  epoch e's drain, a task's once its epoch-e episode is committed (`runner.epoch_overlap`;
  false, or a transfer run's per-epoch evaluation, makes epochs barriers). What an episode
  retrieves depends on timing, so a fresh async run is not repeatable; it is replayable:
  after a crash, launched but uncommitted episodes replay with their logged memories, and
  `runner.replay_from` plays a finished run again from its log in its launch and commit
  order, checking each retrieval against the log.

Every training record carries `bank_version` (episode updates in the bank when it retrieved)
and `staleness` (updates committed between its retrieval and its own): its place in its
batch for `batch`, timing for `async`; 0 everywhere is the paper's strictly online loop.
"""

from __future__ import annotations

import json
import logging
import os
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from tqdm import tqdm

from memrl.config.sections import RunnerSettings
from memrl.control.guards import Gate, counts_against_error_rate
from memrl.control.live import RunTally, progress_enabled
from memrl.core.records import (
    CRASH_DETAIL,
    EpisodeRecord,
    EpisodeResult,
    RetrievedMemory,
    Task,
    append_jsonl,
    iter_jsonl,
    rewrite_jsonl,
    write_json_atomic,
)
from memrl.core.rundir import RunDir
from memrl.core.safe_text import safe, safe_str
from memrl.core.seeding import derive_seed
from memrl.core.stops import BUDGET, FAILED, STORAGE, RunRefused, RunStopped
from memrl.core.storage import StorageError, writing
from memrl.journal import recovery
from memrl.journal.launches import Launch, LaunchLog, first_launches
from memrl.journal.recording import CommitLog, episode_record, mark_written, memory_texts
from memrl.llm.client import LLMClient
from memrl.memory.base import LearnItem, MemoryModule
from memrl.memory.entry import BankUpdate

if TYPE_CHECKING:
    from memrl.env.base import Env

log = logging.getLogger(__name__)


@dataclass
class Checkpoint:
    epoch: int = 1
    batch: int = -1  # last committed batch of `epoch`; -1 = none yet
    bank_entries: int | None = None  # the bank's entry count after that commit (None: unknown)

    def after(self, epoch: int, batch: int) -> bool:
        """True if (epoch, batch) is already committed."""
        return (epoch, batch) <= (self.epoch, self.batch)

    @property
    def last(self) -> tuple[int, int]:
        return (self.epoch, self.batch)

    @property
    def any_committed(self) -> bool:
        return self.batch >= 0 or self.epoch > 1


class Runner:
    def __init__(self, run_dir: str | Path | RunDir, *, env: "Env", memory: MemoryModule,
                 llm: LLMClient | None, settings: RunnerSettings, seed: int,
                 embed_intents: Callable[[list[str]], Any] | None = None,
                 on_epoch_end: Callable[[int], None] | None = None, gate: Gate | None = None,
                 reads_memories: bool | None = None):
        self.run_dir = RunDir(run_dir)
        # False for an oracle agent (its policy's `reads_memories`; None = ask the env): nothing
        # is retrieved or injected, so its episodes update no memory's Q (they are still
        # written as new memories: a teacher bank)
        policy = getattr(env, "policy_cls", None)
        self.reads_memories = bool(getattr(policy, "reads_memories", True)) if reads_memories is None \
            else reads_memories
        self.env, self.memory, self.llm = env, memory, llm
        self.s, self.seed = settings, seed
        self.embed_intents = embed_intents
        self.on_epoch_end = on_epoch_end
        self.gate = gate or Gate(max_error_rate=settings.max_error_rate)
        if llm is not None and llm.tripwire is None:
            llm.tripwire = self.gate.tripwire
        self.episodes_path = self.run_dir.episodes
        self.ckpt_path = self.run_dir.checkpoint
        self.journal_path = self.run_dir.journal
        self.last_commit_path = self.run_dir.last_commit
        self.eval_path = self.run_dir.eval_episodes
        self.eval_ckpt_path = self.run_dir.eval_checkpoint
        # batch: episodes of one batch in parallel, as many as the model serves at once; with
        # no model (oracle agents) as many as the env says it can run (e.g. sandboxes per
        # core). async: runner.max_in_flight (the env's limit still bounds an oracle's)
        if settings.schedule == "async":
            self.workers = settings.max_in_flight if llm is not None else \
                min(settings.max_in_flight, int(env.parallel_episodes))
        else:
            self.workers = llm.max_concurrency if llm is not None else int(env.parallel_episodes)
        self.launch_log = LaunchLog(self.run_dir.launches)
        self._embeddings: dict[str, list[float]] = {}
        self._solved: set[str] = set()
        self.commit_log = CommitLog(self.run_dir)
        self.tally = RunTally(n_tasks=0)
        self._version = 0  # episode updates committed to the bank (training, all epochs)

    # ------------------------------------------------------------- persistence
    def load_checkpoint(self) -> Checkpoint:
        d = recovery.read_state(self.ckpt_path, "the checkpoint", recovery.CHECKPOINT_FIX)
        if d is None:
            return Checkpoint()
        entries = d.get("bank_entries")
        return Checkpoint(epoch=int(d["epoch"]), batch=int(d["batch"]),
                          bank_entries=None if entries is None else int(entries))

    def _write_episodes(self, records: list[dict]) -> None:
        """Replace episodes.jsonl by `records` (atomic: a temp file, fsync, rename)."""
        with writing(self.episodes_path, "the episode records"):
            rewrite_jsonl(self.episodes_path, records)

    def recover(self, batches: Sequence[Sequence[Task]] | None = None,
                n_tasks: int | None = None) -> Checkpoint:
        """Bring the run directory to its last commit (module doc): records of committed
        batches only (the last one restored from its copy if a torn append cut it), the bank
        checked against the checkpoint, a newer journal re-applied. Refuses (RunRefused) a
        state it cannot trust, before changing anything."""
        ckpt = self.load_checkpoint()
        journal = recovery.read_state(self.journal_path, "the commit journal", recovery.JOURNAL_FIX)
        last_copy = recovery.read_state(self.run_dir.last_commit, "the last commit's copy",
                                        recovery.LAST_COMMIT_FIX)
        pending = journal is not None and not ckpt.after(journal["epoch"], journal["batch"])
        if journal is not None and not pending:  # committed; its rename to last_commit was cut
            last_copy = journal
        records = recovery.read_records(self.episodes_path) if self.episodes_path.exists() else []
        if batches is not None or n_tasks is not None:
            if self.s.schedule == "async":
                cells = recovery.async_cells(records, last_copy, ckpt.last if ckpt.any_committed else None,
                                             n_tasks or sum(map(len, batches or [])))
            else:
                cells = recovery.committed_cells(ckpt.after, batches, max(ckpt.epoch, 1))
            keep, restored = recovery.repair_records(self.episodes_path, records, cells,
                                                     ckpt.last if ckpt.any_committed else None, last_copy)
        else:
            keep = [r for r in records if ckpt.after(int(r["epoch"]), int(r["batch"]))]
            restored = 0
        update = BankUpdate.from_dict(journal["update"]) if pending else None
        recovery.check_bank(self.memory.entry_count(), ckpt.bank_entries, where=self.run_dir.bank,
                            last=ckpt.last, low=len(update.delete) if update else 0,
                            high=len(update.add) if update else 0)
        if restored or self.episodes_path.exists():  # also drops a torn last line
            self._write_episodes(keep)
        with writing(self.run_dir.bank_updates, "the bank-update log"):
            self.commit_log.truncate(ckpt.after)
        if pending:
            log.info("recovering batch %s of epoch %s from its journal", journal["batch"], journal["epoch"])
            self._commit(journal["epoch"], journal["batch"], update, journal["records"],
                         extras=journal.get("extras"), journal_written=True)
            return self.load_checkpoint()
        if journal is not None:
            with writing(self.last_commit_path, "the last commit's copy"):
                os.replace(self.journal_path, self.last_commit_path)
        return ckpt

    def _commit(self, epoch: int, batch: int, update: BankUpdate, records: list[dict],
                texts: dict[str, dict[str, str]] | None = None, *,
                extras: dict[str, Any] | None = None, journal_written: bool = False) -> None:
        """Commit one batch (the protocol above). `texts`: the injected memories' texts the
        records name; `extras` (recovery): what the journal says the commit logs."""
        if not journal_written:
            extras = self.commit_log.prepare(epoch, batch, update, self.memory, texts or {},
                                             first=not self.ckpt_path.exists())
            with writing(self.journal_path, "the commit journal"):
                write_json_atomic(self.journal_path, {"epoch": epoch, "batch": batch,
                                                      "update": update.to_dict(), "records": records,
                                                      "extras": extras})
        with writing(self.run_dir.bank, "the memory bank", any_error=True):
            self.memory.apply(update)
        with writing(self.run_dir.memories, "the memory texts"):
            self.commit_log.write_texts(extras)
        with writing(self.episodes_path, "the episode records"):
            append_jsonl(self.episodes_path, [json.dumps(r, ensure_ascii=False, sort_keys=True)
                                              for r in records])
        with writing(self.run_dir.bank_updates, "the bank-update log"):
            self.commit_log.write_bank_update(extras)
        with writing(self.ckpt_path, "the checkpoint"):
            write_json_atomic(self.ckpt_path, {"epoch": epoch, "batch": batch,
                                               "bank_entries": self.memory.entry_count()})
        with writing(self.last_commit_path, "the last commit's copy"):
            os.replace(self.journal_path, self.last_commit_path)
        self.tally.add(records)

    # ------------------------------------------------------------------ episodes
    def _episode_seed(self, epoch: int, task: Task) -> int:
        return derive_seed(self.seed, epoch, task.task_id)

    def _retrieve(self, task: Task, seed: int) -> list[RetrievedMemory]:
        return self.memory.retrieve(task, seed=seed) if self.reads_memories else []

    def _play(self, epoch: int, batch: int, task: Task, memories: list[RetrievedMemory],
              learn: bool = True) -> tuple[EpisodeRecord, LearnItem]:
        """One episode. `learn=False` (transfer evaluation): no digest, no carried tasks."""
        phase = "e" if learn else "eval"
        seed = self._episode_seed(epoch, task) if learn else derive_seed(self.seed, "eval", epoch, task.task_id)
        ep_llm = self.llm.episode(f"s{self.seed}/{phase}{epoch}/{task.task_id}", seed) if self.llm else None
        t0 = time.monotonic()
        if learn and self.memory.skip_solved and task.task_id in self._solved:
            return self._carried(epoch, batch, task, seed)
        stats = getattr(memories, "stats", None)  # the retrieval's pool (`Retrieved`), if recorded
        try:
            memories = self.memory.select(task, memories, llm=ep_llm)
            result = self.env.solve(task, memories, ep_llm, seed)
        except Exception as exc:  # an adapter bug must not lose the batch: record it
            self._trip_on_storage(exc)
            if self.gate.tripwire.tripped is None:  # else the run is stopping: said once, by the gate
                log.error("episode %s crashed: %s", task.task_id, safe_str(traceback.format_exc()))
            result = EpisodeResult(success=False, reward=0.0, steps=0, outcome="env_error",
                                   outcome_detail=CRASH_DETAIL,
                                   errors=[f"env crash: {type(exc).__name__}: {exc}"])
        # what the episode brought back (replies, sandbox output, messages) is made safe here,
        # once, before any of it reaches a memory, the journal, the records or the log
        result = safe(result)
        errored = bool(result.errors)
        try:
            digest = safe(self.memory.digest(task, result, epoch=epoch, llm=ep_llm)) if learn else None
        except Exception as exc:
            self._trip_on_storage(exc)
            log.error("digest of %s failed: %s", task.task_id, safe_str(traceback.format_exc()))
            digest = None
            result.errors.append(safe_str(f"memory digest: {type(exc).__name__}: {exc}"))
        info = dict(result.info)
        if stats is not None:
            info["retrieval"] = asdict(stats)
        if digest and digest.get("error"):
            info["writer_error"] = digest["error"]
        record = safe(episode_record(epoch=epoch, batch=batch, task=task, result=result,
                                     memories=memories, meter=ep_llm.meter if ep_llm else None,
                                     seed=seed, duration_s=time.monotonic() - t0, info=info))
        item = LearnItem(task=task, result=result, injected=memories, epoch=epoch, digest=digest,
                         errored=errored, embedding=self._embeddings.get(task.task_id, []))
        return record, item

    def _trip_on_storage(self, exc: BaseException) -> None:
        """A storage failure inside an episode stops the run (it is not the episode's)."""
        if isinstance(exc, StorageError):
            self.gate.tripwire.trip(STORAGE, str(exc))

    def _carried(self, epoch: int, batch: int, task: Task, seed: int) -> tuple[EpisodeRecord, LearnItem]:
        """A task already solved by a module that does not re-attempt solved tasks."""
        result = EpisodeResult(success=True, reward=1.0, steps=0, info={"carried": True},
                               outcome="success", outcome_detail="carried")
        record = EpisodeRecord(epoch=epoch, batch=batch, task_id=task.task_id, intent=task.intent,
                               success=True, reward=1.0, steps=0,
                               tokens={"prompt": 0, "completion": 0}, info={"carried": True},
                               seed=seed, outcome="success", outcome_detail="carried")
        return record, LearnItem(task=task, result=result, injected=[], epoch=epoch,
                                 embedding=self._embeddings.get(task.task_id, []))

    # ------------------------------------------------------------------ main loop
    def run(self, tasks: Sequence[Task], eval_tasks: Sequence[Task] | None = None) -> Checkpoint:
        """Train on `tasks` for the configured epochs. With `eval_tasks` (transfer protocol),
        after each epoch the frozen bank is evaluated on them: retrieval, no learning, records
        in `eval_episodes.jsonl`."""
        tasks = list(tasks)
        ids = [t.task_id for t in tasks]
        if len(set(ids)) != len(ids):
            raise ValueError("task ids must be unique within a run")
        if not tasks:
            raise ValueError("the environment listed no tasks")
        eval_tasks = list(eval_tasks or [])
        B = self.s.batch_size
        batches = [tasks[i:i + B] for i in range(0, len(tasks), B)]
        # the frozen bank's evaluation learns nothing, so its batching changes no result:
        # async evaluates max_in_flight episodes at a time
        E = B if self.s.schedule == "batch" else self.s.max_in_flight
        eval_batches = [eval_tasks[i:i + E] for i in range(0, len(eval_tasks), E)]
        if self.s.schedule == "async":
            ckpt = self.recover(n_tasks=len(tasks))
            self.launch_log.repair()
            source = self._replay_source(tasks) if self.s.replay_from else None
        else:
            ckpt = self.recover(batches)
        eval_ckpt = self._recover_eval()
        self._version = sum(1 for _ in iter_jsonl(self.episodes_path))
        if self.embed_intents is not None:
            everything = tasks + eval_tasks
            vecs = self.embed_intents([t.intent for t in everything])
            self._embeddings = {t.task_id: [float(x) for x in v] for t, v in zip(everything, vecs)}
        self.tally = RunTally(n_tasks=len(tasks))
        self.tally.add(iter_jsonl(self.episodes_path))
        self._solved = set(self.tally.solved_by)
        pool = ThreadPoolExecutor(max_workers=max(1, self.workers))
        try:
            for epoch in range(1, self.s.epochs + 1):
                if self.s.schedule == "async":
                    if not ckpt.after(epoch, len(tasks) - 1):
                        # one pool over the remaining epochs (the next starts in this one's
                        # drain); epoch by epoch when they are barriers
                        barriers = self.s.async_barriers or bool(eval_batches)
                        span = [epoch] if barriers else list(range(epoch, self.s.epochs + 1))
                        ckpt = self._train_async(pool, span, tasks, source)
                else:
                    todo = [b for b in range(len(batches)) if not ckpt.after(epoch, b)]
                    if todo:
                        ckpt = self._train_epoch(pool, epoch, batches, todo)
                        if self.on_epoch_end is not None:
                            self.on_epoch_end(epoch)
                eval_todo = [b for b in range(len(eval_batches)) if not eval_ckpt.after(epoch, b)]
                if eval_todo:
                    eval_ckpt = self._eval_epoch(pool, epoch, eval_batches, eval_todo)
        except BaseException:
            # a stop: episodes not yet started never start; the ones in flight end at their
            # next model call (the tripped client fails it at once)
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        return ckpt

    def _progress(self, total: int, done: int, desc: str) -> tqdm:
        return tqdm(total=total, initial=done, desc=desc, unit="task", dynamic_ncols=True,
                    disable=not progress_enabled(self.s.progress))

    def _postfix(self, bar: tqdm, epoch: int, **more: Any) -> None:
        """The epoch's solved / errored episodes and this session's retries, spend and tokens;
        with a budget, spend and tokens against it (memrl.control.budget); `more` (async: in flight)."""
        bar.set_postfix({**self.tally.postfix(epoch, self.llm.totals() if self.llm else None),
                         **more, **self.gate.postfix()})

    def _errored_so_far(self, path: Path, epoch: int) -> int:
        """Errored episodes of `epoch` already committed to `path` (a resumed epoch)."""
        return sum(1 for r in iter_jsonl(path) if int(r["epoch"]) == epoch and counts_against_error_rate(r))

    def _train_epoch(self, pool: ThreadPoolExecutor, epoch: int, batches: list[list[Task]],
                     todo: list[int]) -> Checkpoint:
        total = sum(map(len, batches))
        done = total - sum(len(batches[b]) for b in todo)
        bar = self._progress(total, done, f"epoch {epoch}/{self.s.epochs}")
        errored = self.tally.epoch(epoch).rate_errors  # committed before (a resumed epoch)
        try:
            for b in todo:
                batch = batches[b]
                self.gate.before_batch(len(batch))
                memories = [self._retrieve(t, derive_seed(self.seed, "retrieve", epoch, t.task_id))
                            for t in batch]
                outs = list(pool.map(lambda tm: self._play(epoch, b, tm[0], tm[1]), zip(batch, memories)))
                records = [asdict(r) for r, _ in outs]
                for i, r in enumerate(records):  # learned in task order after the batch's first i
                    r["bank_version"], r["staleness"] = self._version, i
                errored += self.gate.after_batch(records, epoch=epoch, batch=b, errored_before=errored,
                                                 epoch_size=total)
                update = self.memory.plan([item for _, item in outs])
                mark_written(records, update)
                with self.gate.committing():
                    self._commit(epoch, b, update, records, memory_texts(item.injected for _, item in outs))
                self._version += len(records)
                self.gate.committed(len(batch))
                self._solved.update(r["task_id"] for r in records if r["success"])
                bar.update(len(batch))
                self._postfix(bar, epoch)
        finally:
            bar.close()
        log.info("%s", self.tally.epoch_line(epoch, self.s.epochs))
        return Checkpoint(epoch, todo[-1])

    # ------------------------------------------------------------ async schedule
    def _replay_source(self, tasks: Sequence[Task]) -> tuple[list[Launch], dict[int, list[str]]]:
        """`runner.replay_from`: the source run's launches of the epochs it finished, in the
        order it launched them (its log's order, across epochs), and per such epoch its
        commit order (task ids)."""
        src = RunDir(Path(str(self.s.replay_from)).expanduser())
        launches = LaunchLog(src.launches).read()
        records = recovery.read_records(src.episodes) if src.episodes.exists() else []
        ids = {t.task_id for t in tasks}
        orders: dict[int, list[str]] = {}
        firsts: dict[tuple[int, str], Launch] = {}
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

    def _train_async(self, pool: ThreadPoolExecutor, epochs: list[int], tasks: list[Task],
                     source: tuple[list[Launch], dict[int, list[str]]] | None) -> Checkpoint:
        """The free pool over `epochs` (module doc). Episodes start in (epoch, task) order,
        after any launched-but-uncommitted ones of a crashed session (they replay with their
        logged memories); each commits as soon as it finishes and its epoch's turn has come
        (commits never interleave epochs). With more than one epoch the next epoch's
        episodes start during this one's drain (`runner.epoch_overlap`): a task's next
        episode once its previous one is committed. With `source` (replay_from), the
        launches and the commit order are the source run's: an episode starts once the bank
        holds as many updates as when it started there (its retrieval is checked against
        the logged one) and commits at its logged place."""
        total = len(tasks)
        by_id = {t.task_id: t for t in tasks}
        live = set(epochs)
        done: dict[int, set[str]] = {e: set() for e in epochs}  # committed, per epoch
        for r in iter_jsonl(self.episodes_path):
            if int(r["epoch"]) in live:
                done[int(r["epoch"])].add(str(r["task_id"]))
        mine: dict[tuple[int, str], Launch] = {}  # in log order
        for rec in self.launch_log.read():
            if rec.epoch in live:
                mine.setdefault((rec.epoch, rec.task_id), rec)
        next_launch = {e: 1 + max((rec.launch for (ep, _), rec in mine.items() if ep == e), default=-1)
                       for e in epochs}
        forced: list[tuple[int, str]] | None = None
        if source is not None:
            plan, orders = source
            missing = [e for e in epochs if e not in orders]
            if missing:
                raise RunRefused(f"runner.replay_from: {self.s.replay_from} has no finished epoch "
                                 f"{missing[0]} over these tasks; replay at most the epochs it finished "
                                 "(runner.epochs)")
            forced = [(e, tid) for e in epochs for tid in orders[e] if tid not in done[e]]
            queue = [rec for rec in plan if rec.epoch in live and rec.task_id not in done[rec.epoch]]
        else:
            # a crashed session's in flight first (`mine` is in log order), then the rest in
            # (epoch, task) order
            queue = [rec for cell, rec in mine.items() if cell[1] not in done[cell[0]]]
            queue += [Launch(e, t.task_id, -1, -1) for e in epochs for t in tasks
                      if t.task_id not in done[e] and (e, t.task_id) not in mine]
        turn = epochs[0]  # the epoch whose episodes commit now
        while turn in live and len(done[turn]) == total:
            turn += 1
        remaining = sum(total - len(done[e]) for e in epochs)
        span = f"epoch {epochs[0]}/{self.s.epochs}" if len(epochs) == 1 else \
            f"epochs {epochs[0]}-{epochs[-1]}/{self.s.epochs}"
        bar = self._progress(total * len(epochs), total * len(epochs) - remaining, span)
        errored = {e: self.tally.epoch(e).rate_errors for e in epochs}  # committed before (resumed)
        in_flight: dict[Future, Launch] = {}
        finished: dict[tuple[int, str], tuple[EpisodeRecord, LearnItem, Launch]] = {}
        stop: RunStopped | None = None

        def may_launch(nxt: Launch) -> bool:
            """Logged by a session that stopped (it replays as it was); or, with the source,
            the bank holds what it held when the source launched it; else its epoch's turn has
            come, or overlap lets it start in this epoch's drain once the task's episode of
            this epoch is committed."""
            if (nxt.epoch, nxt.task_id) in mine:
                return True
            if source is not None:
                return nxt.bank_version <= self._version
            return nxt.epoch == turn or (self.s.epoch_overlap and nxt.epoch == turn + 1
                                         and nxt.task_id in done[turn])

        def next_launch_at() -> int:
            """The queue index of the next episode to start, -1 for none now (a replay keeps
            the source's launch order)."""
            if source is not None:
                return 0 if queue and may_launch(queue[0]) else -1
            return next((j for j, rec in enumerate(queue) if may_launch(rec)), -1)

        try:
            while queue or in_flight or finished:
                while queue and stop is None and len(in_flight) < self.workers:
                    i = next_launch_at()
                    if i < 0:
                        break
                    nxt = queue[i]
                    try:
                        self.gate.before_batch(len(in_flight) + 1)
                    except RunStopped as exc:
                        if exc.status != BUDGET or not (in_flight or finished):
                            raise
                        stop = exc  # what is in flight is paid for: let it finish and commit
                        break
                    queue.pop(i)
                    epoch, task = nxt.epoch, by_id[nxt.task_id]
                    logged = mine.get((epoch, task.task_id))
                    if logged is not None:  # launched by a session that stopped: replay it
                        launch, memories = logged, logged.retrieved()
                    else:
                        seed = derive_seed(self.seed, "retrieve", epoch, task.task_id)
                        memories = self._retrieve(task, seed)
                        if source is not None:
                            self._check_replayed(nxt, memories)
                            memories = nxt.retrieved()
                        launch = Launch.of(epoch, task.task_id, next_launch[epoch], self._version, memories)
                        next_launch[epoch] += 1
                        self.launch_log.append(launch)  # before the episode starts
                        mine[(epoch, task.task_id)] = launch
                    in_flight[pool.submit(self._play, epoch, -1, task, memories)] = launch
                if in_flight:
                    ready, _ = wait(list(in_flight), return_when=FIRST_COMPLETED)
                    for fut in sorted(ready, key=lambda f: (in_flight[f].epoch, in_flight[f].launch)):
                        launch = in_flight.pop(fut)
                        record, item = fut.result()
                        finished[(launch.epoch, launch.task_id)] = (record, item, launch)
                # commit what finished: the turn's epoch, in completion order or the source's
                while finished:
                    head = queue[0] if queue else None
                    if source is not None and head is not None and (head.epoch, head.task_id) not in mine \
                            and head.bank_version <= self._version:
                        break  # it retrieved before this commit in the source run: launch it first
                    if forced is not None:
                        cell = forced[0]
                        if cell not in finished:
                            break
                        forced.pop(0)
                    else:
                        cell = next((c for c in finished if c[0] == turn), None)
                        if cell is None:
                            break  # next epoch's: it waits for this epoch's last commit
                    record, item, launch = finished.pop(cell)
                    epoch, tid = cell
                    position = len(done[epoch])
                    rec = asdict(record)
                    rec.update(batch=position, bank_version=launch.bank_version,
                               staleness=self._version - launch.bank_version)
                    errored[epoch] += self.gate.after_batch([rec], epoch=epoch, batch=position,
                                                            errored_before=errored[epoch], epoch_size=total)
                    update = self.memory.plan([item])
                    mark_written([rec], update)
                    with self.gate.committing():
                        self._commit(epoch, position, update, [rec], memory_texts([item.injected]))
                    self._version += 1
                    done[epoch].add(tid)
                    self.gate.committed_episodes(1)
                    if rec["success"]:
                        self._solved.add(tid)
                    bar.update(1)
                    self._postfix(bar, epoch, in_flight=len(in_flight))
                    if len(done[epoch]) == total:  # the epoch is complete: its line, its metrics
                        log.info("%s", self.tally.epoch_line(epoch, self.s.epochs))
                        turn = epoch + 1
                        if self.on_epoch_end is not None:
                            self.on_epoch_end(epoch)
                if stop is not None and not in_flight:
                    raise stop
                if not in_flight and (queue or finished) and next_launch_at() < 0:
                    # nothing runs, nothing may start or commit: a schedule that cannot go on
                    if forced and forced[0] not in finished:
                        raise RunStopped(FAILED, f"runner.replay_from: the commit of {forced[0][1]} in "
                                                 f"epoch {forced[0][0]} cannot be played before the "
                                                 "commits it depends on: the source run's launch log "
                                                 "and records disagree")
                    if not forced and not any(c[0] == turn for c in finished):
                        raise RunStopped(FAILED, f"the async schedule cannot continue epoch {turn}: no "
                                                 "episode can start or commit (a bug: please report it)")
        finally:
            bar.close()
        return Checkpoint(epochs[-1], total - 1)  # the loop ends with every epoch committed

    def _check_replayed(self, logged: Launch, memories: list[RetrievedMemory]) -> None:
        """A replayed launch retrieves what the source run logged, or the replay stops."""
        got = [(m.memory_id, round(m.q, 9)) for m in memories]
        want = [(m["memory_id"], round(float(m["q"]), 9)) for m in logged.memories]
        if got != want:
            raise RunStopped(FAILED, f"runner.replay_from: task {logged.task_id} of epoch {logged.epoch} "
                                     f"retrieved {got} at bank version {self._version}, the source run "
                                     f"logged {want}: the replay diverged (another bank, memory "
                                     "config or embedder than the source run's)")

    # ------------------------------------------------------------ transfer eval
    def _recover_eval(self) -> Checkpoint:
        d = recovery.read_state(self.eval_ckpt_path, "the evaluation checkpoint", recovery.CHECKPOINT_FIX)
        ckpt = Checkpoint(epoch=int(d["epoch"]), batch=int(d["batch"])) if d else Checkpoint()
        if self.eval_path.exists():
            keep = [r for r in recovery.read_records(self.eval_path)
                    if ckpt.after(int(r["epoch"]), int(r["batch"]))]
            tmp = self.eval_path.with_suffix(".jsonl.tmp")
            with writing(self.eval_path, "the evaluation records"):
                tmp.write_text("".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in keep))
                os.replace(tmp, self.eval_path)
        return ckpt

    def _eval_epoch(self, pool: ThreadPoolExecutor, epoch: int, batches: list[list[Task]],
                    todo: list[int]) -> Checkpoint:
        total = sum(map(len, batches))
        bar = self._progress(total, total - sum(len(batches[b]) for b in todo), f"eval after epoch {epoch}")
        errored = self._errored_so_far(self.eval_path, epoch)
        try:
            for b in todo:
                batch = batches[b]
                self.gate.before_batch(len(batch))
                memories = [self._retrieve(t, derive_seed(self.seed, "eval-retrieve", epoch, t.task_id))
                            for t in batch]
                outs = list(pool.map(lambda tm: self._play(epoch, b, tm[0], tm[1], learn=False),
                                     zip(batch, memories)))
                records = [asdict(r) for r, _ in outs]
                errored += self.gate.after_batch(records, epoch=epoch, batch=b, errored_before=errored,
                                                 epoch_size=total)
                with self.gate.committing():
                    with writing(self.run_dir.memories, "the memory texts"):
                        self.commit_log.write_texts(
                            {"texts": memory_texts(item.injected for _, item in outs)})
                    with writing(self.eval_path, "the evaluation records"):
                        append_jsonl(self.eval_path, [json.dumps(r, ensure_ascii=False, sort_keys=True)
                                                      for r in records])
                    with writing(self.eval_ckpt_path, "the evaluation checkpoint"):
                        write_json_atomic(self.eval_ckpt_path, {"epoch": epoch, "batch": b})
                self.gate.committed(len(batch))
                bar.update(len(batch))
                bar.set_postfix(**self.gate.postfix())
        finally:
            bar.close()
        return Checkpoint(epoch, todo[-1])
