"""MemQ (Liao et al., "MemQ: Integrating Q-Learning into Self-Evolving Memory Agents over
Provenance DAGs", arXiv 2605.08374, 2026; docs/methods.md): MemRL's memory, retrieval and
writer, with the utilities learned by TD(λ)-style eligibility traces over the provenance of
memories, and Q-guided ε-greedy selection.

Paper -> code. What this project could read of the paper is its abstract (arXiv 2605.08374
v3) and public summaries of it; its method section and its code (github.com/jwliao-ai/MemQ)
were not reachable from here. Each choice below says whether it is the abstract's or this
project's reading of it (docs/methods.md lists them):
- Provenance DAG (abstract): "which memories were retrieved when each new memory was
  created". Every bank entry already records the ids injected into the episode that wrote
  it (`MemoryEntry.injected_ids`), so the DAG is part of the bank: an edge runs from a memory
  to each memory injected when it was written (its parents). It survives a resume and a
  `bank.init_from` copy with the bank; a parent that is not in the bank is skipped.
- Credit (abstract): "credit weight decays as (γλ)^d with DAG depth d". After an episode with
  reward r (MemRL's: `reward_success` 1 / `reward_failure` −1), every memory m within
  `max_depth` of the injected set gets Q_m ← Q_m + α (γλ)^{d_m} (r − Q_m), where d_m is m's
  shortest distance (in parent edges) from an injected memory (`provenance_depths`: the
  injected memories have depth 0, their parents 1, ...). The eligibility of a memory reached
  by several paths is that of the shortest (a replacing trace, not a sum over paths). With
  γλ = 0 this is MemRL's update exactly (docs/design.md §4). Each memory's own error r − Q_m
  as the target, and the replacing trace, are this project's reading.
- Q-guided ε-greedy selection (abstract): MemRL's two-phase retrieval (similarity gate and
  top-k1 pool, then the z-scored mix of similarity and Q) picks the top k2; with probability
  ε it picks k2 of the pool at random instead (`memrl.memory.retrieval.epsilon_greedy`).
- Defaults: α, λ (Phase B), δ, k1, k2, the rewards and the writer are MemRL's (the paper
  builds on it); γ = 0.9, trace λ = 0.5, `max_depth` 3 and ε = 0.1 are this project's choice,
  not values read from the paper. `visits` counts injections (depth 0) only.

Each new memory's `extra.credited` keeps the credit its episode gave ({id: depth}), so the
traces of a run can be read from its bank. A batch's updates are applied in task order to
the Q values of batch start (as MemRL's), then committed together.

Not reproduced: the Exogenous-Context MDP analysis and any part of the method beyond what
the abstract states (the update's exact TD target, trace accumulation, any pruning of the
DAG), which docs/methods.md names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field

from memrl.memory.base import LearnItem
from memrl.memory.entry import BankUpdate
from memrl.memory.memrl import MemRLMemory, MemRLSettings
from memrl.memory.q_update import update_q

if TYPE_CHECKING:
    from memrl.llm.embed import Embedder


class MemQSettings(MemRLSettings):
    """MemRL's settings (every default MemRL's) plus the trace; ε defaults to 0.1."""

    name: str = "memq"
    gamma: float = Field(0.9, ge=0.0, le=1.0, description="γ: discount of credit per provenance level")
    trace_lambda: float = Field(0.5, ge=0.0, le=1.0, description="λ of the eligibility trace (not "
                                "Phase B's `lam`)")
    max_depth: int = Field(3, ge=0, description="provenance levels credited beyond the injected memories")
    epsilon: float = Field(0.1, ge=0.0, le=1.0, description="ε-greedy: a random k2 of the pool")


def provenance_depths(roots: Sequence[str], parents: Callable[[list[str]], Mapping[str, Iterable[str]]],
                      max_depth: int) -> dict[str, int]:
    """{memory id: its shortest depth} for the roots (depth 0) and their ancestors up to
    `max_depth`, by breadth-first search. `parents(ids)` answers, for the ids it knows, the
    ids injected when each was written; an id it does not know (not in the bank) is left out
    and has no parents. Cycles (impossible in a bank, where parents are older) end anyway."""
    known = parents(list(dict.fromkeys(roots)))
    depths = {mid: 0 for mid in roots if mid in known}
    frontier = list(depths)
    for depth in range(1, max_depth + 1):
        if not frontier:
            break
        wanted = [p for mid in frontier for p in known.get(mid, ()) if p not in depths]
        found = parents(list(dict.fromkeys(wanted)))
        known = {**known, **found}
        frontier = []
        for p in wanted:
            if p in found and p not in depths:
                depths[p] = depth
                frontier.append(p)
    return depths


def trace_weight(depth: int, gamma: float, trace_lambda: float) -> float:
    """The eligibility (γλ)^depth (1 at depth 0)."""
    return (gamma * trace_lambda) ** depth


class MemQMemory(MemRLMemory):
    name = "memq"
    Settings = MemQSettings

    def __init__(self, settings: MemQSettings, *, bank_dir: str | Path, embedder: "Embedder"):
        super().__init__(settings, bank_dir=bank_dir, embedder=embedder)

    def _parents(self, ids: list[str]) -> dict[str, list[str]]:
        return {mid: list(e.injected_ids) for mid, e in self.bank.get(ids).items()}

    def credit(self, roots: Sequence[str]) -> dict[str, int]:
        """The provenance depths of one episode's injected memories (the bank as it is now); with
        γλ = 0 no ancestor is eligible, so only the injected memories."""
        depth = self.s.max_depth if self.s.gamma * self.s.trace_lambda > 0 else 0
        return provenance_depths(roots, self._parents, depth)

    def plan_update(self, items: list[LearnItem]) -> BankUpdate:
        update = BankUpdate()
        traces: dict[int, dict[str, int]] = {}
        for n, it in enumerate(items):
            if not self.skips(it.errored, it.result.crashed):
                traces[n] = self.credit([m.memory_id for m in it.injected])
        touched = sorted({mid for t in traces.values() for mid in t})
        current = self.bank.get(touched)
        q = {mid: e.q for mid, e in current.items()}
        visits = {mid: e.visits for mid, e in current.items()}
        for n, depths in traces.items():
            r = self.reward(items[n].result.success)
            for mid, depth in depths.items():
                weight = trace_weight(depth, self.s.gamma, self.s.trace_lambda)
                q[mid] = update_q(q[mid], r, self.s.alpha * weight, self.s.q_floor)
                visits[mid] += depth == 0
                update.set_fields[mid] = {"q": q[mid], "visits": visits[mid]}
        update.add = self.new_entries(items)
        credited = {items[n].task.task_id: d for n, d in traces.items()}
        for entry in update.add:  # the credit its episode gave, kept with the memory it wrote
            entry.extra = {**entry.extra, "credited": credited.get(entry.task_id, {})}
        return update
