"""MemRL (docs/design.md §4): a bank of (intent, experience, Q); two-phase retrieval (similarity gate
then utility-aware ranking); Monte-Carlo utility updates of the injected memories; one new
memory per episode written by the frozen model.

Defaults are the paper's. Every difference of the official code is a named switch whose
default is the paper's behaviour.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from memrl.core.records import EpisodeResult, RetrievalStats, Retrieved, Task
from memrl.memory.bank import BankSettings
from memrl.memory.base import BankedMemory, LearnItem, NewMemory
from memrl.memory.entry import BankUpdate, MemoryEntry
from memrl.memory.retrieval import (PhaseBOptions, TieRule, choose_key, epsilon_greedy, key_similarities, passes_gate,
                                    phase_a, pool_by_intent, rank_pool, similarity_quantile)
from memrl.memory.q_update import update_q
from memrl.memory.writer import ExperienceWriter

if TYPE_CHECKING:
    from memrl.llm.client import EpisodeLLM
    from memrl.llm.embed import Embedder

log = logging.getLogger(__name__)


class WriterSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_trajectory_chars: int = Field(3000, ge=0)  # the trajectory kept in a memory, in characters
    max_tokens: int = Field(160, ge=1)  # answer tokens of the writer's plan / reflection call
    include_trajectory: bool = True  # the memory holds the trajectory after the written summary
    # memrl: memrl's own layout | official: the official code's (memrl.memory.writer's docstring)
    layout: Literal["memrl", "official"] = "memrl"
    reflection_temperature: float | None = Field(None, ge=0.0, le=2.0, description="null: the model's "
                                                 "temperature (official: 0.3)")
    max_task_chars: int = Field(4096, ge=1, description="layout=official: the task text kept in the memory")


class MemRLSettings(BaseModel):
    """MemRL's settings; every default is the paper's (v2, Table 8). δ, k1 and k2 have none:
    they are the benchmark's (its env config's `retrieval` node, which configs/memory/memrl.yaml
    reads), so a memory config never carries one benchmark's values to another."""

    model_config = ConfigDict(extra="forbid")

    name: str = "memrl"  # the method's name (names the run directory and the report's rows)
    alpha: float = Field(0.3, ge=0.0, le=1.0, description="utility learning rate α")
    lam: float = Field(0.5, ge=0.0, le=1.0, description="λ: weight of Q in the Phase-B score")
    delta: float | Literal["auto"] = Field(description="similarity gate δ, or 'auto' (the "
                                           "delta_quantile quantile of pairwise intent similarity)")
    delta_quantile: float = Field(0.8, gt=0.0, lt=1.0, description="quantile used by delta=auto")
    k1: int = Field(ge=1, description="Phase-A candidate pool size")
    k2: int = Field(ge=1, description="memories injected")
    q_init: float = 0.0  # Q of a new memory
    # Q_init of a memory written from a failed episode (null: q_init). With imported memories
    # (bank.init_from) set it to the failure reward (-1): a student's own failed attempt then
    # never outranks an imported memory whose Q its failures pushed below 0 ("learning in the
    # wrong direction": the student ends up copying its own failure).
    q_init_failed: float | None = None
    reward_success: float = 1.0  # r of the utility update after a success
    reward_failure: float = -1.0  # r after a failure
    write_memories: bool = True  # false: no new memory is written (retrieval from an imported bank only)
    # llm: a model-written plan (success) or reflection (failure) plus the trajectory (paper);
    # raw: the trajectory as it is, no model call (RAG-style memories; the `memrl_rag` variant)
    write_mode: Literal["llm", "raw"] = "llm"
    learn_from_errors: bool = False  # an episode whose model call failed teaches nothing
    # with learn_from_errors: an episode whose env raised teaches too (false: it is dropped,
    # no update and no memory, as the official Lifelong runner drops a sample that raised)
    learn_from_crashes: bool = True
    # --- official-code switches (defaults = paper) -----------------------------------------
    q_init_by_outcome: bool = False  # HLE official code: Q_init = 1 on success, 0 on failure
    sim_stats: tuple[float, float] | None = None  # fixed (mean, std) for z(sim) instead of pool
    epsilon: float = Field(0.0, ge=0.0, le=1.0)  # ε-greedy selection: random k2 from the pool
    # the random k2 in rank order (`rank`) or in the order drawn (`random`: the official code)
    epsilon_order: Literal["rank", "random"] = "rank"
    dedup_threshold: float | None = Field(None, ge=0.0, le=1.0)  # e.g. 0.9: near-duplicate intents share a key
    z_clip: float | None = Field(None, gt=0.0)  # e.g. 3: clip z(Q) to [-3, 3]
    q_floor: float | None = None  # lower bound on Q
    # Phase A ranks intent keys; the top-k1 keys' buckets (all their memories) form the pool
    pool_by_intent: bool = False
    q_min: float | None = None  # e.g. -0.8: memories with Q < q_min leave the pool after its Q statistics
    # entries tied with the k1-th similarity: all enter the pool (Phase B decides) | oldest first
    phase_a_ties: TieRule = "include"
    # --- ablations ---------------------------------------------------------------------------
    normalize: bool = True  # False (with sim_gate False) = "w/o Norm & SimGate"
    sim_gate: bool = True  # False: Phase A takes the top-k1 whatever their similarity (no δ)
    writer: WriterSettings = WriterSettings()  # how a memory's text is written (memrl.memory.writer)
    bank: BankSettings = BankSettings()  # where the bank lives and what it starts from

    @model_validator(mode="after")
    def _check(self) -> "MemRLSettings":
        if self.k2 > self.k1 and not self.pool_by_intent:  # a pool of k1 keys holds more memories
            raise ValueError(f"k2: must not exceed k1 (k2={self.k2} > k1={self.k1})")
        if isinstance(self.delta, float) and not -1.0 <= self.delta <= 1.0:
            raise ValueError(f"delta: must be a cosine similarity in [-1, 1] or 'auto' (got {self.delta})")
        return self


