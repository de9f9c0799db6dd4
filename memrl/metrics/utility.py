"""The paper's Figure-7 readings of a run's learned utilities, from its episode records alone.

- `q_success`: does Q predict usefulness? Per memory that was injected at least once: its Q at
  its last injection (the value retrieval last ranked it by, before that episode's own update)
  against the success rate of the episodes it was injected into. Pearson's r and Spearman's ρ
  over memories, each with a 95% percentile bootstrap interval (memories resampled, seeded).
  Paper reports r = 0.861. A similarity-only method (RAG) records Q = 0 for every memory: its
  correlation is undefined (None), which is the reading itself.
- `injected_from_success`: per epoch, the share of injected memories that were written by a
  successful episode (memories whose writer is not in the records, e.g. imported ones, are
  counted apart as `unknown`). MemRL's share should rise over epochs where RAG's does not.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Sequence

import numpy as np

from memrl.core.records import EpisodeRecord

N_BOOT = 1000


def _pearson(x: np.ndarray, y: np.ndarray) -> float | None:
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    return float(np.corrcoef(x, y)[0, 1])


def _ranks(v: np.ndarray) -> np.ndarray:
    """Average ranks (ties share the mean of their ranks)."""
    values, inverse, counts = np.unique(v, return_inverse=True, return_counts=True)
    first = np.cumsum(counts) - counts  # the rank of each distinct value's first occurrence
    return (first + (counts - 1) / 2.0)[inverse]


def _spearman(x: np.ndarray, y: np.ndarray) -> float | None:
    return _pearson(_ranks(x), _ranks(y)) if len(x) >= 3 else None


def _interval(fn, x: np.ndarray, y: np.ndarray, seed: int) -> list[float] | None:
    rng = np.random.default_rng(seed)
    stats = []
    for _ in range(N_BOOT):
        pick = rng.integers(0, len(x), len(x))
        value = fn(x[pick], y[pick])
        if value is not None:
            stats.append(value)
    if len(stats) < N_BOOT // 2:  # most resamples degenerate: no interval
        return None
    return [float(np.percentile(stats, 2.5)), float(np.percentile(stats, 97.5))]


def memory_use(records: Sequence[EpisodeRecord]) -> dict[str, tuple[float, list[bool]]]:
    """Per injected memory id: (its Q at its last injection, the successes of the episodes it
    was injected into), in (epoch, batch) order."""
    use: dict[str, tuple[float, list[bool]]] = {}
    for r in sorted(records, key=lambda r: (r.epoch, r.batch)):
        for m in r.injected:
            mid = str(m["id"])
            oks = use[mid][1] if mid in use else []
            oks.append(bool(r.success))
            use[mid] = (float(m.get("q", 0.0)), oks)
    return use


def q_success(records: Sequence[EpisodeRecord], seed: int = 0) -> dict[str, Any]:
    """Q at last injection against the success rate of the episodes injected into (module doc)."""
    use = memory_use(records)
    x = np.array([q for q, _ in use.values()], dtype=float)
    y = np.array([sum(oks) / len(oks) for _, oks in use.values()], dtype=float)
    return {"memories": len(use), "injections": int(sum(len(oks) for _, oks in use.values())),
            "pearson": _pearson(x, y), "pearson_ci": _interval(_pearson, x, y, seed) if len(x) >= 3 else None,
            "spearman": _spearman(x, y),
            "spearman_ci": _interval(_spearman, x, y, seed + 1) if len(x) >= 3 else None}


def injected_from_success(records: Sequence[EpisodeRecord]) -> dict[str, dict[str, Any]]:
    """Per epoch (as a string): injected memories whose writer succeeded / failed / is not in
    the records, and the share from successes among the known ones (None: none known)."""
    origin = {str(r.written): bool(r.success) for r in records if r.written}
    out: dict[str, dict[str, Any]] = defaultdict(lambda: {"success": 0, "failure": 0, "unknown": 0})
    for r in records:
        row = out[str(int(r.epoch))]
        for m in r.injected:
            o = origin.get(str(m["id"]))
            row["unknown" if o is None else "success" if o else "failure"] += 1
    for row in out.values():
        known = row["success"] + row["failure"]
        row["share"] = row["success"] / known if known else None
    return {e: dict(out[e]) for e in sorted(out, key=int)}


def utility_readings(records: Sequence[EpisodeRecord], seed: int = 0) -> dict[str, Any]:
    """Both readings, as `metrics.json` holds them under `utility`."""
    return {"q_success": q_success(records, seed), "injected_from_success": injected_from_success(records)}
