"""Readings of a run's learned utilities, from its episode records alone.

- `q_prospective` (the reading to use): does Q predict the next outcome? For every injection, the
  memory's Q as retrieval saw it (before that episode: a running average of *earlier* outcomes
  only) against that episode's success. The point-biserial r (Pearson's r with a 0/1 outcome)
  and the AUC (the chance that an injection into a success carried a higher Q than one into a
  failure, ties counting half), each with a 95% percentile bootstrap interval over episodes
  (an episode's injections share its outcome, so episodes are the resampled unit). An AUC of
  0.5 means Q ranks the outcome no better than chance. The binned form of the same reading
  (success rate per bin of the episode's injected Q, with n and a Wilson interval) is the run's
  Q calibration (`memrl.metrics.compute.calibration`, `plots/q_calibration.png`).
- `q_success` (retrospective; circular, kept to show why it must not be read as evidence): per
  memory that was injected at least once, its Q at its last injection against the success rate
  of the episodes it was injected into. Q is a running average of exactly those outcomes
  (Q ← Q + α(r − Q)), so a high correlation follows from the bookkeeping whatever Q is worth:
  a memory injected into two successes has both a high Q and a success rate of 1. Pearson's r
  and Spearman's ρ over memories with bootstrap intervals (memories resampled).
  The paper reports r = 0.861 for its Figure-7 reading of Q against success; the paper's code
  release has no script for that figure, so the project computes nothing it could call the
  paper's way and sets none of these numbers beside it (docs/experiments.md).
- A similarity-only method (RAG) records Q = 0 for every memory: its correlations are undefined
  (None) and its AUC 0.5 where both outcomes occur, which is the reading itself.
- `injected_from_success`: per epoch, the share of injected memories that were written by a
  successful episode (memories whose writer is not in the records, e.g. imported ones, are
  counted apart as `unknown`). MemRL's share should rise over epochs where RAG's does not.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Sequence

import numpy as np

from memrl.core.records import EpisodeRecord
from memrl.metrics.bootstrap import grouped_intervals, paired_interval


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
    """Q at last injection against the success rate of the episodes injected into: the
    retrospective reading, circular by construction (module doc)."""
    use = memory_use(records)
    x = np.array([q for q, _ in use.values()], dtype=float)
    y = np.array([sum(oks) / len(oks) for _, oks in use.values()], dtype=float)
    return {"memories": len(use), "injections": int(sum(len(oks) for _, oks in use.values())),
            "pearson": _pearson(x, y), "pearson_ci": paired_interval(x, y, seed),
            "spearman": _spearman(x, y), "spearman_ci": paired_interval(x, y, seed + 1, ranked=True)}


def _auc(x: np.ndarray, y: np.ndarray) -> float | None:
    """P(a success's value > a failure's value), ties counting half (Mann-Whitney); None when
    one class is empty."""
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return None
    ranks = _ranks(x) + 1.0
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def q_prospective(records: Sequence[EpisodeRecord], seed: int = 0) -> dict[str, Any]:
    """Per injection: the memory's Q before the episode against the episode's success (module
    doc): point-biserial r and AUC, bootstrap intervals over episodes."""
    x_by_ep: list[np.ndarray] = []
    ok_by_ep: list[bool] = []
    for r in records:
        qs = [float(m.get("q", 0.0) or 0.0) for m in r.injected or [] if isinstance(m, dict)]
        if qs:
            x_by_ep.append(np.array(qs))
            ok_by_ep.append(bool(r.success))

    lens = np.array([a.size for a in x_by_ep], dtype=np.int64)
    starts = np.cumsum(lens) - lens  # where each episode's injections begin in `every`
    every = np.concatenate(x_by_ep) if x_by_ep else np.array([])
    oks = np.array(ok_by_ep, dtype=bool)

    x, y = every, np.repeat(oks, lens)  # every injection, in record order, and its episode's outcome
    out: dict[str, Any] = {"episodes": len(x_by_ep), "injections": int(x.size),
                           "successes": int(y.sum()), "distinct_q": int(np.unique(x).size),
                           "point_biserial": _pearson(x, y.astype(float)) if x.size else None,
                           "auc": _auc(x, y) if x.size else None,
                           "point_biserial_ci": None, "auc_ci": None}
    if len(x_by_ep) >= 3 and out["point_biserial"] is not None:
        out["point_biserial_ci"], out["auc_ci"] = grouped_intervals(every, oks, starts, lens, seed)
    return out


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
    """The readings, as `metrics.json` holds them under `utility` (`q_success` is the
    retrospective, circular one: module doc)."""
    return {"q_prospective": q_prospective(records, seed), "q_success": q_success(records, seed),
            "injected_from_success": injected_from_success(records)}
