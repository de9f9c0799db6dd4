"""MemRL's two-phase retrieval as pure functions over arrays (docs/design.md §4).

Phase A keeps the top-k1 entries by cosine similarity among those with sim > δ.
Phase B ranks that pool by (1-λ)·ẑ(sim) + λ·ẑ(Q), z-scores taken within the pool,
and keeps the top-k2.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def zscore(x: np.ndarray, *, mean: float | None = None, std: float | None = None,
           clip: float | None = None) -> np.ndarray:
    """Standardise `x` with the given statistics, or with its own (pool) statistics.

    A constant vector has no spread: every entry gets z = 0 (it carries no ranking signal).
    """
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return x
    mu = float(x.mean()) if mean is None else mean
    sd = float(x.std()) if std is None else std
    z = np.zeros_like(x) if sd <= 1e-12 else (x - mu) / sd
    if clip is not None:
        z = np.clip(z, -clip, clip)
    return z


def phase_a(sims: np.ndarray, *, delta: float, k1: int, gate: bool = True) -> np.ndarray:
    """Indices of the top-k1 similarities, keeping only sim > δ when the gate is on.

    Ties are broken by index (stable), so results are deterministic.
    """
    sims = np.asarray(sims, dtype=np.float64)
    idx = np.arange(sims.size)
    if gate:
        idx = idx[sims > delta]
    order = np.argsort(-sims[idx], kind="stable")
    return idx[order][:k1]


@dataclass(frozen=True)
class PhaseBOptions:
    lam: float = 0.5
    k2: int = 3
    normalize: bool = True  # False = the "w/o Norm" ablation: raw sim and Q are mixed
    sim_mean: float | None = None  # official-code switch: fixed similarity statistics
    sim_std: float | None = None
    z_clip: float | None = None  # official-code switch: clip z(Q) to [-c, c]


def phase_b(sims: np.ndarray, qs: np.ndarray, opts: PhaseBOptions) -> tuple[np.ndarray, np.ndarray]:
    """Rank a candidate pool; returns (indices into the pool of the top-k2, all scores)."""
    sims = np.asarray(sims, dtype=np.float64)
    qs = np.asarray(qs, dtype=np.float64)
    if sims.shape != qs.shape:
        raise ValueError("sims and qs must have the same shape")
    if sims.size == 0:
        return np.array([], dtype=int), np.array([])
    if opts.normalize:
        zs = zscore(sims, mean=opts.sim_mean, std=opts.sim_std)
        zq = zscore(qs, clip=opts.z_clip)
    else:
        zs, zq = sims, qs
    scores = (1.0 - opts.lam) * zs + opts.lam * zq
    # Sort by score, then by similarity, then by pool position: fully deterministic.
    order = np.lexsort((np.arange(sims.size), -sims, -scores))
    return order[: opts.k2], scores


def update_q(q: float, reward: float, alpha: float, floor: float | None = None) -> float:
    """Monte-Carlo style utility update Q ← Q + α(r − Q), optionally floored."""
    new = q + alpha * (reward - q)
    return max(new, floor) if floor is not None else new


def similarity_quantile(emb: np.ndarray, quantile: float = 0.8, max_items: int = 4000,
                        seed: int = 0) -> float:
    """δ for `delta: auto`: the given quantile of pairwise cosine similarity among intents.

    The paper chose δ as the top-20% quantile of pairwise intent similarity for its
    embedding model; this recomputes it for whatever embedder is configured. Rows of
    `emb` must be L2-normalised. Large sets are subsampled (seeded) to `max_items`.
    """
    emb = np.asarray(emb, dtype=np.float32)
    n = emb.shape[0]
    if n < 2:
        raise ValueError("delta: auto needs at least two task intents")
    if n > max_items:
        rng = np.random.default_rng(seed)
        emb = emb[np.sort(rng.choice(n, size=max_items, replace=False))]
        n = max_items
    sims = emb @ emb.T
    iu = np.triu_indices(n, k=1)
    return float(np.quantile(sims[iu], quantile))
