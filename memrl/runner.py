"""Epochs × batches: retrieve against the bank as of batch start, play the batch's episodes
concurrently, learn in task order, commit. Killing the process at any moment and starting
the same command again continues the run and ends in the same state.

Commit protocol for one batch (paths named by `memrl.rundir.RunDir`):
  1. state/journal.json    ← the planned bank update and the batch's records (atomic write)
  2. bank/                 ← apply the update (idempotent: absolute values)
  3. episodes.jsonl        ← append the records (fsync)
  4. state/checkpoint.json ← (epoch, batch) committed (atomic write); then the journal goes.
On start, a journal newer than the checkpoint is re-applied; episode lines beyond the
checkpoint (a torn append) are dropped. A batch that never reached its journal is replayed;
the response cache makes that replay free and identical.
"""

from __future__ import annotations

import json
import logging
import os
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field, model_validator
from tqdm import tqdm

from memrl.llm.client import LLMClient
from memrl.memory.base import LearnItem, MemoryModule
from memrl.memory.entry import BankUpdate
from memrl.records import (EpisodeRecord, EpisodeResult, RetrievedMemory, Task, append_jsonl,
                           iter_jsonl, write_json_atomic)
from memrl.result_keys import extent, no_effect
from memrl.rundir import RunDir
from memrl.seeding import derive_seed

if TYPE_CHECKING:
    from memrl_envs.base import Env

log = logging.getLogger(__name__)


class RunnerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    epochs: int = extent(10, ge=1)
    batch_size: int = Field(1, ge=1, description="B=1 is strictly online")
    progress: bool = no_effect(True)
    metrics_every_epoch: bool = no_effect(True)
    # transfer protocol: after each training epoch, evaluate the frozen bank on another split
    mode: Literal["train", "transfer"] = "train"
    eval_split: str | None = None
    eval_max_tasks: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _check_transfer(self) -> "RunnerSettings":
        if self.mode == "transfer" and not self.eval_split:
            raise ValueError("eval_split: transfer mode needs a held-out split (e.g. valid_seen)")
        return self


@dataclass
class Checkpoint:
    epoch: int = 1
    batch: int = -1  # last committed batch of `epoch`; -1 = none yet

    def after(self, epoch: int, batch: int) -> bool:
        """True if (epoch, batch) is already committed."""
        return (epoch, batch) <= (self.epoch, self.batch)


