"""Per-epoch curve plots for one run (headless: matplotlib's Agg backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _plot(xs: Sequence[int], ys: Sequence[float], ylabel: str, title: str, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(5, 3.5))
    try:
        ax.plot(list(xs), list(ys), marker="o")
        ax.set_xlabel("epoch")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.set_ylim(-0.02, 1.02)
        if xs:
            ax.set_xticks(list(xs))
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
    return path


def plot_curves(metrics: dict[str, Any], out_dir: str | Path) -> list[Path]:
    """Write sr.png, csr.png and forgetting.png into `out_dir`; return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    n = metrics["n_tasks"]
    sr: list[float] = metrics["sr"]
    epochs = list(range(1, len(sr) + 1))
    # an epoch with no failure is None under the `skip` reading: a gap in the curve
    fr = [float("nan") if x is None else x for x in metrics["forgetting"]]
    return [
        _plot(epochs, sr, "success rate", f"SR per epoch (n_tasks={n})", out / "sr.png"),
        _plot(epochs, metrics["csr_curve"], "cumulative success rate", f"CSR per epoch (n_tasks={n})", out / "csr.png"),
        _plot(list(range(2, len(fr) + 2)), fr, "forgetting rate", f"Forgetting per epoch (n_tasks={n})", out / "forgetting.png"),
    ]
