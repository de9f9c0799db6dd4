"""The report's figures (matplotlib, headless): SR/CSR curves and forgetting per benchmark,
Last/CSR against λ or α, the top-k grid, Q calibration and per-epoch Q histograms.

What every figure keeps to:
- each method has its own colour, marker and line style (`method_style`, by the method's
  place in the figure), so lines that lie on top of each other stay apart in print;
- the title names the runs: benchmark, model(s), seeds (and the method where there is one);
- a shaded band or error bar is a 95% interval and says which (memrl.report.intervals):
  Student-t over a group's distinct replicates, or with one replicate a Wilson interval over
  its tasks (SR, CSR, Last), over the epoch's failed tasks (forgetting) or over a bin's
  episodes (calibration);
- a label is the group's short unique label (memrl.report.grouping), marks included;
- epochs sit on integer ticks;
- Q-calibration points carry their episode count.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from memrl.metrics.compute import ZeroFail, csr_curve, forgetting_curve, q_bins, sr_curve
from memrl.report.grouping import Group, _sort_value, short_key
from memrl.report.runs import Run
from memrl.report.series import bank_q_by_epoch, curve_band, injected_q_by_epoch

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1)), (0, (1, 1)))


def method_style(i: int) -> dict[str, Any]:
    """Colour, marker and line style of the i-th method of a figure."""
    return {"color": f"C{i % 10}", "marker": MARKERS[i % len(MARKERS)],
            "linestyle": LINESTYLES[i % len(LINESTYLES)]}


def runs_of(groups: Sequence[Group]) -> str:
    """'model M; seeds 0, 1' for a figure's title."""
    runs = [r for g in groups for r in g.runs]
    models = sorted({r.identity["model"] for r in runs})
    seeds = sorted({r.seed for r in runs})
    copies = sorted({f"{c.run.seed} = {c.of.seed}" for g in groups for c in g.copies})
    extra = f" (copies, not counted: seed {', '.join(copies)})" if copies else ""
    return (f"model {', '.join(models)}; seed{'s' if len(seeds) > 1 else ''} "
            f"{', '.join(map(str, seeds))}{extra}")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


NAME_CHARS = 80  # a file name's stem at most (file systems allow 255 bytes)


