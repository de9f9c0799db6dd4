"""The runner: one run's epochs over its tasks (docs/design.md §1). It recovers the run
directory, picks the schedule (`runner.schedule`: batches, memrl.control.batch_schedule, which
also holds the transfer evaluation; or a free pool, memrl.control.async_schedule), plays one
episode (`Runner.play`) and commits what was played (`Runner.commit_played`) through the run
directory's journal (memrl.journal.commit: the commit protocol and recovery, docs/design.md §8).
What stops a run is decided by a `memrl.control.guards.Gate` at the commit boundaries.

Every training record carries `bank_version` (episode updates in the bank when it retrieved)
and `staleness` (updates committed between its retrieval and its own): its place in its
batch for `batch`, timing for `async`; 0 everywhere is the paper's strictly online loop.
"""

from __future__ import annotations

import logging
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np
from tqdm import tqdm

from memrl.config.sections import RunnerSettings
from memrl.control.async_schedule import AsyncSchedule, replay_source
from memrl.control.batch_schedule import eval_epoch, train_epoch
from memrl.control.guards import Gate
from memrl.control.live import RunTally
from memrl.core.progress import progress_enabled
from memrl.core.records import CRASH_DETAIL, EpisodeRecord, EpisodeResult, RetrievedMemory, Task
from memrl.core.rundir import RunDir
from memrl.core.safe_text import safe, safe_str
from memrl.core.seeding import derive_seed, seeded_order
from memrl.core.stops import STORAGE
from memrl.core.storage import StorageError, writing
from memrl.journal.commit import Checkpoint, RunJournal
from memrl.journal.launches import LaunchLog
from memrl.journal.commit_log import episode_record, mark_written, memory_texts
from memrl.llm.client import LLMClient
from memrl.memory.base import LearnItem, MemoryModule

if TYPE_CHECKING:
    from memrl.env.base import Env

__all__ = ["Checkpoint", "Runner"]

