"""Statistics of the report (pure functions over numbers).

- Across distinct replicates (Table 1, Table 2, every curve and the λ / α / top-k figures,
  for a group of two or more): the mean and a 95% Student-t interval, mean ±
  t(0.975, n-1)·s/√n with s the sample standard deviation of the per-replicate values.
  Intervals are not clipped to [0, 1].
- One replicate: a proportion of its tasks (an SR, a CSR) or of its episodes (a
  Q-calibration bin) carries the 95% Wilson score interval (memrl.metrics.compute.wilson);
  which number carries which interval is memrl.report.intervals.
- Method vs MemRL (comparisons): on the tasks both groups have, final-epoch success is
  averaged over each group's seeds per task; ``delta`` = MemRL − method of those per-task
  means (= the difference of the Last values on the common tasks). Its 95% interval is a
  percentile bootstrap that resamples tasks with replacement (``n_boot`` draws, numpy
  ``default_rng(seed)``), keeping each task's two values together (paired).
- McNemar's test on final-epoch success: the pairs are (task, seed) for the seeds both
  groups have (if they share no seed, seeds are paired in sorted order and the row says
  so). b = MemRL solved and the method did not, c = the reverse. Two-sided exact binomial
  test (p = min(1, 2·P[X ≤ min(b, c)]), X ~ Bin(b + c, 1/2)) when b + c < 25, else the
  χ² statistic with continuity correction, (|b − c| − 1)² / (b + c), 1 degree of freedom.
  Pooling several seeds treats a task's seeds as independent pairs, so only distinct
  replicates are pooled (a seed whose run repeats another's is left out:
  memrl.report.replicates); with one seed it is the textbook test.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

LEVEL = 0.95
EXACT_BELOW = 25  # McNemar: exact binomial when b + c < this

# Two-sided 95% Student-t quantiles t(0.975, df), used only when scipy is unavailable.
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
         9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131,
         16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 25: 2.060, 30: 2.042,
         40: 2.021, 60: 2.000, 120: 1.980}


def t_quantile(p: float, df: int) -> float:
    """Quantile p of Student's t with df degrees of freedom."""
    try:
        from scipy.stats import t as student_t
    except ImportError:  # pragma: no cover - scipy ships with the default install
        if abs(p - 0.975) > 1e-12:
            raise RuntimeError("t quantiles other than 0.975 need scipy") from None
        known = [d for d in sorted(_T975) if d <= df]
        return _T975[known[-1]] if df <= 120 else 1.960
    return float(student_t.ppf(p, df))


def t_interval(values: Sequence[float], level: float = LEVEL) -> tuple[float, float, float]:
    """(mean, low, high): Student-t interval of the mean; NaN bounds for fewer than 2 values."""
    x = np.asarray([v for v in values if v is not None], dtype=float)
    if x.size == 0:
        return math.nan, math.nan, math.nan
    m = float(x.mean())
    if x.size < 2:
        return m, math.nan, math.nan
    half = t_quantile(0.5 + level / 2, x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return m, m - half, m + half


def paired_bootstrap(a: Sequence[float], b: Sequence[float], *, n_boot: int = 10_000,
                     seed: int = 0, level: float = LEVEL) -> tuple[float, float, float]:
    """(mean(a - b), low, high): percentile bootstrap over paired units (here: tasks)."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if d.ndim != 1 or d.size == 0:
        raise ValueError("paired_bootstrap needs two equal-length, non-empty sequences")
    est = float(d.mean())
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    chunk = max(1, 2_000_000 // d.size)
    for start in range(0, n_boot, chunk):
        n = min(chunk, n_boot - start)
        means[start:start + n] = d[rng.integers(0, d.size, size=(n, d.size))].mean(axis=1)
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(means, [tail, 100 - tail])
    return est, float(lo), float(hi)


def mcnemar(b: int, c: int, exact_below: int = EXACT_BELOW) -> dict[str, Any]:
    """McNemar's test on discordant counts b and c (two-sided)."""
    b, c = int(b), int(c)
    n = b + c
    if n == 0:
        return {"b": b, "c": c, "n_discordant": 0, "test": "exact", "statistic": math.nan, "p": 1.0}
    if n < exact_below:
        k = min(b, c)
        tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
        return {"b": b, "c": c, "n_discordant": n, "test": "exact",
                "statistic": float(k), "p": min(1.0, 2 * tail)}
    stat = (abs(b - c) - 1) ** 2 / n
    # χ² with 1 degree of freedom: P[X > x] = erfc(sqrt(x / 2))
    return {"b": b, "c": c, "n_discordant": n, "test": "chi2-cc",
            "statistic": stat, "p": math.erfc(math.sqrt(stat / 2))}


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of a family of p-values (same order as given): the k-th
    smallest is multiplied by (m − k + 1), running maxima keep the order, capped at 1. A
    family's test is significant at α when its adjusted p is below α."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * float(pvalues[i])))
        out[i] = running
    return out
