"""The report's figures (matplotlib, headless): SR/CSR curves and forgetting per benchmark,
Last/CSR against λ or α, the top-k grid, Q calibration and per-epoch Q histograms."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from memrl.metrics import ZeroFail, csr_curve, forgetting_curve, sr_curve
from memrl.report.grouping import Group, _sort_value, short_key
from memrl.report.runs import Run
from memrl.report.series import curve_band, injected_q_by_epoch, q_bins


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def safe_name(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9.=-]+", "_", s).strip("_") or "x"


def _rate_axis(ax: Any, integer_x: bool = True) -> None:
    """Rates live in [0, 1]: fixed y range (t-intervals wider than that are cut by the frame)."""
    ax.set_ylim(-0.02, 1.02)
    ax.grid(True, alpha=0.3)
    if integer_x:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _save(fig: Any, path: Path) -> Path:
    plt = _plt()
    try:
        fig.tight_layout()
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
    return path


def plot_curves(groups: Sequence[Group], env: str, path: Path) -> Path:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for g in groups:
        for ax, fn in zip(axes, (sr_curve, csr_curve)):
            m, lo, hi = curve_band(g, fn)
            x = np.arange(1, len(m) + 1)
            line, = ax.plot(x, m, marker="o", label=f"{g.label} (n={len(g.runs)})")
            if len(g.runs) > 1:
                ax.fill_between(x, lo, hi, alpha=0.15, color=line.get_color())
    n = ", ".join(sorted({g.n_tasks() for g in groups}))
    for ax, name in zip(axes, ("SR", "CSR")):
        ax.set_xlabel("epoch")
        ax.set_ylabel(name)
        ax.set_title(f"{env}: {name} per epoch ({n} tasks; mean, 95% t-interval over seeds)", fontsize=8)
        _rate_axis(ax)
    axes[1].legend(fontsize=7)
    return _save(fig, path)


def plot_forgetting(groups: Sequence[Group], env: str, path: Path, zero_fail: ZeroFail = "zero") -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for g in groups:
        m, lo, hi = curve_band(g, lambda S: forgetting_curve(S, zero_fail))
        if len(m) == 0:
            continue
        x = np.arange(2, len(m) + 2)
        line, = ax.plot(x, m, marker="o", label=f"{g.label} (n={len(g.runs)})")
        if len(g.runs) > 1:
            ax.fill_between(x, lo, hi, alpha=0.15, color=line.get_color())
    ax.set_xlabel("epoch")
    ax.set_ylabel("forgetting rate")
    ax.set_title(f"{env}: forgetting rate (mean, 95% t-interval over seeds)", fontsize=8)
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
    for (env, memory, other), rs in series.items():
        x = np.array([float(r[col]) for r in rs])
        label = f"{env} / {memory}" + (f" ({other})" if other else "")
        for ax, name in zip(axes, ("last", "csr")):
            m = np.array([r[f"{name}_mean"] for r in rs])
            lo = np.array([r[f"{name}_lo"] for r in rs])
            hi = np.array([r[f"{name}_hi"] for r in rs])
            ax.errorbar(x, m, yerr=_errbar(m, lo, hi), marker="o", capsize=3, label=label)
    for ax, name in zip(axes, ("final SR (Last)", "CSR")):
        ax.set_xlabel(col)
        ax.set_ylabel(name)
        ax.set_title(f"{name} vs {col} (mean, 95% t-interval over seeds)", fontsize=8)
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
            ax.set_title(f"{title}: {'Last' if name == 'last' else 'CSR'} (mean over seeds)", fontsize=8)
            fig.colorbar(im, ax=ax)
    return _save(fig, path)


def plot_q_calibration(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    series: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if r["bin"] != "none" and r["n_episodes"]:
            series[(r["benchmark"], r["method"])].append(r)
    for (env, method), rs in series.items():
        x = [(r["q_lo"] + r["q_hi"]) / 2 for r in rs]
        y = [r["success_rate"] for r in rs]
        ax.plot(x, y, marker="o", label=f"{env} / {method} ({sum(r['n_episodes'] for r in rs)} episodes)")
    ax.set_xlabel("mean Q of the injected memories (bin centre)")
    ax.set_ylabel("episode success rate")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("Q calibration: success rate by retrieved utility", fontsize=8)
    ax.grid(True, alpha=0.3)
    if series:
        ax.legend(fontsize=7)
    return _save(fig, path)


def plot_q_hist(run: Run, title: str, path: Path) -> Path:
    plt = _plt()
    by_epoch = injected_q_by_epoch(run)
    values = [q for qs in by_epoch.values() for q in qs]
    edges = q_bins(values, 20)
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for epoch, qs in by_epoch.items():
        ax.hist(qs, bins=edges, histtype="step", linewidth=1.5, label=f"epoch {epoch} ({len(qs)})")
    ax.set_xlabel("Q of injected memories (before the episode's update)")
    ax.set_ylabel("count")
    ax.set_title(title, fontsize=8)
    ax.grid(True, alpha=0.3)
    if by_epoch:
        ax.legend(fontsize=7)
    return _save(fig, path)