def safe_name(s: str, limit: int = NAME_CHARS) -> str:
    """A file name stem from any text: letters, digits, '.', '=', '-' and '_' only, at most
    `limit` characters (a longer one is cut and ends in a hash of the whole, so two long
    names stay apart)."""
    stem = re.sub(r"[^A-Za-z0-9.=-]+", "_", s).strip("_.") or "x"
    if len(stem) <= limit:
        return stem
    digest = hashlib.sha256(s.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return stem[:limit - 11].rstrip("_.") + "_" + digest


def _rate_axis(ax: Any, integer_x: bool = True) -> None:
    """Rates live in [0, 1]: fixed y range (t-intervals wider than that are cut by the frame)."""
    ax.set_ylim(-0.02, 1.02)
    ax.grid(True, alpha=0.3)
    if integer_x:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def tight(fig: Any) -> None:
    """`fig.tight_layout()` without matplotlib's warning when a figure's labels cannot all fit
    (the figure is saved as laid out; the warning said nothing a reader of the log can act on)."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Tight layout not applied", category=UserWarning)
        warnings.filterwarnings("ignore", message=".*tight_layout.*", category=UserWarning)
        fig.tight_layout()


def _save(fig: Any, path: Path) -> Path:
    plt = _plt()
    try:
        tight(fig)
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
    return path


def _band(ax: Any, x: np.ndarray, band: Any, style: dict[str, Any], label: str) -> None:
    ax.plot(x, band.mean, label=f"{label} [{band.how}]", **style)
    if len(band.lo) and not np.all(np.isnan(band.lo)):
        ax.fill_between(x, band.lo, band.hi, alpha=0.12, color=style["color"], linewidth=0)


def plot_curves(groups: Sequence[Group], env: str, path: Path) -> Path:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    for i, g in enumerate(groups):
        for ax, fn, which in zip(axes, (sr_curve, csr_curve), ("sr", "csr")):
            band = curve_band(g, fn, which)
            _band(ax, np.arange(1, len(band.mean) + 1), band, method_style(i), g.label)
    n = ", ".join(sorted({g.n_tasks() for g in groups}))
    for ax, name in zip(axes, ("SR", "CSR")):
        ax.set_xlabel("epoch")
        ax.set_ylabel(name)
        ax.set_title(f"{env}: {name} per epoch, {n} tasks\n{runs_of(groups)}\n"
                     "mean; shaded: 95% interval, its kind in the legend", fontsize=8)
        _rate_axis(ax)
    axes[1].legend(fontsize=7)
    return _save(fig, path)


def plot_forgetting(groups: Sequence[Group], env: str, path: Path, zero_fail: ZeroFail = "zero") -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for i, g in enumerate(groups):
        band = curve_band(g, lambda S: forgetting_curve(S, zero_fail), "forgetting")
        if len(band.mean) == 0:
            continue
        _band(ax, np.arange(2, len(band.mean) + 2), band, method_style(i), g.label)
    ax.set_xlabel("epoch")
    ax.set_ylabel("forgetting rate")
    ax.set_title(f"{env}: forgetting rate (epochs ≥ 2)\n{runs_of(groups)}\n"
                 "mean; shaded: 95% interval, its kind in the legend", fontsize=8)
    _rate_axis(ax)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    return _save(fig, path)


def _errbar(m: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    lo = np.where(np.isnan(lo), m, lo)
    hi = np.where(np.isnan(hi), m, hi)
    return np.vstack([m - lo, hi - m])


def plot_param(rows: Sequence[dict[str, Any]], key: str, path: Path) -> Path:
    plt = _plt()
    col = short_key(key)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    series: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        series[(r["benchmark"], r["memory"], r["other"])].append(r)
    for i, ((env, memory, other), rs) in enumerate(series.items()):
        x = np.array([float(r[col]) for r in rs])
        label = f"{env} / {memory}" + (f" ({other})" if other else "")
        seeds = sorted({int(r["n_seeds"]) for r in rs})
        label += f" ({'/'.join(map(str, seeds))} replicate{'s' if seeds != [1] else ''})"
        for ax, name in zip(axes, ("last", "csr")):
            m = np.array([r[f"{name}_mean"] for r in rs])
            lo = np.array([r[f"{name}_lo"] for r in rs])
            hi = np.array([r[f"{name}_hi"] for r in rs])
            ax.errorbar(x, m, yerr=_errbar(m, lo, hi), capsize=3, label=label, **method_style(i))
    for ax, name in zip(axes, ("final SR (Last)", "CSR")):
        ax.set_xlabel(col)
        ax.set_ylabel(name)
        ax.set_title(f"{name} vs {col}: mean over replicates; error bars 95%: t over replicates, "
                     "Wilson over tasks at 1 replicate", fontsize=8)
        _rate_axis(ax, integer_x=False)
    axes[1].legend(fontsize=7)
    return _save(fig, path)


def plot_topk(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    plt = _plt()
    panels: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        panels[(r["benchmark"], r["memory"], r["other"])].append(r)
    fig, axes = plt.subplots(len(panels), 2, figsize=(10, 3.8 * len(panels)), squeeze=False)
    for row_axes, ((env, memory, other), rs) in zip(axes, panels.items()):
        k1s = sorted({r["k1"] for r in rs}, key=_sort_value)
        k2s = sorted({r["k2"] for r in rs}, key=_sort_value)
        for ax, name in zip(row_axes, ("last", "csr")):
            grid = np.full((len(k1s), len(k2s)), np.nan)
            for r in rs:
                grid[k1s.index(r["k1"]), k2s.index(r["k2"])] = r[f"{name}_mean"]
            im = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", origin="lower", aspect="auto")
            for i in range(len(k1s)):
                for j in range(len(k2s)):
                    if not np.isnan(grid[i, j]):
                        ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center",
                                color="white" if grid[i, j] < 0.5 else "black", fontsize=8)
            ax.set_xticks(range(len(k2s)), [str(k) for k in k2s])
            ax.set_yticks(range(len(k1s)), [str(k) for k in k1s])
            ax.set_xlabel("k2 (injected)")
            ax.set_ylabel("k1 (candidates)")
            title = f"{env} / {memory}" + (f" ({other})" if other else "")
            ax.set_title(f"{title}: {'Last' if name == 'last' else 'CSR'} (mean over replicates)", fontsize=8)
            fig.colorbar(im, ax=ax)
    return _save(fig, path)


def plot_q_calibration(rows: Sequence[dict[str, Any]], path: Path, subtitle: str = "") -> Path:
    """Success rate per bin of injected mean Q, each point with its episode count (n) and a
    95% Wilson interval."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    series: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if r["bin"] != "none" and r["n_episodes"]:
            series[(r["benchmark"], r["method"])].append(r)
    for i, ((env, method), rs) in enumerate(series.items()):
        x = np.array([(r["q_lo"] + r["q_hi"]) / 2 for r in rs])
        y = np.array([r["success_rate"] for r in rs], dtype=float)
        lo = np.array([r["wilson_lo"] for r in rs], dtype=float)
        hi = np.array([r["wilson_hi"] for r in rs], dtype=float)
        style = method_style(i)
        ax.errorbar(x, y, yerr=_errbar(y, lo, hi), capsize=3, **style,
                    label=f"{env} / {method} ({sum(r['n_episodes'] for r in rs)} episodes)")
        for xi, yi, r in zip(x, y, rs):
            ax.annotate(f"n={r['n_episodes']}", (xi, yi), textcoords="offset points",
                        xytext=(4, 6), fontsize=6, color=style["color"])
    ax.set_xlabel("mean Q of the injected memories (bin centre)")
    ax.set_ylabel("episode success rate")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("Q calibration: success rate by retrieved utility; n = episodes per bin, "
                 "error bars 95% Wilson" + (f"\n{subtitle}" if subtitle else ""), fontsize=8)
    ax.grid(True, alpha=0.3)
    if series:
        ax.legend(fontsize=7)
    return _save(fig, path)


def plot_q_hist(run: Run, title: str, path: Path) -> Path:
    """Per epoch: the Q of the whole bank at the epoch's end (from the run's bank-update log)
    and the Q of the memories injected during it (from the records)."""
    plt = _plt()
    panels = [("Q of injected memories (before the episode's update)", injected_q_by_epoch(run))]
    bank = bank_q_by_epoch(run)
    if bank:
        panels.insert(0, ("Q of every memory in the bank at the end of the epoch", bank))
    values = [q for _, d in panels for qs in d.values() for q in qs]
    edges = q_bins(values, 20)
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.0), squeeze=False)
    for ax, (xlabel, by_epoch) in zip(axes[0], panels):
        for i, (epoch, qs) in enumerate(by_epoch.items()):
            st = method_style(i)
            ax.hist(qs, bins=edges, histtype="step", linewidth=1.5, color=st["color"],
                    linestyle=st["linestyle"], label=f"epoch {epoch} (n={len(qs)})")
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel("count")
        ax.grid(True, alpha=0.3)
        if by_epoch:
            ax.legend(fontsize=7)
    note = "" if bank else " (bank Q per epoch not recorded: the run predates bank_updates.jsonl)"
    fig.suptitle(title + note, fontsize=9)
    return _save(fig, path)
