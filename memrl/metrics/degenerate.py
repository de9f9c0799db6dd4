"""Settings that make a method behave as another, named where they happen.

A run can be configured, or can turn out, so that its method is not the method its name
says: a similarity gate nothing passes makes MemRL a run without memory; a pool no larger
than k2 makes λ meaningless. Such a run still finishes, and its numbers read as the method's.
These checks say so: the run logs them (memrl.control.session), its card keeps them
(`warnings`), and `memrl status`, the report's readings and the MemRL page show them.

From the config (`config_warnings`, the card's config; `n_tasks` bounds the bank):

- MemRL: δ ≥ 1 with the gate on (a cosine never exceeds 1: nothing passes); ε = 1 (every
  injection a random draw: Q never chooses); α = 0 (Q never moves: ranking by similarity
  alone); λ = 0 (Phase B by similarity alone: Q is learned, never used); k2 ≥ k1 without
  `pool_by_intent` (Phase B injects the whole pool: λ only orders it); k1 ≥ the most memories
  the bank can hold (tasks × epochs, nothing imported: Phase A never cuts by rank);
- any banked method writing no memory and importing none (the bank stays empty: no memory);
- a top-k method (RAG, MemP, Mem0: `k`) whose k is at least what the bank can hold (every
  stored memory is injected in every episode).

From the records (`record_warnings`):

- an epoch ≥ 2 in which at least `EMPTY_SHARE` of the retrievals injected nothing (MemRL's
  recorded pool was empty, or no memory was injected): the method ran as no memory there;
- MemRL: from epoch 2 on (the bank holds memories by then) no retrieval's pool held more
  than k2 memories, so λ changed nothing.

At the start (memrl.control.session, from the run's own task intents and the gate in use) a
δ that leaves no memory a margin (an automatic δ on duplicate intents lands on 1.0) is
recorded the same way (`GATE_PREFIX`, memrl.control.forewarn).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, Mapping, Sequence

from memrl.core.records import EpisodeRecord

EMPTY_SHARE = 0.5  # an epoch (>= 2) with at least this share of empty retrievals is named
GATE_PREFIX = "similarity gate"
NON_RETRIEVING = frozenset({"none", "pass_at_k"})


def _num(x: Any) -> float | None:
    try:
        return None if x is None or isinstance(x, bool) else float(x)
    except (TypeError, ValueError):
        return None


def _is_memrl(memory: Mapping[str, Any]) -> bool:
    """The MemRL family (its schema has λ and α): memrl, memrl_rag, memrl_no_norm_simgate."""
    return "lam" in memory and "alpha" in memory and "k1" in memory


def bank_capacity(config: Mapping[str, Any], n_tasks: int | None) -> int | None:
    """The most memories a run's bank can hold (one per episode), or None when unknown (a
    bank that imports another's, or no task count)."""
    memory = config.get("memory") or {}
    if not n_tasks or ((memory.get("bank") or {}).get("init_from")):
        return None
    epochs = int((config.get("runner") or {}).get("epochs") or 0)
    return n_tasks * epochs if epochs else None


def _cap(config: Mapping[str, Any], n_tasks: int | None, cap: int) -> str:
    epochs = int((config.get("runner") or {}).get("epochs") or 0)
    return f"{cap}: {n_tasks} task{'s' if n_tasks != 1 else ''} × {epochs} epoch{'s' if epochs != 1 else ''}"


