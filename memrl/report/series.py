"""The numbers behind the report's figures (also written as CSV): per-epoch bands over
seeds, Last / CSR against a swept parameter, the top-k grid, and the Q-value views.

Q-value figures (MemRL runs, memory name ``memrl``).
- Calibration (paper Fig. 7): each episode that had memories injected is placed by the mean
  Q of those memories (``injected[].q`` in the episode records: Q at retrieval time, before
  that episode's update); 10 equal-width bins over [min(-1, lowest Q), max(1, highest Q)];
  the success rate per bin, pooled over the group's seeds and all epochs. Episodes with no
  memory injected are a separate row ("none").
- Histograms per epoch: the distribution of the injected memories' Q per epoch (one value
  per injected memory per episode), i.e. the utilities of memories actually used -- not of
  the whole bank, which is not recorded per epoch.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Callable, Sequence

import numpy as np

from memrl.records import EpisodeRecord
from memrl.report.grouping import (REFERENCE, Group, _fmt_value, _hashable, _sort_value, flatten,
                                   short_key)
from memrl.report.runs import Run
from memrl.report.stats import t_interval
from memrl.report.tables import _csr, _last

# Swept keys with a figure of their own: key -> output stem.
PARAM_FIGURES = {"memory.lam": "lambda", "memory.alpha": "alpha"}
TOPK_KEYS = ("memory.k1", "memory.k2")
Q_BINS = 10


def curve_band(g: Group, fn: Callable[[np.ndarray], list[float]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-epoch mean, low, high over seeds (curves cut to the shortest run)."""
    curves = [fn(r.S) for r in g.runs]
    n = min(len(c) for c in curves)
    if n == 0:
        return np.array([]), np.array([]), np.array([])
    arr = np.array([c[:n] for c in curves], dtype=float)
    stats = np.array([t_interval(arr[:, j]) for j in range(n)])
    return stats[:, 0], stats[:, 1], stats[:, 2]


def param_rows(groups: Sequence[Group], key: str) -> list[dict[str, Any]]:
    """Final SR (Last) and CSR against one swept key, per (env, memory, other swept keys)."""
    rows = []
    for g in groups:
        if g.mode == "transfer" or key not in dict(g.params):
            continue
        others = {k: v for k, v in g.params if k != key}
        last_m, last_lo, last_hi = t_interval(g.per_seed(_last))
        csr_m, csr_lo, csr_hi = t_interval(g.per_seed(_csr))
        rows.append({"benchmark": g.env, "memory": g.memory,
                     "other": ", ".join(f"{short_key(k)}={_fmt_value(v)}" for k, v in others.items()),
                     short_key(key): g.param(key), "n_tasks": g.n_tasks(), "n_seeds": len(g.runs),
                     "last_mean": last_m, "last_lo": last_lo, "last_hi": last_hi,
                     "csr_mean": csr_m, "csr_lo": csr_lo, "csr_hi": csr_hi})
    series: dict[tuple, set] = defaultdict(set)
    for r in rows:
        series[(r["benchmark"], r["memory"], r["other"])].add(_hashable(r[short_key(key)]))
    rows = [r for r in rows if len(series[(r["benchmark"], r["memory"], r["other"])]) > 1]
    rows.sort(key=lambda r: (r["benchmark"], r["memory"], r["other"], _sort_value(r[short_key(key)])))
    return rows


def topk_rows(groups: Sequence[Group]) -> list[dict[str, Any]]:
    rows = []
    for g in groups:
        p = dict(g.params)
        if g.mode == "transfer" or not any(k in p for k in TOPK_KEYS):
            continue
        flat = flatten(g.runs[0].config)
        k1, k2 = (p.get(k, flat.get(k)) for k in TOPK_KEYS)
        others = {k: v for k, v in g.params if k not in TOPK_KEYS}
        last_m, last_lo, last_hi = t_interval(g.per_seed(_last))
        csr_m, csr_lo, csr_hi = t_interval(g.per_seed(_csr))
        rows.append({"benchmark": g.env, "memory": g.memory,
                     "other": ", ".join(f"{short_key(k)}={_fmt_value(v)}" for k, v in others.items()),
                     "k1": k1, "k2": k2, "n_tasks": g.n_tasks(), "n_seeds": len(g.runs),
                     "last_mean": last_m, "last_lo": last_lo, "last_hi": last_hi,
                     "csr_mean": csr_m, "csr_lo": csr_lo, "csr_hi": csr_hi})
    rows.sort(key=lambda r: (r["benchmark"], r["memory"], r["other"], _sort_value(r["k1"]), _sort_value(r["k2"])))
    return rows


def q_bins(values: Sequence[float], n_bins: int = Q_BINS) -> np.ndarray:
    lo = min(-1.0, min(values)) if len(values) else -1.0
    hi = max(1.0, max(values)) if len(values) else 1.0
    return np.linspace(lo, hi, n_bins + 1)


def _bin_index(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin i holds edges[i] <= v < edges[i+1]; the top edge belongs to the last bin."""
    return np.clip(np.searchsorted(edges, values, side="right") - 1, 0, len(edges) - 2)


def _mean_q(rec: EpisodeRecord) -> float | None:
    qs = [m.get("q") for m in rec.injected or [] if isinstance(m, dict) and m.get("q") is not None]
    return float(np.mean(qs)) if qs else None


def q_calibration_rows(groups: Sequence[Group], *, reference: str = REFERENCE,
                       n_bins: int = Q_BINS) -> list[dict[str, Any]]:
    """Success rate of episodes binned by the mean Q of their injected memories."""
    mem = [g for g in groups if g.memory == reference and g.mode != "transfer"]
    all_q = [q for g in mem for r in g.runs for rec in r.records if (q := _mean_q(rec)) is not None]
    edges = q_bins(all_q, n_bins)
    rows = []
    for g in mem:
        qs, ok, none_n, none_ok = [], [], 0, 0
        for r in g.runs:
            for rec in r.records:
                q = _mean_q(rec)
                if q is None:
                    none_n += 1
                    none_ok += int(bool(rec.success))
                else:
                    qs.append(q)
                    ok.append(int(bool(rec.success)))
        idx = _bin_index(np.array(qs, dtype=float), edges) if qs else np.array([], dtype=int)
        okv = np.array(ok, dtype=int)
        for i in range(n_bins):
            sel = idx == i
            n = int(sel.sum())
            rows.append({"benchmark": g.env, "method": g.label, "bin": i,
                         "q_lo": float(edges[i]), "q_hi": float(edges[i + 1]),
                         "n_episodes": n, "n_success": int(okv[sel].sum()) if n else 0,
                         "success_rate": float(okv[sel].mean()) if n else math.nan})
        rows.append({"benchmark": g.env, "method": g.label, "bin": "none", "q_lo": math.nan,
                     "q_hi": math.nan, "n_episodes": none_n, "n_success": none_ok,
                     "success_rate": none_ok / none_n if none_n else math.nan})
    return rows


def injected_q_by_epoch(run: Run) -> dict[int, list[float]]:
    out: dict[int, list[float]] = defaultdict(list)
    for rec in run.records:
        for m in rec.injected or []:
            if isinstance(m, dict) and m.get("q") is not None:
                out[int(rec.epoch)].append(float(m["q"]))
    return dict(sorted(out.items()))
