"""Replay check: MemRL with the official-code switches against an independent reference of
what the official code (MemTensor/MemRL @ 7c3beba, `memrl/service/memory_service.py` with
its runners) does, on one synthetic stream with the same outcomes for both.

`OfficialReference` is this project's own reading of that code, written from its behaviour
and kept deliberately naive (plain dicts and lists, float64, no vector store):

- the bank is a dict from key text (a task description) to the ids filed under it, in
  insertion order, plus each key's embedding and each memory's Q;
- retrieval: cosine similarity of the query to every key; keys with sim >= threshold, sorted
  by sim (stable, so equal sims keep key insertion order), the first k; every memory of those
  keys is a candidate with its key's sim; Q statistics (mean, population std; std 1 when there
  is one candidate or none) over all candidates; candidates with Q < q_min then leave;
  score = w_sim * (sim - mean_s) / std_s + w_q * clip((Q - mean_q) / std_q, -3, 3); stable
  sort by score; the first topk are selected (ε = 0 here: the two sides draw random numbers
  differently, so the check runs without exploration);
- learning a batch, in task order: every selected memory's Q <- (1-α) Q + α r (floored);
  then each new memory joins the retrieved key with the highest sim >= the add threshold (the
  first such in retrieval order), else it is filed under its own text -- which starts that
  key afresh (the Lifelong runner instead passes [(own text, 1.0)] when nothing was retrieved,
  which appends to an existing bucket of that text).

`replay` drives `memrl.memory.memrl.MemRLMemory` (real Chroma bank) and the reference through
the same stream and counts the steps where both select the same memories.
"""

from __future__ import annotations

import math
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from memrl.core.records import EpisodeResult, Task
from memrl.memory.base import LearnItem


@dataclass
class StreamTask:
    task: Task
    vector: np.ndarray
    p_success: float


@dataclass
class Stream:
    tasks: list[StreamTask]
    epochs: int
    outcomes: dict[tuple[int, str], bool]  # (epoch, task id) -> success


def synthetic_stream(n_tasks: int = 60, epochs: int = 10, dim: int = 32, n_clusters: int = 6,
                     duplicate_share: float = 0.25, seed: int = 0) -> Stream:
    """Tasks in clusters of related intents (cos ~0.4-0.8 within a cluster), a share of them
    near-duplicates of an earlier task (cos ~0.9-0.99), each with its own success rate."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_clusters, dim))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    tasks: list[StreamTask] = []
    for i in range(n_tasks):
        if tasks and rng.random() < duplicate_share:
            base = tasks[int(rng.integers(len(tasks)))].vector
            v = base + rng.normal(scale=rng.uniform(0.02, 0.08), size=dim)
        else:
            v = centres[int(rng.integers(n_clusters))] + rng.normal(scale=0.11, size=dim) * rng.uniform(0.5, 1.6)
        v = v / np.linalg.norm(v)
        tasks.append(StreamTask(Task(f"t{i:03d}", f"synthetic intent {i:03d}"), v, float(rng.uniform(0.1, 0.9))))
    outcomes = {(e, t.task.task_id): bool(rng.random() < t.p_success)
                for e in range(1, epochs + 1) for t in tasks}
    return Stream(tasks, epochs, outcomes)


class TableEmbedder:
    """An embedder that looks texts up in a table (the stream's intent vectors)."""

    def __init__(self, table: dict[str, np.ndarray]):
        self.table = table

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.table[t] for t in texts]).astype(np.float32)


@dataclass
class ReferenceSettings:
    threshold: float
    k: int
    topk: int
    sim_mean: float
    sim_std: float
    alpha: float
    w_sim: float
    w_q: float
    q_init_pos: float
    q_init_neg: float
    success_reward: float
    failure_reward: float
    q_floor: float | None
    q_min: float | None
    add_threshold: float
    own_key_fallback: bool = False  # the Lifelong runner's [(own text, 1.0)]


