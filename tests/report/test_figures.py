"""Figures a reviewer accepts: each method with its own marker and line style, the runs named
in titles (env, model, seeds; method for one run), no t-interval claimed at one replicate (Wilson
over its tasks, as the run's own plots, and the figure says which), integer epoch ticks, and Q
calibration points carrying their episode counts with Wilson intervals."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from test_report import MATRICES, write_run

from memrl import report as R
from memrl.metrics.compute import wilson
from memrl.report import figures as F
from memrl.report.plots import write_run_plots
from memrl.report.series import curve_band, q_calibration_rows


@pytest.fixture()
def captured(monkeypatch):
    """The matplotlib figures the report draws, kept open for inspection."""
    figs = []
    monkeypatch.setattr(F, "_save", lambda fig, path: figs.append(fig) or path)
    yield figs
    import matplotlib.pyplot as plt

    for f in figs:
        plt.close(f)


def groups_of(root: Path):
    runs = [R.load_run(p) for p in R.find_runs([root])]
    return R.group_runs(runs, warn=lambda m: None)


def test_wilson_by_hand():
    p, lo, hi = wilson(3, 4)  # z = 1.95996: centre (0.75 + z²/8) / (1 + z²/4)
    z = 1.959963984540054
    c = (0.75 + z * z / 8) / (1 + z * z / 4)
    h = z * math.sqrt(0.75 * 0.25 / 4 + z * z / 64) / (1 + z * z / 4)
    assert (p, lo, hi) == pytest.approx((0.75, c - h, c + h))
    assert wilson(0, 5)[1] == 0.0 and wilson(5, 5)[2] == 1.0 and math.isnan(wilson(0, 0)[1])


@pytest.mark.parametrize("n", range(1, 40))
def test_wilson_holds_the_proportion_at_both_ends(n):
    # at k = 0 (n = 3, 6, 7, ...) and k = n rounding put the bound a hair past p, which made
    # matplotlib refuse the calibration error bars as negative
    for k in (0, n):
        p, lo, hi = wilson(k, n)
        assert lo <= p <= hi


def test_one_replicate_gets_wilson_over_its_tasks_not_a_t_interval(tmp_path, captured):
    """One replicate: each epoch's SR is k of the run's N tasks, drawn with its Wilson
    interval, as the run's own plots draw it (memrl.report.intervals)."""
    root = tmp_path / "runs"
    for (memory, seed), S in MATRICES.items():
        if seed == 0:  # one seed per method
            write_run(root / memory, memory=memory, seed=seed, S=S)
    groups = groups_of(root)
    band = curve_band(groups[0], lambda S: list(S.mean(axis=1)), "sr")
    assert band.how == "1 replicate: Wilson over 4 tasks" and not np.any(np.isnan(band.lo))
    S = np.array(MATRICES[("memrl", 0)])
    assert list(band.lo) == pytest.approx([wilson(int(k), 4)[1] for k in S.sum(axis=1)])
    F.plot_curves(groups, "alfworld", tmp_path / "c.png")
    fig = captured[-1]
    for ax in fig.axes:
        title = ax.get_title()
        assert "alfworld" in title and "seed 0" in title and "model" in title
        assert "t-interval" not in title and "95% interval" in title
        labels = [t.get_text() for t in ax.get_legend().get_texts()] if ax.get_legend() else []
        assert not labels or all("Wilson over 4 tasks" in x for x in labels)
        styles = [(ln.get_marker(), ln.get_linestyle()) for ln in ax.get_lines()]
        assert len(set(styles)) == len(styles) == 2  # memrl and none drawn apart
        ticks = [t for t in ax.get_xticks() if 1 <= t <= 3]
        assert ticks and all(float(t).is_integer() for t in ticks)


def test_several_seeds_get_a_t_interval(tmp_path, runs_dir, captured):
    groups = groups_of(runs_dir)
    assert curve_band(groups[0], lambda S: list(S.mean(axis=1))).how == "t over 2 replicates"
    F.plot_forgetting(groups, "alfworld", tmp_path / "f.png")
    ax = captured[-1].axes[0]
    assert "seeds 0, 1" in ax.get_title()
    assert all("t over 2 replicates" in t.get_text() for t in ax.get_legend().get_texts())


def test_q_calibration_points_carry_n_and_wilson(tmp_path, runs_dir, captured):
    rows = q_calibration_rows(groups_of(runs_dir))
    used = [r for r in rows if r["bin"] != "none" and r["n_episodes"]]
    assert used and all(r["wilson_lo"] <= r["success_rate"] <= r["wilson_hi"] for r in used)
    for r in used:
        assert (r["wilson_lo"], r["wilson_hi"]) == pytest.approx(wilson(r["n_success"], r["n_episodes"])[1:])
    F.plot_q_calibration(rows, tmp_path / "q.png", subtitle="model m; seeds 0, 1")
    ax = captured[-1].axes[0]
    notes = sorted(t.get_text() for t in ax.texts)
    assert notes == sorted(f"n={r['n_episodes']}" for r in used)
    assert "Wilson" in ax.get_title() and "seeds 0, 1" in ax.get_title()


def test_per_run_plots_name_the_run_and_show_wilson(tmp_path):
    import memrl.report.plots as P
    from memrl.core.rundir import RunDir
    from memrl.metrics.compute import write_metrics

    d = write_run(tmp_path / "run", memory="memrl", seed=3, S=MATRICES[("memrl", 0)])

    seen = []
    real = P.plt.subplots

    def spy(*a, **kw):
        fig, ax = real(*a, **kw)
        seen.append(ax)
        return fig, ax

    P.plt.subplots = spy
    try:
        write_metrics(d)
        write_run_plots(d)
    finally:
        P.plt.subplots = real
    assert {p.name for p in RunDir(d).plots.glob("*.png")} == {"sr.png", "csr.png", "forgetting.png",
                                                               "q_calibration.png"}
    for ax in seen:
        assert "alfworld / memrl" in ax.get_title() and "seed 3" in ax.get_title()
    sr_ax = seen[0]
    assert "95% Wilson interval" in [t.get_text() for t in sr_ax.get_legend().get_texts()]
    assert [float(t) for t in sr_ax.get_xticks()] == [1.0, 2.0, 3.0]
    assert any(t.get_text().startswith("n=") for t in seen[-1].texts)  # calibration bins' n
