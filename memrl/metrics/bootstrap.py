"""Percentile bootstrap intervals for the utility readings, computed a block of resamples at a
time with array operations instead of one NumPy call per resample.

The resamples are the ones the one-at-a-time loop drew (`rng.integers(0, n, n)`, `N_BOOT` times
from `default_rng(seed)`, in order); a resample whose statistic is undefined (fewer than three
values, or one side constant) is left out; fewer than `N_BOOT // 2` defined resamples give no
interval. Each statistic is computed as its point estimate is (`memrl.metrics.utility`), so the
intervals are the loop's to the last bit: ranks and AUCs from counts over the sample's distinct
values (sums of halves, exact in any order), and Pearson's r in `numpy.corrcoef`'s own order of
operations (the row means by NumPy's pairwise sum, the cross products by the same BLAS call,
then the scaling and the clip), one small BLAS call per resample with no `corrcoef` overhead.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

N_BOOT = 1000
_BLOCK_CELLS = 1 << 21  # values per block of resamples (a few MB per array)


def resamples(n: int, seed: int, rows_per_block: int) -> Iterator[np.ndarray]:
    """The bootstrap's picks (N_BOOT rows of `n` indices into the sample), a block of rows at a
    time, drawn exactly as one `rng.integers(0, n, n)` per resample would be."""
    rng = np.random.default_rng(seed)
    done = 0
    while done < N_BOOT:
        rows = min(rows_per_block, N_BOOT - done)
        yield np.stack([rng.integers(0, n, n) for _ in range(rows)])
        done += rows


def percentile_interval(stats: np.ndarray) -> list[float] | None:
    """The 95% percentile interval of the defined statistics (NaN: undefined)."""
    kept = stats[~np.isnan(stats)]
    if kept.size < N_BOOT // 2:  # most resamples degenerate: no interval
        return None
    return [float(np.percentile(kept, 2.5)), float(np.percentile(kept, 97.5))]


def _corrcoef_tail(c: np.ndarray, n: np.ndarray) -> np.ndarray:
    """r from each resample's 2x2 cross-product matrix `c` (rows of [c00, c01, c11]) and size,
    scaled and clipped as `numpy.corrcoef` does."""
    inv = np.true_divide(1, n - 1)
    c = c * inv[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (c[:, 1] / np.sqrt(c[:, 0])) / np.sqrt(c[:, 2])
    return np.clip(r, -1.0, 1.0)


def _cross(xc: np.ndarray, yc: np.ndarray) -> tuple[float, float, float]:
    """The centred pair's cross products, by the call `numpy.cov` makes."""
    centred = np.stack((xc, yc))
    c = np.dot(centred, centred.T.conj())
    return c[0, 0], c[0, 1], c[1, 1]