class Runner:
    def __init__(self, run_dir: str | Path | RunDir, *, env: "Env", memory: MemoryModule,
                 llm: LLMClient | None, settings: RunnerSettings, seed: int,
                 embed_intents: Callable[[list[str]], Any] | None = None,
                 on_epoch_end: Callable[[int], None] | None = None,
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
        self.episodes_path = self.run_dir.episodes
        self.ckpt_path = self.run_dir.checkpoint
        self.journal_path = self.run_dir.journal
        self.eval_path = self.run_dir.eval_episodes
        self.eval_ckpt_path = self.run_dir.eval_checkpoint
        # episodes of one batch in parallel: as many as the model serves at once; with no
        # model (oracle agents) as many as the env says it can run (e.g. sandboxes per core)
        self.workers = llm.max_concurrency if llm is not None else int(env.parallel_episodes)
        self._embeddings: dict[str, list[float]] = {}
        self._solved: set[str] = set()

    # ------------------------------------------------------------- persistence
    def load_checkpoint(self) -> Checkpoint:
        if not self.ckpt_path.exists():
            return Checkpoint()
        d = json.loads(self.ckpt_path.read_text())
        return Checkpoint(epoch=int(d["epoch"]), batch=int(d["batch"]))

    def _truncate_episodes(self, ckpt: Checkpoint) -> None:
        """Keep only records of committed batches (drops a torn or orphaned append)."""
        if not self.episodes_path.exists():
            return
        keep = [r for r in iter_jsonl(self.episodes_path)
                if ckpt.after(int(r["epoch"]), int(r["batch"]))]
        tmp = self.episodes_path.with_suffix(".jsonl.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            for r in keep:
                fh.write(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.episodes_path)

    def recover(self) -> Checkpoint:
        ckpt = self.load_checkpoint()
        if self.journal_path.exists():
            j = json.loads(self.journal_path.read_text())
            if not ckpt.after(j["epoch"], j["batch"]):
                log.info("recovering batch %s of epoch %s from its journal", j["batch"], j["epoch"])
                self._truncate_episodes(ckpt)
                self._commit(j["epoch"], j["batch"], BankUpdate.from_dict(j["update"]),
                             j["records"], journal_written=True)
                return self.load_checkpoint()
            self.journal_path.unlink()
        self._truncate_episodes(ckpt)
        return ckpt

    def _commit(self, epoch: int, batch: int, update: BankUpdate, records: list[dict],
                journal_written: bool = False) -> None:
        if not journal_written:
            write_json_atomic(self.journal_path, {"epoch": epoch, "batch": batch,
                                                  "update": update.to_dict(), "records": records})
        self.memory.apply(update)
        append_jsonl(self.episodes_path, [json.dumps(r, ensure_ascii=False, sort_keys=True)
                                          for r in records])
        write_json_atomic(self.ckpt_path, {"epoch": epoch, "batch": batch})
        self.journal_path.unlink(missing_ok=True)

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
        try:
            memories = self.memory.select(task, memories, llm=ep_llm)
            result = self.env.solve(task, memories, ep_llm, seed)
        except Exception as exc:  # an adapter bug must not lose the batch: record it
            log.error("episode %s crashed: %s", task.task_id, traceback.format_exc())
            result = EpisodeResult(success=False, reward=0.0, steps=0,
                                   errors=[f"env crash: {type(exc).__name__}: {exc}"])
        errored = bool(result.errors)
        try:
            digest = self.memory.digest(task, result, epoch=epoch, llm=ep_llm) if learn else None
        except Exception as exc:
            log.error("digest of %s failed: %s", task.task_id, traceback.format_exc())
            digest = None
            result.errors.append(f"memory digest: {type(exc).__name__}: {exc}")
        info = dict(result.info)
        if digest and digest.get("error"):
            info["writer_error"] = digest["error"]
        meter = ep_llm.meter if ep_llm is not None else None
        record = EpisodeRecord(
            epoch=epoch, batch=batch, task_id=task.task_id, intent=task.intent,
            success=bool(result.success), reward=float(result.reward), steps=int(result.steps),
            injected=[m.to_record() for m in memories],
            tokens=meter.tokens() if meter else {"prompt": 0, "completion": 0},
            llm_calls=meter.calls if meter else 0, cache_hits=meter.cache_hits if meter else 0,
            errors=list(result.errors), transcript=[asdict(s) for s in result.transcript],
            info=info, seed=seed, duration_s=round(time.monotonic() - t0, 3),
            outcome=result.outcome, outcome_detail=result.outcome_detail)
        item = LearnItem(task=task, result=result, injected=memories, epoch=epoch, digest=digest,
                         errored=errored, embedding=self._embeddings.get(task.task_id, []))
        return record, item

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
        if self.embed_intents is not None:
            everything = tasks + eval_tasks
            vecs = self.embed_intents([t.intent for t in everything])
            self._embeddings = {t.task_id: [float(x) for x in v] for t, v in zip(everything, vecs)}
        ckpt = self.recover()
        eval_ckpt = self._recover_eval()
        self._solved = {r["task_id"] for r in iter_jsonl(self.episodes_path) if r["success"]}
        B = self.s.batch_size
        batches = [tasks[i:i + B] for i in range(0, len(tasks), B)]
        eval_batches = [eval_tasks[i:i + B] for i in range(0, len(eval_tasks), B)]
        with ThreadPoolExecutor(max_workers=max(1, self.workers)) as pool:
            for epoch in range(1, self.s.epochs + 1):
                todo = [b for b in range(len(batches)) if not ckpt.after(epoch, b)]
                if todo:
                    ckpt = self._train_epoch(pool, epoch, batches, todo)
                    if self.on_epoch_end is not None:
                        self.on_epoch_end(epoch)
                eval_todo = [b for b in range(len(eval_batches)) if not eval_ckpt.after(epoch, b)]
                if eval_todo:
                    eval_ckpt = self._eval_epoch(pool, epoch, eval_batches, eval_todo)
        return ckpt

    def _progress(self, total: int, done: int, desc: str) -> tqdm:
        return tqdm(total=total, initial=done, desc=desc, disable=not self.s.progress, unit="task",
                    dynamic_ncols=True)

    def _train_epoch(self, pool: ThreadPoolExecutor, epoch: int, batches: list[list[Task]],
                     todo: list[int]) -> Checkpoint:
        total = sum(map(len, batches))
        done = total - sum(len(batches[b]) for b in todo)
        bar = self._progress(total, done, f"epoch {epoch}/{self.s.epochs}")
        wins = 0
        for b in todo:
            batch = batches[b]
            memories = [self._retrieve(t, derive_seed(self.seed, "retrieve", epoch, t.task_id))
                        for t in batch]
            outs = list(pool.map(lambda tm: self._play(epoch, b, tm[0], tm[1]), zip(batch, memories)))
            records = [asdict(r) for r, _ in outs]
            update = self.memory.plan([item for _, item in outs])
            self._commit(epoch, b, update, records)
            self._solved.update(r["task_id"] for r in records if r["success"])
            wins += sum(r["success"] for r in records)
            bar.update(len(batch))
            bar.set_postfix(solved=wins)
        bar.close()
        return Checkpoint(epoch, todo[-1])

    # ------------------------------------------------------------ transfer eval
    def _recover_eval(self) -> Checkpoint:
        ckpt = Checkpoint(**json.loads(self.eval_ckpt_path.read_text())) \
            if self.eval_ckpt_path.exists() else Checkpoint()
        if self.eval_path.exists():
            keep = [r for r in iter_jsonl(self.eval_path) if ckpt.after(int(r["epoch"]), int(r["batch"]))]
            tmp = self.eval_path.with_suffix(".jsonl.tmp")
            tmp.write_text("".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in keep))
            os.replace(tmp, self.eval_path)
        return ckpt

    def _eval_epoch(self, pool: ThreadPoolExecutor, epoch: int, batches: list[list[Task]],
                    todo: list[int]) -> Checkpoint:
        total = sum(map(len, batches))
        bar = self._progress(total, total - sum(len(batches[b]) for b in todo), f"eval after epoch {epoch}")
        for b in todo:
            batch = batches[b]
            memories = [self._retrieve(t, derive_seed(self.seed, "eval-retrieve", epoch, t.task_id))
                        for t in batch]
            outs = list(pool.map(lambda tm: self._play(epoch, b, tm[0], tm[1], learn=False),
                                 zip(batch, memories)))
            append_jsonl(self.eval_path, [json.dumps(asdict(r), ensure_ascii=False, sort_keys=True)
                                          for r, _ in outs])
            write_json_atomic(self.eval_ckpt_path, {"epoch": epoch, "batch": b})
            bar.update(len(batch))
        bar.close()
        return Checkpoint(epoch, todo[-1])
