"""The blocked bootstrap (memrl/metrics/bootstrap.py) gives the intervals the one-resample-at-a-
time loop gave, to the last bit: the same resamples, the same degenerate ones left out, on
samples with ties, constant stretches, few values, and ones where most resamples are degenerate."""

from __future__ import annotations

import numpy as np
import pytest

from memrl.metrics import bootstrap
from memrl.metrics.bootstrap import N_BOOT, grouped_intervals, paired_interval, resamples
from memrl.metrics.utility import _auc, _pearson, _spearman


def loop_paired(fn, x, y, seed):
    """The former code: one resample at a time."""
    rng = np.random.default_rng(seed)
    stats = []
    for _ in range(N_BOOT):
        pick = rng.integers(0, len(x), len(x))
        value = fn(x[pick], y[pick])
        if value is not None:
            stats.append(value)
    if len(stats) < N_BOOT // 2:
        return None
    return [float(np.percentile(stats, 2.5)), float(np.percentile(stats, 97.5))]


def loop_grouped(groups, oks, seed):
    """The former q_prospective loop: episodes resampled, their injections gathered."""
    rng = np.random.default_rng(seed)
    rs, aucs = [], []
    for _ in range(N_BOOT):
        pick = rng.integers(0, len(groups), len(groups))
        bx = np.concatenate([groups[i] for i in pick])
        by = np.concatenate([np.full(groups[i].size, oks[i]) for i in pick])
        r_, a_ = _pearson(bx, by.astype(float)), _auc(bx, by)
        if r_ is not None:
            rs.append(r_)
        if a_ is not None:
            aucs.append(a_)
    ci = [None, None]
    for k, stats in enumerate((rs, aucs)):
        if len(stats) >= N_BOOT // 2:
            ci[k] = [float(np.percentile(stats, 2.5)), float(np.percentile(stats, 97.5))]
    return tuple(ci)


def same(a, b) -> None:
    assert a == b, (a, b)  # None where the loop gave none; otherwise the same floats


def test_resamples_are_the_loops_draws_in_any_block_size():
    rng = np.random.default_rng(5)
    loop = np.stack([rng.integers(0, 7, 7) for _ in range(N_BOOT)])
    for rows in (1, 3, 64, N_BOOT):
        assert np.array_equal(np.concatenate(list(resamples(7, 5, rows))), loop)


PAIRED = {
    "continuous": lambda rng, n: (rng.random(n), rng.random(n)),
    "ties": lambda rng, n: (rng.choice([0.0, 0.5, 1.0], n), rng.choice([0.0, 0.25, 1.0], n)),
    "rates": lambda rng, n: (rng.choice([0.1, 0.2, 0.7], n), rng.integers(0, 3, n) / 2.0),
    "one_odd_value": lambda rng, n: (np.r_[np.zeros(n - 1), 1.0], rng.random(n)),  # mostly constant resamples
    "constant": lambda rng, n: (np.full(n, 0.3), rng.random(n)),
}


@pytest.mark.parametrize("shape", sorted(PAIRED))
@pytest.mark.parametrize("n", [3, 4, 9, 40])
def test_pearson_and_spearman_intervals_match_the_loop(shape, n):
    for seed in range(3):
        x, y = PAIRED[shape](np.random.default_rng(100 * n + seed), n)
        same(paired_interval(x, y, seed), loop_paired(_pearson, x, y, seed))
        same(paired_interval(x, y, seed + 1, ranked=True), loop_paired(_spearman, x, y, seed + 1))


def test_an_interval_needs_half_the_resamples_defined():
    stats = np.full(N_BOOT, np.nan)
    stats[: N_BOOT // 2 - 1] = np.linspace(-1, 1, N_BOOT // 2 - 1)
    assert bootstrap.percentile_interval(stats) is None
    stats[N_BOOT // 2 - 1] = 0.0
    lo, hi = bootstrap.percentile_interval(stats)
    assert -1 < lo < hi < 1


GROUPED = {
    "continuous": lambda rng: rng.random(rng.integers(1, 5)),
    "ties": lambda rng: rng.choice([0.0, 0.1, 0.25, 0.5, 0.9], rng.integers(1, 5)),
    "similarity_only": lambda rng: np.zeros(rng.integers(1, 4)),  # RAG: Q = 0 everywhere
}


@pytest.mark.parametrize("shape", sorted(GROUPED))
@pytest.mark.parametrize("episodes", [3, 5, 30])
@pytest.mark.parametrize("p_success", [0.1, 0.5])
def test_point_biserial_and_auc_intervals_match_the_loop(shape, episodes, p_success):
    for seed in range(2):
        rng = np.random.default_rng(1000 * episodes + seed)
        groups = [GROUPED[shape](rng) for _ in range(episodes)]
        oks = rng.random(episodes) < p_success
        lens = np.array([g.size for g in groups], dtype=np.int64)
        every = np.concatenate(groups)
        r_ci, auc_ci = grouped_intervals(every, oks, np.cumsum(lens) - lens, lens, seed)
        want_r, want_auc = loop_grouped(groups, oks, seed)
        same(r_ci, want_r)
        same(auc_ci, want_auc)


def test_small_blocks_give_the_same_intervals(monkeypatch):
    rng = np.random.default_rng(9)
    groups = [rng.choice([0.0, 0.3, 0.6], rng.integers(1, 4)) for _ in range(25)]
    oks = rng.random(25) < 0.5
    lens = np.array([g.size for g in groups], dtype=np.int64)
    every, starts = np.concatenate(groups), np.cumsum(lens) - lens
    x, y = rng.random(30), rng.random(30)
    whole = (grouped_intervals(every, oks, starts, lens, 2), paired_interval(x, y, 4, ranked=True))
    monkeypatch.setattr(bootstrap, "_BLOCK_CELLS", 7)  # a few resamples per block
    assert (grouped_intervals(every, oks, starts, lens, 2), paired_interval(x, y, 4, ranked=True)) == whole