class MemRLMemory(BankedMemory):
    name = "memrl"
    Settings = MemRLSettings

    def __init__(self, settings: MemRLSettings, *, bank_dir: str | Path, embedder: "Embedder"):
        super().__init__(settings, bank_dir=bank_dir, embedder=embedder)
        self.needs_llm = settings.write_memories and settings.write_mode == "llm"
        self.writer = ExperienceWriter(**settings.writer.model_dump())
        self.delta: float = settings.delta if isinstance(settings.delta, float) else float("nan")
        self._phase_b = PhaseBOptions(
            lam=settings.lam, k2=settings.k2, normalize=settings.normalize,
            sim_mean=settings.sim_stats[0] if settings.sim_stats else None,
            sim_std=settings.sim_stats[1] if settings.sim_stats else None,
            z_clip=settings.z_clip, q_min=settings.q_min)

    # ------------------------------------------------------------------ set-up
    def prepare(self, tasks: list[Task], seed: int) -> dict[str, Any]:
        """Resolve `delta: auto` on the run's own task intents and embedder; log the δ in use."""
        model = getattr(self.embedder, "model_id", type(self.embedder).__name__)
        if self.s.delta == "auto":
            emb = self.embedder.embed([t.intent for t in tasks])
            self.delta = similarity_quantile(emb, self.s.delta_quantile, seed=seed)
            log.info("MemRL similarity gate: delta = %.4f (auto: the %g quantile of pairwise intent "
                     "similarity over %d tasks, embedder %s)", self.delta, self.s.delta_quantile,
                     len(tasks), model)
        else:
            log.info("MemRL similarity gate: delta = %.4f (configured; embedder %s)", self.delta, model)
        return {"delta": self.delta}

    def _embed(self, text: str) -> np.ndarray:
        return self.embedder.embed([text])[0]

    # --------------------------------------------------------------- retrieve
    def retrieve(self, task: Task, *, seed: int = 0) -> Retrieved:
        hits = self.bank.neighbours(self._embed(task.intent), self.s.k1, by_key=self.s.pool_by_intent,
                                    seed=seed)
        keys = [e.key for e, _ in hits]
        orders = self.bank.precedence([e for e, _ in hits], seed)  # the bank's tie rule
        sims = key_similarities(np.array([s for _, s in hits]), keys)
        if self.s.pool_by_intent:
            pool_idx = pool_by_intent(sims, keys, delta=self.delta, k1=self.s.k1, gate=self.s.sim_gate,
                                      ties=self.s.phase_a_ties, orders=orders)
        else:
            pool_idx = phase_a(sims, delta=self.delta, k1=self.s.k1, gate=self.s.sim_gate,
                               ties=self.s.phase_a_ties, keys=keys, orders=orders)
        pool = [hits[i][0] for i in pool_idx]
        stats = RetrievalStats(pool=len(pool),
                               own_only=bool(pool) and all(e.task_id == task.task_id for e in pool))
        if not pool:
            return Retrieved([], stats)  # nothing similar enough: inject no memory
        psims = sims[pool_idx]
        ranked, scores = rank_pool(psims, np.array([e.q for e in pool]), self._phase_b)
        top = epsilon_greedy(ranked, self.s.k2, self.s.epsilon, np.random.default_rng(seed),
                             random_order=self.s.epsilon_order == "random")
        return Retrieved([pool[i].retrieved(psims[i], scores[i]) for i in top], stats)

    # ------------------------------------------------------------------ learn
    def digest(self, task: Task, result: EpisodeResult, *, epoch: int,
               llm: "EpisodeLLM | None") -> dict[str, Any] | None:
        if not self.s.write_memories:
            return None
        if self.skips(bool(result.errors), result.crashed):
            return None  # `plan_update` skips an errored episode: spend no writer call on it
        return self.writer.write(task.intent, result, llm if self.s.write_mode == "llm" else None)

    def model_probes(self, task: Task) -> list[Any]:
        """The writer's call (memrl.control.preflight), when memories are model-written."""
        return [self.writer.probe(task.intent)] if self.needs_llm else []

    def reward(self, success: bool) -> float:
        return self.s.reward_success if success else self.s.reward_failure

    def plan_update(self, items: list[LearnItem]) -> BankUpdate:
        update = BankUpdate()
        used = sorted({m.memory_id for it in items for m in it.injected})
        current = self.bank.get(used)
        q = {mid: e.q for mid, e in current.items()}
        visits = {mid: e.visits for mid, e in current.items()}
        for it in items:
            if self.skips(it.errored, it.result.crashed):
                continue
            r = self.reward(it.result.success)
            for m in it.injected:
                if m.memory_id not in q:
                    continue  # removed since retrieval
                q[m.memory_id] = update_q(q[m.memory_id], r, self.s.alpha, self.s.q_floor)
                visits[m.memory_id] += 1
                update.set_fields[m.memory_id] = {"q": q[m.memory_id], "visits": visits[m.memory_id]}
        update.add = self.new_entries(items)
        return update

    def _new_memory(self, it: LearnItem) -> NewMemory | None:
        if not self.s.write_memories or it.digest is None:
            return None
        q0 = (1.0 if it.result.success else 0.0) if self.s.q_init_by_outcome else self.s.q_init
        if not it.result.success and self.s.q_init_failed is not None:
            q0 = self.s.q_init_failed
        return NewMemory(experience=it.digest["experience"], kind=it.digest.get("kind", ""), q=q0,
                         record=it.digest.get("record"))

    def _entry_key(self, it: LearnItem) -> tuple[str, list[float]]:
        """The key (intent text, embedding) a new memory is filed under: the task's own intent,
        or -- with `dedup_threshold` -- the most similar existing key when cos ≥ the threshold
        and the key passes the similarity gate (the official code only joins a key that was
        retrieved for the task). `plan_update` runs against the bank as of batch start, i.e. the
        bank the batch's retrievals saw."""
        intent, own = super()._entry_key(it)
        if self.s.dedup_threshold is None:
            return intent, own
        hits = self.bank.neighbours(np.asarray(own), 1, by_key=True)
        sims = key_similarities(np.array([s for _, s in hits]), [e.key for e, _ in hits])
        entries: dict[str, MemoryEntry] = {}  # key -> its oldest entry
        key_sim: dict[str, float] = {}
        for (e, _), sim in zip(hits, sims):
            if e.key not in entries or e.order < entries[e.key].order:
                entries[e.key] = e
            key_sim[e.key] = float(sim)
        keys = list(entries)
        key_sims = np.array([key_sim[k] for k in keys])
        if self.s.sim_gate:
            key_sims = np.where(passes_gate(key_sims, self.delta, inclusive=self.s.pool_by_intent),
                                key_sims, -np.inf)
        best = choose_key(key_sims, threshold=self.s.dedup_threshold,
                          orders=np.array([entries[k].order for k in keys]))
        if best is None:
            return intent, own
        twin = self.bank.get([entries[keys[best]].memory_id], with_embeddings=True)
        if not twin:
            return intent, own
        entry = next(iter(twin.values()))
        return entry.intent, entry.embedding
