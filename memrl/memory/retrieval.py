"""MemRL's two-phase retrieval as pure functions over arrays (docs/design.md §4).

Phase A keeps the top-k1 entries by cosine similarity among those with sim > δ.
Phase B ranks that pool by (1-λ)·ẑ(sim) + λ·ẑ(Q), z-scores taken within the pool,
and keeps the top-k2.

Keys. Every memory is filed under a key: the intent text it was stored with. Memories of one
task share its intent, and with `dedup_threshold` a near-duplicate intent joins an existing
key by taking its text and embedding, so all memories of one key have the same stored
vector. The functions take each entry's key and give all entries of a key the key's
similarity (`key_similarities`), so copies of one intent tie exactly even where the vector
store returned them with slightly different distances.

Ties. Runtime learning replays the same tasks every epoch, so a task's own memories tie at
sim = 1: in the paper's loop every retrieval of a repeated task is a tie. Two similarities tie
when they share a key or differ by at most `TIE_TOL` (a tolerance, never a rounding bin).
Among tied entries the order is the bank's tie rule (`memory.bank.ties`, `tie_precedence`):
`oldest` first (the default: the official code's stable sort over insertion order), `newest`
first, or `random` (a permutation drawn per query from the retrieval's seed, which derives from
the run seed, the epoch and the task, so a rerun draws the same). Every similarity ranking
follows it: RAG's and the other similarity baselines' top-k, MemRL's Phase-A pool order and
Phase B's last tie-break (pool position). `phase_a_ties` decides what happens to entries tied
with the k1-th similarity: `include` (default) lets all of them into the pool, so Phase B
(which sees Q) chooses among them; `oldest` cuts the tied group to k1, keeping the first ones
in tie precedence (the oldest under the default rule: the official code's stable sort).

Official-code Phase A (`pool_by_intent`): keys, not memories, are ranked; the top-k1 keys'
buckets (every memory filed under them) form the pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Sequence

import numpy as np

from memrl.core.seeding import derive_seed

TieRule = Literal["include", "oldest"]
BankTies = Literal["oldest", "newest", "random"]
TIE_TOL = 1e-6  # two similarities this close (or sharing a key) are tied


def tie_precedence(orders: np.ndarray, ids: Sequence[str], rule: BankTies = "oldest",
                   seed: int = 0) -> np.ndarray:
    """Each entry's place among entries of equal similarity (lower comes first): its insertion
    order (`oldest`), the reverse (`newest`), or a permutation drawn from `seed` (`random`: each
    entry's rank under a stable hash of (seed, its id), so the draw does not depend on the order
    the entries arrived in, only on which entries they are)."""
    orders = np.asarray(orders)
    if rule == "oldest":
        return orders
    if rule == "newest":
        return -orders
    if rule == "random":
        if len(ids) != orders.size:
            raise ValueError("ids and orders must have the same length")
        return np.array([derive_seed(seed, "ties", i) for i in ids], dtype=np.int64)
    raise ValueError(f"memory.bank.ties: unknown rule {rule!r} (oldest | newest | random)")


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


def key_similarities(sims: np.ndarray, keys: Sequence[Any] | None) -> np.ndarray:
    """Each entry's similarity replaced by the highest one among the entries of its key.

    All memories of one key share the key's stored vector, so they have one similarity; a
    vector store may report copies a hair apart (it re-normalises some stored vectors).
    With `keys=None` every entry is its own key and `sims` comes back unchanged.
    """
    sims = np.asarray(sims, dtype=np.float64)
    if keys is None:
        return sims.copy()
    if len(keys) != sims.size:
        raise ValueError("keys and sims must have the same length")
    best: dict[Any, float] = {}
    for k, s in zip(keys, sims):
        best[k] = max(best.get(k, -np.inf), float(s))
    return np.array([best[k] for k in keys], dtype=np.float64)


def passes_gate(sims: np.ndarray, delta: float, *, inclusive: bool = False) -> np.ndarray:
    """Which similarities pass the gate: sim > δ (the paper), or sim ≥ δ with `inclusive` (the
    official code's key gate, `pool_by_intent`)."""
    sims = np.asarray(sims, dtype=np.float64)
    return sims >= delta if inclusive else sims > delta


def _ranked(sims: np.ndarray, orders: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """`idx` sorted by similarity (highest first), then by tie precedence (`orders`: lowest
    first; insertion order, i.e. oldest first, unless a `tie_precedence` rule says otherwise)."""
    return idx[np.lexsort((orders[idx], -sims[idx]))]


def cut_at_k(sims: np.ndarray, orders: np.ndarray, ranked: np.ndarray, k: int, *,
             ties: TieRule = "include", tol: float = TIE_TOL) -> np.ndarray:
    """The first k of `ranked` (indices sorted by `_ranked`), with the tie rule applied to the
    entries tied with the k-th similarity: `include` keeps them all, `oldest` keeps the
    first of them in tie precedence (`orders`) up to k."""
    if ranked.size <= k:
        return ranked
    boundary = sims[ranked[k - 1]]
    tied = np.abs(sims[ranked] - boundary) <= tol
    first = int(np.argmax(tied))  # tied entries are contiguous in `ranked`
    last = ranked.size - 1 - int(np.argmax(tied[::-1]))
    if ties == "include":
        return ranked[:last + 1]
    if ties != "oldest":
        raise ValueError(f"phase_a_ties: unknown rule {ties!r} (include | oldest)")
    group = ranked[first:last + 1]
    keep = group[np.argsort(orders[group], kind="stable")][:k - first]
    chosen = np.concatenate([ranked[:first], keep])
    return _ranked(sims, orders, chosen)


def phase_a(sims: np.ndarray, *, delta: float, k1: int, gate: bool = True,
            ties: TieRule = "include", keys: Sequence[Any] | None = None,
            orders: np.ndarray | None = None, tol: float = TIE_TOL) -> np.ndarray:
    """Indices of the top-k1 similarities, keeping only sim > δ when the gate is on.

    Entries rank by similarity, then by `orders` (tie precedence: insertion order unless a
    `tie_precedence` rule says otherwise; default: position), so results are deterministic.
    Entries tied with the k1-th similarity follow `ties`. With `keys`, all entries of one key
    take the key's similarity (see `key_similarities`).
    """
    sims = key_similarities(sims, keys)
    orders = np.arange(sims.size) if orders is None else np.asarray(orders)
    idx = np.arange(sims.size)
    if gate:
        idx = idx[passes_gate(sims, delta)]
    return cut_at_k(sims, orders, _ranked(sims, orders, idx), k1, ties=ties, tol=tol)


def pool_by_intent(sims: np.ndarray, keys: Sequence[Any], *, delta: float, k1: int,
                   gate: bool = True, ties: TieRule = "include",
                   orders: np.ndarray | None = None, tol: float = TIE_TOL) -> np.ndarray:
    """The official code's Phase A: rank distinct keys by similarity (sim ≥ δ when the gate is
    on: the official code keeps a key at the threshold, the paper's gate is strict), take the
    top-k1 keys (ties by `ties`; a key's precedence is its first entry's), and return every
    entry filed under them: key by key in rank order, each bucket in tie precedence (oldest
    first by default). The pool is usually larger
    than k1."""
    sims = key_similarities(sims, keys)
    orders = np.arange(sims.size) if orders is None else np.asarray(orders)
    distinct = list(dict.fromkeys(keys))
    where = {k: i for i, k in enumerate(distinct)}
    members: list[list[int]] = [[] for _ in distinct]
    for i, k in enumerate(keys):
        members[where[k]].append(i)
    key_sims = np.array([sims[m[0]] for m in members], dtype=np.float64)
    key_orders = np.array([min(orders[i] for i in m) for m in members])
    passing = np.flatnonzero(passes_gate(key_sims, delta, inclusive=True)) if gate else np.arange(key_sims.size)
    chosen = passing[phase_a(key_sims[passing], delta=delta, k1=k1, gate=False, ties=ties,
                             orders=key_orders[passing], tol=tol)]
    out = [i for c in chosen for i in sorted(members[c], key=lambda j: (orders[j], j))]
    return np.array(out, dtype=int)


def choose_key(sims: np.ndarray, *, threshold: float, orders: np.ndarray | None = None) -> int | None:
    """Which existing key a new memory joins: the most similar key with cos ≥ `threshold`
    (ties: the oldest key), or None (it opens a key of its own). `sims` are the keys'
    similarities to the new memory's intent, one per key."""
    sims = np.asarray(sims, dtype=np.float64)
    orders = np.arange(sims.size) if orders is None else np.asarray(orders)
    idx = np.flatnonzero(sims >= threshold)
    if idx.size == 0:
        return None
    return int(_ranked(sims, orders, idx)[0])


@dataclass(frozen=True)
class PhaseBOptions:
    """What Phase B ranks by: λ and k2 have no default here (their one owner is the memory
    module's settings, `memrl.memory.memrl.MemRLSettings`, and the benchmark's `retrieval`)."""

    lam: float
    k2: int
    normalize: bool = True  # False = the "w/o Norm" ablation: raw sim and Q are mixed
    sim_mean: float | None = None  # official-code switch: fixed similarity statistics
    sim_std: float | None = None
    z_clip: float | None = None  # official-code switch: clip z(Q) to [-c, c]
    q_min: float | None = None  # official-code switch: drop Q < q_min after the Q statistics


def rank_pool(sims: np.ndarray, qs: np.ndarray, opts: PhaseBOptions) -> tuple[np.ndarray, np.ndarray]:
    """Phase B over a candidate pool: (indices into the pool of the ranked candidates, best
    first; scores of the whole pool).

    The z-scores use the statistics of the whole pool; with `q_min`, memories with Q below it
    then leave the ranking (their score is NaN), as the official code does.
    """
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
    keep = np.ones(sims.size, dtype=bool) if opts.q_min is None else qs >= opts.q_min
    scores = np.where(keep, scores, np.nan)
    # Sort by score, then by similarity, then by pool position: fully deterministic.
    idx = np.flatnonzero(keep)
    order = idx[np.lexsort((idx, -sims[idx], -scores[idx]))]
    return order, scores


def epsilon_greedy(ranked: np.ndarray, k: int, epsilon: float, rng: np.random.Generator,
                   random_order: bool = False) -> np.ndarray:
    """The top-k of `ranked`, or with probability ε k of them drawn uniformly without
    replacement: in rank order, or (`random_order`, as the official code returns its
    `random.sample`) in the order they were drawn. One draw decides per retrieval."""
    ranked = np.asarray(ranked, dtype=int)
    if epsilon > 0 and ranked.size and rng.random() < epsilon:
        pick = rng.choice(ranked.size, size=min(k, ranked.size), replace=False)
        return ranked[pick if random_order else np.sort(pick)]
    return ranked[:k]


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