def config_warnings(config: Mapping[str, Any], n_tasks: int | None = None) -> list[str]:
    """What the config alone says about the method (module doc)."""
    memory = config.get("memory") or {}
    name = str(memory.get("name") or "?")
    out: list[str] = []
    if name in NON_RETRIEVING or not memory:
        return out
    cap = bank_capacity(config, n_tasks)
    imports = bool((memory.get("bank") or {}).get("init_from"))
    if memory.get("write_memories") is False and not imports:
        out.append(f"{name} writes no memory (memory.write_memories=false) and imports none: the bank "
                   "stays empty, every retrieval is empty; it runs as no memory")
    if _is_memrl(memory):
        delta, eps = _num(memory.get("delta")), _num(memory.get("epsilon"))
        alpha, lam = _num(memory.get("alpha")), _num(memory.get("lam"))
        k1, k2 = _num(memory.get("k1")), _num(memory.get("k2"))
        gate = memory.get("sim_gate", True) is not False
        if gate and delta is not None and delta >= 1.0:
            out.append(f"{GATE_PREFIX} δ = {delta:g} admits no memory but by rounding (a cosine similarity "
                       "never exceeds 1): retrievals are empty or nearly so; MemRL runs as no memory")
        if eps is not None and eps >= 1.0:
            out.append("ε = 1 (memory.epsilon): every injected memory is a random draw from the pool, Q never "
                       "chooses; MemRL runs as random retrieval over the gated pool")
        if alpha == 0.0:
            out.append("α = 0 (memory.alpha): Q never moves from its initial value, so Phase B ranks by "
                       "similarity alone; MemRL runs as similarity-ranked retrieval (RAG-like)")
        if lam == 0.0 and alpha != 0.0:
            out.append("λ = 0 (memory.lam): Phase B ranks by similarity alone; Q is learned but never used "
                       "(RAG-like retrieval over the gated pool)")
        if k1 is not None and k2 is not None and k2 >= k1 and not memory.get("pool_by_intent"):
            out.append(f"k2 = {k2:g} ≥ k1 = {k1:g}: Phase B injects the whole Phase-A pool (unless ties "
                       "enlarge it), so λ only orders the injected memories")
        if k1 is not None and cap is not None and k1 >= cap:
            out.append(f"k1 = {k1:g} ≥ the most memories the bank can hold ({_cap(config, n_tasks, cap)}): "
                       "Phase A never cuts by rank; the pool is every memory above δ")
    else:
        k = _num(memory.get("k"))
        if k is not None and cap is not None and k >= cap:
            out.append(f"k = {k:g} ≥ the most memories the bank can hold ({_cap(config, n_tasks, cap)}): "
                       f"{name} injects every stored memory in every episode")
    return out


def _retrieves(config: Mapping[str, Any], records: Sequence[EpisodeRecord]) -> bool:
    if any("retrieval" in (r.info or {}) for r in records):
        return True
    memory = config.get("memory") or {}
    agent = str((config.get("agent") or {}).get("name") or "react")
    return bool(memory) and str(memory.get("name")) not in NON_RETRIEVING and agent == "react"


def _empty(r: EpisodeRecord) -> bool:
    stats = (r.info or {}).get("retrieval")
    if isinstance(stats, Mapping) and "pool" in stats:
        return int(stats.get("pool") or 0) == 0
    return not r.injected


def record_warnings(config: Mapping[str, Any], records: Iterable[EpisodeRecord]) -> list[str]:
    """What the episodes show about the method (module doc)."""
    records = [r for r in records if not (r.info or {}).get("carried")]
    if not records or not _retrieves(config, records):
        return []
    name = str((config.get("memory") or {}).get("name") or "?")
    by_epoch: dict[int, list[EpisodeRecord]] = defaultdict(list)
    for r in records:
        by_epoch[int(r.epoch)].append(r)
    out: list[str] = []
    for epoch, recs in sorted(by_epoch.items()):
        empty = sum(_empty(r) for r in recs)
        if epoch >= 2 and empty / len(recs) >= EMPTY_SHARE:
            out.append(f"epoch {epoch}: {empty} of {len(recs)} retrievals ({empty / len(recs):.0%}) found no "
                       f"memory to inject; {name} ran as no memory there")
    memory = config.get("memory") or {}
    pools = [int(s["pool"]) for r in records if int(r.epoch) >= 2
             and isinstance(s := (r.info or {}).get("retrieval"), Mapping) and "pool" in s]
    k2 = _num(memory.get("k2"))
    if _is_memrl(memory) and pools and k2 is not None and max(pools) <= k2 and _num(memory.get("lam")) != 0.0:
        out.append(f"λ changed nothing from epoch 2 on: no Phase-A pool held more than k2 = {k2:g} memories, "
                   "so Phase B injected every pooled memory whatever λ")
    return out


def run_warnings(card: Mapping[str, Any], records: Sequence[EpisodeRecord]) -> list[str]:
    """Every warning of a run: those its card recorded at the start (the gate, the config),
    the config's and the records' (each once, in that order)."""
    config = card.get("config") or {}
    n_tasks = int(card.get("n_tasks") or 0) or len({r.task_id for r in records}) or None
    found = [*map(str, card.get("warnings") or []), *config_warnings(config, n_tasks),
             *record_warnings(config, records)]
    return list(dict.fromkeys(found))