@dataclass
class OfficialReference:
    s: ReferenceSettings
    keys: dict[str, list[str]] = field(default_factory=dict)
    key_vec: dict[str, np.ndarray] = field(default_factory=dict)
    q: dict[str, float] = field(default_factory=dict)

    def retrieve(self, vec: np.ndarray) -> tuple[list[str], list[tuple[str, float]], int]:
        """(selected ids, retrieved (key, sim) in rank order, candidate pool size)."""
        vec = np.asarray(vec, dtype=np.float64)
        sims = []
        for key in self.keys:
            kv = np.asarray(self.key_vec[key], dtype=np.float64)
            sim = float(vec @ kv) / ((math.sqrt(float(vec @ vec)) or 1e-8) * (math.sqrt(float(kv @ kv)) or 1e-8))
            if sim >= self.s.threshold:
                sims.append((key, sim))
        sims.sort(key=lambda x: x[1], reverse=True)
        sims = sims[:self.s.k]
        cands = [(mid, sim) for key, sim in sims for mid in self.keys[key]]
        if not cands:
            return [], sims, 0
        qs = [self.q[mid] if self.s.q_floor is None else max(self.s.q_floor, self.q[mid]) for mid, _ in cands]
        kept = [(mid, sim, q) for (mid, sim), q in zip(cands, qs) if self.s.q_min is None or q >= self.s.q_min]
        mean_q = statistics.fmean(qs)
        std_q = statistics.pstdev(qs) if len(qs) > 1 else 1.0
        std_q = std_q if std_q > 1e-9 else 1.0
        std_s = self.s.sim_std if self.s.sim_std > 1e-9 else 1.0
        scored = [(mid, self.s.w_sim * (sim - self.s.sim_mean) / std_s
                   + self.s.w_q * max(min((q - mean_q) / std_q, 3.0), -3.0)) for mid, sim, q in kept]
        scored.sort(key=lambda x: x[1], reverse=True)
        return [mid for mid, _ in scored[:self.s.topk]], sims, len(cands)

    def learn(self, batch: Sequence[tuple[str, str, np.ndarray, bool, list[str], list[tuple[str, float]]]]) -> None:
        """batch rows: (new memory id, own text, own vector, success, selected ids, retrieved keys)."""
        for _, _, _, success, selected, _ in batch:
            r = self.s.success_reward if success else self.s.failure_reward
            for mid in selected:
                new = (1.0 - self.s.alpha) * self.q[mid] + self.s.alpha * r
                self.q[mid] = new if self.s.q_floor is None else max(self.s.q_floor, new)
        for mid, text, vec, success, _, retrieved in batch:
            self.q[mid] = self.s.q_init_pos if success else self.s.q_init_neg
            if not retrieved and self.s.own_key_fallback:
                retrieved = [(text, 1.0)]
            match, best = None, -1.0
            for key, sim in retrieved:
                if sim >= self.s.add_threshold and sim > best:
                    match, best = key, sim
            if match is not None:
                self.keys.setdefault(match, []).append(mid)
                self.key_vec.setdefault(match, vec)
            else:
                self.keys[text] = [mid]  # a new key -- or an existing text's bucket started afresh
                self.key_vec[text] = vec


def reference_settings(memory: Any, *, own_key_fallback: bool = False) -> ReferenceSettings:
    """The reference's knobs from a MemRL memory config (e.g. `configs/official/<bench>.yaml`)."""
    q_pos = 1.0 if memory.q_init_by_outcome else float(memory.q_init)
    q_neg = 0.0 if memory.q_init_by_outcome else float(memory.q_init)
    mean, std = memory.sim_stats
    return ReferenceSettings(threshold=float(memory.delta), k=int(memory.k1), topk=int(memory.k2),
                             sim_mean=float(mean), sim_std=float(std), alpha=float(memory.alpha),
                             w_sim=1.0 - float(memory.lam), w_q=float(memory.lam), q_init_pos=q_pos,
                             q_init_neg=q_neg, success_reward=float(memory.reward_success),
                             failure_reward=float(memory.reward_failure),
                             q_floor=None if memory.q_floor is None else float(memory.q_floor),
                             q_min=None if memory.q_min is None else float(memory.q_min),
                             add_threshold=float(memory.dedup_threshold),
                             own_key_fallback=own_key_fallback)


@dataclass
class ReplayResult:
    steps: int
    agree: int  # steps where both selected the same set of memories
    same_pool: int  # steps where both had the same pool size
    mean_pool_ours: float
    mean_pool_reference: float

    @property
    def agreement(self) -> float:
        return self.agree / self.steps if self.steps else float("nan")


