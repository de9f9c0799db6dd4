"""Per-run plots (headless: matplotlib's Agg backend), written into `<run>/plots/`:

- `sr.png`, `csr.png`, `forgetting.png`: the curve per epoch with a shaded 95% Wilson
  interval (an epoch's SR is k of the run's N tasks; CSR likewise; the forgetting rate is
  the forgotten tasks out of the epoch's failed ones: memrl.report.series.curve_counts), the
  interval the report and the MemRL page give one replicate (memrl.report.intervals),
  epochs on integer ticks;
- `q_calibration.png` (runs that injected memories): success rate by the mean Q of the
  injected memories, each bin with its episode count n and a 95% Wilson interval.

Every title names the run: env / method / model / seed (memrl.journal.runcard.identity).
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Any, Iterator, Sequence

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from memrl.core.records import EpisodeRecord
from memrl.metrics.compute import ZeroFail, calibration, csr_curve, forgetting_curve, mean_injected_q, q_bins, sr_curve
from memrl.report.figures import tight


@contextlib.contextmanager
def _figure(path: Path, xlabel: str, ylabel: str, title: str) -> Iterator[Any]:
    """One rate plot (y in [0, 1]): yields the axes to draw on, then labels, saves, closes."""
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    try:
        yield ax
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=8)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(True, alpha=0.3)
        tight(fig)
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)


def _plot(xs: Sequence[int], ys: Sequence[float], counts: Sequence[tuple[int, int]],
          ylabel: str, title: str, path: Path) -> Path:
    from memrl.report.intervals import proportion

    with _figure(path, "epoch", ylabel, title) as ax:
        bounds = np.array([proportion(k, n)[1:3] for k, n in counts], dtype=float).reshape(-1, 2)
        ax.plot(list(xs), list(ys), marker="o", color="C0")
        if len(xs):
            ax.fill_between(list(xs), bounds[:, 0], bounds[:, 1], color="C0", alpha=0.15,
                            linewidth=0, label="95% Wilson interval")
            ax.set_xticks(list(xs))
            ax.legend(fontsize=7)
    return path


def plot_calibration(records: Sequence[EpisodeRecord], who: str, path: Path) -> Path | None:
    pairs = [(q, bool(r.success)) for r in records if (q := mean_injected_q(r)) is not None]
    if not pairs:
        return None
    rows = [r for r in calibration([q for q, _ in pairs], [ok for _, ok in pairs],
                                   q_bins([q for q, _ in pairs])) if r["n_episodes"]]
    title = f"{who}\nQ calibration ({len(pairs)} episodes with memories; n per bin, 95% Wilson)"
    with _figure(path, "mean Q of the injected memories (bin centre)", "episode success rate",
                 title) as ax:
        x = np.array([(r["q_lo"] + r["q_hi"]) / 2 for r in rows])
        y = np.array([r["success_rate"] for r in rows])
        err = np.vstack([y - np.array([r["wilson_lo"] for r in rows]),
                         np.array([r["wilson_hi"] for r in rows]) - y])
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, color="C0")
        for xi, yi, r in zip(x, y, rows):
            ax.annotate(f"n={r['n_episodes']}", (xi, yi), textcoords="offset points",
                        xytext=(4, 6), fontsize=7)
    return path


RUN_PLOTS = ("sr.png", "csr.png", "forgetting.png")  # every run's plots (+ q_calibration.png with memories)


def plot_run(S: np.ndarray, records: Sequence[EpisodeRecord], who: str,
             out_dir: str | Path, zero_fail: ZeroFail = "zero") -> list[Path]:
    """The per-run plots of a run's (epochs, tasks) success matrix `S` and its records; `who`
    names the run in every title (memrl.journal.runcard.identity_label). An epoch with no failure is
    a gap in the forgetting curve under the `skip` reading (`zero_fail`)."""
    from memrl.report.series import curve_counts

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    n = int(np.asarray(S).shape[1])
    epochs = list(range(1, np.asarray(S).shape[0] + 1))
    paths = [
        _plot(epochs, sr_curve(S), curve_counts(S, "sr"), "success rate",
              f"{who}\nSR per epoch ({n} tasks)", out / RUN_PLOTS[0]),
        _plot(epochs, csr_curve(S), curve_counts(S, "csr"), "cumulative success rate",
              f"{who}\nCSR per epoch ({n} tasks)", out / RUN_PLOTS[1]),
        _plot(epochs[1:], [math.nan if x is None else x for x in forgetting_curve(S, zero_fail)],
              curve_counts(S, "forgetting"), "forgetting rate",
              f"{who}\nforgetting per epoch (forgotten / failed tasks)", out / RUN_PLOTS[2]),
    ]
    cal = plot_calibration(records, who, out / "q_calibration.png")
    return paths + ([cal] if cal else [])


def write_run_plots(run_dir: str | Path, zero_fail: ZeroFail = "zero") -> Path:
    """The run's own plots (`<run>/plots/`), from its records, titled by its run card."""
    import json

    from memrl.core.rundir import RunDir
    from memrl.journal.runcard import identity, identity_label
    from memrl.metrics.compute import load_run, success_matrix

    rd = RunDir(run_dir)
    records = load_run(rd)
    card = json.loads(rd.card.read_text(encoding="utf-8")) if rd.card.is_file() else {}
    who = identity_label(identity(card.get("config") or {}, card.get("model")))
    _, _, S = success_matrix(records, allow_missing=True)
    plot_run(S, records, who, rd.plots, zero_fail)
    return rd.plots
