"""What tests need of a memory module or a bank that a run never does: learning a batch in
one call (`learn`: plan_update then apply) and a comparable dump of the state (`snapshot`),
and Phase B with its top-k2 cut (`phase_b`, over memrl.memory.retrieval.rank_pool); and a
hash of a folder's files (`tree_hash`: a bank left byte-for-byte as it was)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from memrl.memory.bank import ChromaBank
from memrl.memory.retrieval import PhaseBOptions, rank_pool


def tree_hash(root: Path) -> str:
    """One hash of every file under `root`, names and bytes, in sorted order."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode() + p.read_bytes())
    return h.hexdigest()


def learn(memory: Any, items: list) -> None:
    memory.apply(memory.plan_update(items))


def _bank_rows(bank: ChromaBank) -> list[dict[str, Any]]:
    return [{"id": e.memory_id, "intent": e.intent, "experience": e.experience,
             "q": round(e.q, 12), "visits": e.visits, "success": e.success}
            for e in bank.iter_entries()]


def snapshot(thing: Any) -> list[dict[str, Any]]:
    """A bank's or a module's state: ids, texts, Q, visits (MemP: hits, successes, revisions;
    Mem0: the stored facts)."""
    if isinstance(thing, ChromaBank):
        return _bank_rows(thing)
    name = type(thing).__name__
    if hasattr(thing, "inner"):  # FrozenMemory
        return snapshot(thing.inner)
    if name == "MemPMemory":
        return [{"id": e.memory_id, "intent": e.intent, "experience": e.experience,
                 "success": e.success, "kind": e.kind, "hits": e.visits,
                 "successes": int(e.extra.get("successes", 0)),
                 "revisions": int(e.extra.get("revisions", 0)),
                 "keywords": e.extra.get("keywords")}
                for e in thing.bank.iter_entries()]
    if name == "Mem0Memory":  # the facts in mem0's own vector store, this run's scope
        from memrl_baselines import mem0

        rows = thing.mem.vector_store.list(filters=thing._scope(), top_k=mem0._LIST_LIMIT)
        rows = rows[0] if rows and isinstance(rows[0], list) else rows
        out = []
        for row in rows or []:
            p = dict(row.payload or {})
            out.append({"id": thing._public_id(p, str(row.id)), "memory": p.get("data", ""),
                        "episode_key": p.get("episode_key"), "task_id": p.get("task_id"),
                        "epoch": p.get("epoch"), "success": p.get("success"),
                        "created_at": p.get("created_at"), "role": p.get("role")})
        return sorted(out, key=lambda r: (str(r["created_at"]), r["id"]))
    bank = getattr(thing, "bank", None)
    return _bank_rows(bank) if bank is not None else []


def phase_b(sims: np.ndarray, qs: np.ndarray, opts: PhaseBOptions) -> tuple[np.ndarray, np.ndarray]:
    """Rank a candidate pool; returns (indices into the pool of the top-k2, all scores)."""
    order, scores = rank_pool(sims, qs, opts)
    return order[: opts.k2], scores