def replay(memory_settings: Any, stream: Stream, batch_size: int, *, own_key_fallback: bool = False,
           reference: ReferenceSettings | None = None, bank_dir: str | Path | None = None) -> ReplayResult:
    """Run `MemRLMemory(memory_settings)` and the reference through `stream` (ε forced to 0)."""
    from memrl.memory.memrl import MemRLMemory

    settings = memory_settings.model_copy(update={"epsilon": 0.0, "write_mode": "raw"})
    ref = OfficialReference(reference or reference_settings(settings, own_key_fallback=own_key_fallback))
    table = {t.task.intent: t.vector for t in stream.tasks}
    tmp = tempfile.TemporaryDirectory() if bank_dir is None else None
    where = Path(tmp.name if tmp is not None else bank_dir)
    ours = MemRLMemory(settings, bank_dir=where / "bank", embedder=TableEmbedder(table))
    steps = agree = same_pool = 0
    pools_ours: list[int] = []
    pools_ref: list[int] = []
    try:
        for epoch in range(1, stream.epochs + 1):
            for start in range(0, len(stream.tasks), batch_size):
                batch = stream.tasks[start:start + batch_size]
                got = [ours.retrieve(t.task) for t in batch]
                want = [ref.retrieve(t.vector) for t in batch]
                items, rows = [], []
                for t, g, (sel, keys, pool) in zip(batch, got, want):
                    steps += 1
                    agree += {m.memory_id for m in g} == set(sel)
                    same_pool += g.stats.pool == pool
                    pools_ours.append(g.stats.pool)
                    pools_ref.append(pool)
                    success = stream.outcomes[(epoch, t.task.task_id)]
                    res = EpisodeResult(success=success, reward=float(success), steps=1)
                    items.append(LearnItem(task=t.task, result=res, injected=list(g), epoch=epoch,
                                           digest={"experience": t.task.intent, "kind": "raw"},
                                           embedding=[float(x) for x in t.vector]))
                    rows.append((f"e{epoch:03d}:{t.task.task_id}", t.task.intent, t.vector, success, sel, keys))
                ours.apply(ours.plan_update(items))
                ref.learn(rows)
    finally:
        ours.close()
        if tmp is not None:
            tmp.cleanup()
    return ReplayResult(steps=steps, agree=agree, same_pool=same_pool,
                        mean_pool_ours=float(np.mean(pools_ours)), mean_pool_reference=float(np.mean(pools_ref)))


def saturation(memory_settings: Any, stream: Stream, batch_size: int = 1) -> dict[int, dict[str, float]]:
    """Per epoch, what MemRL's Phase-A pools held on `stream`: the mean pool size and the share
    of non-empty pools made only of the task's own memories (`memrl.metrics.compute.retrieval_by_epoch`
    on the run's retrieval records)."""
    from memrl.core.records import EpisodeRecord
    from memrl.memory.memrl import MemRLMemory
    from memrl.metrics.compute import retrieval_by_epoch

    settings = memory_settings.model_copy(update={"write_mode": "raw"})
    table = {t.task.intent: t.vector for t in stream.tasks}
    records: list[EpisodeRecord] = []
    with tempfile.TemporaryDirectory() as tmp:
        mem = MemRLMemory(settings, bank_dir=Path(tmp) / "bank", embedder=TableEmbedder(table))
        mem.setup([t.task for t in stream.tasks])
        try:
            for epoch in range(1, stream.epochs + 1):
                for start in range(0, len(stream.tasks), batch_size):
                    batch = stream.tasks[start:start + batch_size]
                    got = [mem.retrieve(t.task, seed=epoch) for t in batch]
                    items = []
                    for t, g in zip(batch, got):
                        success = stream.outcomes[(epoch, t.task.task_id)]
                        records.append(EpisodeRecord(epoch=epoch, batch=start, task_id=t.task.task_id,
                                                     intent=t.task.intent, success=success,
                                                     reward=float(success), steps=1,
                                                     info={"retrieval": {"pool": g.stats.pool,
                                                                         "own_only": g.stats.own_only}}))
                        items.append(LearnItem(task=t.task, result=EpisodeResult(success, float(success), 1),
                                               injected=list(g), epoch=epoch,
                                               digest={"experience": t.task.intent, "kind": "raw"},
                                               embedding=[float(x) for x in t.vector]))
                    mem.apply(mem.plan_update(items))
        finally:
            mem.close()
    return {int(e): v for e, v in retrieval_by_epoch(records).items()}
