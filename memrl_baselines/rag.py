"""RAG baseline (docs/design.md §6): every episode is stored as it happened; retrieval is top-k by
cosine similarity of intents; everything retrieved is injected.

- Write: one entry per episode, with no model call: a two-line header (the task and its
  outcome) followed by the raw trajectory (`format_trajectory`, the same '> action /
  observation' text the experience writer quotes). `max_trajectory_chars` bounds it like
  MemRL's writer does (null = no bound); a shorter episode is stored verbatim.
- Retrieve: the k most similar intents (k = the benchmark's k2, 3 for ALFWorld). No δ gate
  by default; `min_similarity` adds one.
- Utilities are never learned: Q stays at 0 for ever. `visits` counts how many episodes a
  memory was injected into (a usage counter for analysis, never used for ranking); switch it
  off with `count_visits: false`.

`SimilarityMemory` is the part shared with the Self-RAG baseline (memrl_baselines/self_rag.py): a
Chroma bank under `<run_dir>/bank` queried by similarity alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from memrl.core.records import EpisodeResult, RetrievedMemory, Task
from memrl.memory.bank import BankSettings
from memrl.memory.base import BankedMemory, LearnItem, NewMemory
from memrl.memory.entry import BankUpdate
from memrl.core.memory_record import memrl_text
from memrl.memory.writer import format_trajectory

_UNBOUNDED = 10**12


class RAGSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "rag"
    k: int = Field(ge=1, description="memories injected (the benchmark's k2: configs/memory/rag.yaml "
                   "reads env.retrieval.k2)")
    min_similarity: float | None = Field(None, ge=-1.0, le=1.0,
                                         description="optional gate: inject only sim >= this")
    max_trajectory_chars: int | None = Field(3000, ge=0, description="the same bound as MemRL's writer; "
                                             "null = store in full")
    count_visits: bool = True
    learn_from_errors: bool = False  # an episode whose model call failed is not stored
    bank: BankSettings = BankSettings()


def trajectory_entry(intent: str, result: EpisodeResult, max_chars: int | None) -> tuple[str, dict[str, Any]]:
    """The stored text of one episode (the task, its outcome, then the raw trajectory) and
    its record (memrl.core.memory_record)."""
    traj = format_trajectory(result, _UNBOUNDED if max_chars is None else max_chars)
    text, record = memrl_text(intent, solved=bool(result.success), heading="Trajectory:", trajectory=traj) if traj \
        else memrl_text(intent, solved=bool(result.success), notes="Trajectory:\n(no actions)")
    return text, record.to_dict()


def trajectory_memory(intent: str, result: EpisodeResult, max_chars: int | None) -> str:
    """The stored text of `trajectory_entry`."""
    return trajectory_entry(intent, result, max_chars)[0]


class SimilarityMemory(BankedMemory):
    """A bank ranked by intent similarity only. Subclasses say what an episode stores
    (`_new_memory`); Q is never written, `visits` optionally counts injections."""

    def prepare(self, tasks: list[Task], seed: int) -> dict[str, Any]:
        return {"k": self.s.k, "min_similarity": self.s.min_similarity}

    def _embed(self, text: str) -> np.ndarray:
        return self.embedder.embed([text])[0]

    # --------------------------------------------------------------- retrieve
    def retrieve(self, task: Task, *, seed: int = 0) -> list[RetrievedMemory]:
        hits = self.bank.query(self._embed(task.intent), self.s.k, seed=seed)
        gate = self.s.min_similarity
        return [e.retrieved(sim, sim) for e, sim in hits if gate is None or sim >= gate]

    # ------------------------------------------------------------------ learn
    def plan_update(self, items: list[LearnItem]) -> BankUpdate:
        update = BankUpdate()
        if self.s.count_visits:
            used = sorted({m.memory_id for it in items for m in it.injected})
            visits = {mid: e.visits for mid, e in self.bank.get(used).items()}
            for it in items:
                for m in it.injected:
                    if m.memory_id in visits:  # absent: removed since retrieval
                        visits[m.memory_id] += 1
                        update.set_fields[m.memory_id] = {"visits": visits[m.memory_id]}
        update.add = self.new_entries(items)
        return update


class RAGMemory(SimilarityMemory):
    name = "rag"
    needs_llm = False  # storing a trajectory needs no model
    Settings = RAGSettings

    def _new_memory(self, it: LearnItem) -> NewMemory:
        text, record = trajectory_entry(it.task.intent, it.result, self.s.max_trajectory_chars)
        return NewMemory(text, kind="trajectory", record=record)