def _rows_pearson(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson's r of each row of `x` with the same row of `y` (NaN where undefined)."""
    rows, n = x.shape
    out = np.full(rows, np.nan)
    if n < 3:
        return out
    defined = np.flatnonzero((np.ptp(x, axis=1) != 0) & (np.ptp(y, axis=1) != 0))
    xc = x[defined] - x[defined].mean(axis=1)[:, None]
    yc = y[defined] - y[defined].mean(axis=1)[:, None]
    c = np.array([_cross(a, b) for a, b in zip(xc, yc)]).reshape(-1, 3)
    out[defined] = _corrcoef_tail(c, np.full(defined.size, n))
    return out


def _rows_ranks(codes: np.ndarray, n_distinct: int) -> np.ndarray:
    """Average ranks (from 0) within each row, given each value's index among the sorted
    distinct values of the whole sample: counts per row, no sort."""
    rows = codes.shape[0]
    keyed = codes + (np.arange(rows) * n_distinct)[:, None]
    counts = np.bincount(keyed.ravel(), minlength=rows * n_distinct).reshape(rows, n_distinct)
    below = np.cumsum(counts, axis=1) - counts
    table = below + (counts - 1) / 2.0
    return np.take_along_axis(table, codes, axis=1)


def paired_interval(x: np.ndarray, y: np.ndarray, seed: int, *, ranked: bool = False) -> list[float] | None:
    """Bootstrap interval of Pearson's r (`ranked`: Spearman's ρ) of paired values, the pairs
    resampled."""
    n = len(x)
    if n < 3:
        return None
    if ranked:
        _, x_code = np.unique(x, return_inverse=True)
        _, y_code = np.unique(y, return_inverse=True)
        nx, ny = int(x_code.max()) + 1, int(y_code.max()) + 1
    out = []
    for picks in resamples(n, seed, max(1, _BLOCK_CELLS // max(n, 1))):
        if ranked:
            out.append(_rows_pearson(_rows_ranks(x_code[picks], nx), _rows_ranks(y_code[picks], ny)))
        else:
            out.append(_rows_pearson(x[picks], y[picks]))
    return percentile_interval(np.concatenate(out))


def _segments_pearson(x: np.ndarray, y: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Pearson's r within each contiguous segment of `x`, `y` (NaN where undefined)."""
    out = np.full(starts.size, np.nan)
    flat = ((np.maximum.reduceat(x, starts) - np.minimum.reduceat(x, starts)) == 0) \
        | ((np.maximum.reduceat(y, starts) - np.minimum.reduceat(y, starts)) == 0)
    defined = np.flatnonzero(~flat & (sizes >= 3))
    c = []
    for k in defined:
        pair = np.stack((x[starts[k]:starts[k] + sizes[k]], y[starts[k]:starts[k] + sizes[k]]))
        pair -= pair.mean(axis=1)[:, None]
        c.append(_cross(pair[0], pair[1]))
    out[defined] = _corrcoef_tail(np.array(c).reshape(-1, 3), sizes[defined])
    return out


def _segments_auc(code: np.ndarray, n_distinct: int, ok: np.ndarray, starts: np.ndarray,
                  sizes: np.ndarray) -> np.ndarray:
    """Within each segment: P(a success's value > a failure's), ties counting half, from the
    values' indices among the sample's sorted distinct values (NaN where one class is empty)."""
    segs = starts.size
    seg = np.repeat(np.arange(segs), sizes)
    keyed = seg * n_distinct + code
    counts = np.bincount(keyed, minlength=segs * n_distinct).reshape(segs, n_distinct)
    table = (np.cumsum(counts, axis=1) - counts) + (counts - 1) / 2.0 + 1.0
    ranks = table[seg, code]
    n_pos = np.bincount(seg, weights=ok, minlength=segs)
    n_neg = sizes - n_pos
    rank_sum = np.bincount(seg, weights=np.where(ok, ranks, 0.0), minlength=segs)
    with np.errstate(invalid="ignore", divide="ignore"):
        auc = (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)
    auc[(n_pos == 0) | (n_neg == 0)] = np.nan
    return auc


def grouped_intervals(values: np.ndarray, ok_by_group: np.ndarray, starts: np.ndarray, sizes: np.ndarray,
                      seed: int) -> tuple[list[float] | None, list[float] | None]:
    """Bootstrap intervals of the point-biserial r and the AUC of `values` against their
    group's outcome, the groups (episodes: `values[starts[g]:starts[g] + sizes[g]]`, outcome
    `ok_by_group[g]`) resampled."""
    groups = sizes.size
    distinct, code = np.unique(values, return_inverse=True)
    per_row = max(1, int(sizes.sum()))
    rs: list[np.ndarray] = []
    aucs: list[np.ndarray] = []
    rows_per_block = max(1, _BLOCK_CELLS // max(per_row, distinct.size))
    for picks in resamples(groups, seed, rows_per_block):
        flat_pick = picks.ravel()
        n = sizes[flat_pick]
        at = np.repeat(starts[flat_pick] - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))
        row_sizes = n.reshape(picks.shape).sum(axis=1)
        row_starts = np.cumsum(row_sizes) - row_sizes
        x = values[at]
        ok = np.repeat(ok_by_group[flat_pick], n)
        rs.append(_segments_pearson(x, ok.astype(float), row_starts, row_sizes))
        aucs.append(_segments_auc(code[at], distinct.size, ok, row_starts, row_sizes))
    return percentile_interval(np.concatenate(rs)), percentile_interval(np.concatenate(aucs))