log = logging.getLogger(__name__)


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
        # batch: episodes of one batch in parallel, as many as the model serves at once; with
        # no model (oracle agents) as many as the env says it can run (e.g. sandboxes per
        # core). async: runner.max_in_flight (the env's limit still bounds an oracle's)
        if settings.schedule == "async":
            self.workers = settings.max_in_flight if llm is not None else \
                min(settings.max_in_flight, int(env.parallel_episodes))
        else:
            self.workers = llm.max_concurrency if llm is not None else int(env.parallel_episodes)
        self.journal = RunJournal(self.run_dir, memory)
        self.commit_log = self.journal.commit_log
        self.launch_log = LaunchLog(self.run_dir.launches)
        # the tasks' intent embeddings, one float32 row per task (`_embedding`)
        self._embeddings = np.zeros((0, 0), dtype=np.float32)
        self._embedding_row: dict[str, int] = {}
        self.tail_start = 0  # where the records not counted in state/tally.json begin
        self._solved: set[str] = set()
        self.tally = RunTally(n_tasks=0)
        self.version = 0  # episode updates committed to the bank (training, all epochs)
        self.commits = 0  # commits of this session (training and evaluation)

    # ------------------------------------------------------------- persistence
    def load_checkpoint(self) -> Checkpoint:
        return self.journal.load_checkpoint()

    def recover(self, batches: Sequence[Sequence[Task]] | None = None,
                n_tasks: int | None = None) -> Checkpoint:
        """Bring the run directory to its last commit (`RunJournal.recover`)."""
        return self.journal.recover(batches, n_tasks, asynchronous=self.s.schedule == "async")

    # ------------------------------------------------------------------ episodes
    def retrieve(self, task: Task, seed: int) -> list[RetrievedMemory]:
        return self.memory.retrieve(task, seed=seed) if self.reads_memories else []

    def play(self, epoch: int, batch: int, task: Task, memories: list[RetrievedMemory],
             learn: bool = True) -> tuple[EpisodeRecord, LearnItem]:
        """One episode. `learn=False` (transfer evaluation): no digest, no carried tasks."""
        phase = "e" if learn else "eval"
        seed = derive_seed(self.seed, epoch, task.task_id) if learn else \
            derive_seed(self.seed, "eval", epoch, task.task_id)
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
                         errored=errored, embedding=self._embedding(task.task_id))
        return record, item

    def _embedding(self, task_id: str) -> Any:
        row = self._embedding_row.get(task_id)
        return self._embeddings[row] if row is not None else []

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
                                 embedding=self._embedding(task.task_id))

    # ------------------------------------------------------------------ commits
    def commit_played(self, epoch: int, batch: int, played: Sequence[tuple[EpisodeRecord, LearnItem]], *,
                      bar: tqdm, errored_before: int, epoch_size: int, bank_versions: Sequence[int] | None,
                      in_flight: int | None = None) -> int:
        """Commit played episodes as `batch` of `epoch`, the one commit step of both schedules
        and the evaluation: the gate's check of what was played (`errored_before`: the epoch's
        errored episodes committed so far), the planned bank update, the journal's commit
        (a signal waits for it), the count of updates in the bank, the budget, the solved
        tasks and the bar. `bank_versions`: the bank version each episode retrieved at (its
        record's `bank_version`; `staleness` follows, the episodes learning in order); None
        for the transfer evaluation, which updates no bank and commits to the evaluation
        records. `in_flight` (an async commit, one episode): the episodes still running,
        shown on the bar; the budget learns per episode. Returns how many episodes errored."""
        learn = bank_versions is not None
        records = [asdict(r) for r, _ in played]
        for i, r in enumerate(records):
            r["batch"] = batch
            if bank_versions is not None:
                r["bank_version"], r["staleness"] = bank_versions[i], self.version + i - bank_versions[i]
        errored = self.gate.after_batch(records, epoch=epoch, batch=batch, errored_before=errored_before,
                                        epoch_size=epoch_size)
        update = self.memory.plan_update([item for _, item in played]) if learn else None
        if update is not None:
            mark_written(records, update)
        texts = memory_texts(item.injected for _, item in played)
        with self.gate.committing():
            if update is not None:  # async: one episode a commit, made durable in groups (`sync`)
                self.journal.commit(epoch, batch, update, records, texts, grouped=in_flight is not None)
                self.tally.add(records)
            else:
                self.journal.commit_eval(epoch, batch, records, texts)
        self.commits += 1
        if learn:
            self.version += len(records)
            self._solved.update(r["task_id"] for r in records if r["success"])
        if in_flight is None:
            self.gate.committed(len(records))
        else:
            self.gate.committed_episodes(len(records))
        bar.update(len(records))
        if not learn:
            bar.set_postfix(**self.gate.postfix())
        elif in_flight is None:
            self._postfix(bar, epoch)
        else:
            self._postfix(bar, epoch, in_flight=in_flight)
        return errored

    def sync(self) -> None:
        """Make grouped commits durable now (memrl.journal.commit)."""
        with self.gate.committing():
            self.journal.sync()

    def end_epoch(self, epoch: int) -> None:
        """A training epoch is committed (and durable): its counts kept (state/tally.json), its
        log line, then `on_epoch_end` (its metrics)."""
        self.sync()
        with writing(self.run_dir.tally, "the run's counts"):
            self.tally.save(self.run_dir)
        log.info("%s", self.tally.epoch_line(epoch, self.s.epochs))
        if self.on_epoch_end is not None:
            self.on_epoch_end(epoch)

    # ------------------------------------------------------------------ main loop
    def run(self, tasks: Sequence[Task], eval_tasks: Sequence[Task] | None = None) -> Checkpoint:
        """Train on `tasks` for the configured epochs. With `eval_tasks` (transfer protocol),
        after each epoch the frozen bank is evaluated on them: retrieval, no learning, records
        in `eval_episodes.jsonl`."""
        tasks = list(tasks)
        if getattr(self.s, "task_order", "listed") == "seeded":  # one order per seed, every epoch
            tasks = seeded_order(tasks, self.seed)
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
            source = replay_source(self.s.replay_from, tasks) if self.s.replay_from else None
        else:
            ckpt = self.recover(batches)
        eval_ckpt = self.journal.recover_eval()
        if self.embed_intents is not None:
            everything = tasks + eval_tasks
            self._embeddings = np.asarray(self.embed_intents([t.intent for t in everything]), dtype=np.float32)
            self._embedding_row = {t.task_id: i for i, t in enumerate(everything)}
        # the committed records' counts: saved at the last epoch end, plus the records after it
        self.tally = RunTally(n_tasks=len(tasks))
        self.version, self.tail_start = self.tally.resume(self.run_dir)
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
                        ckpt = AsyncSchedule(self, pool, span, tasks, source).run()
                else:
                    todo = [b for b in range(len(batches)) if not ckpt.after(epoch, b)]
                    if todo:
                        ckpt = train_epoch(self, pool, epoch, batches, todo)
                eval_todo = [b for b in range(len(eval_batches)) if not eval_ckpt.after(epoch, b)]
                if eval_todo:
                    eval_ckpt = eval_epoch(self, pool, epoch, eval_batches, eval_todo)
        except BaseException:
            # a stop: episodes not yet started never start; the ones in flight end at their
            # next model call (the tripped client fails it at once)
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        return ckpt

    def progress(self, total: int, done: int, desc: str) -> tqdm:
        return tqdm(total=total, initial=done, desc=desc, unit="task", dynamic_ncols=True,
                    disable=not progress_enabled(self.s.progress))

    def _postfix(self, bar: tqdm, epoch: int, **more: Any) -> None:
        """The epoch's solved / errored episodes and this session's retries, spend and tokens;
        with a budget, spend and tokens against it (memrl.control.budget); `more` (async: in flight)."""
        bar.set_postfix({**self.tally.postfix(epoch, self.llm.totals() if self.llm else None),
                         **more, **self.gate.postfix()})
