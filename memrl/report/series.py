"""The numbers behind the report's figures (also written as CSV): per-epoch bands over
seeds, Last / CSR against a swept parameter, the top-k grid, and the Q-value views.

Curves (SR, CSR, forgetting per epoch) and the numbers of Table 1: the mean over a group's
distinct replicates with a 95% Student-t interval over them when it has two or more; with
one, each point is a proportion of that run's tasks (an epoch's SR: solved of N; CSR: solved
so far of N; forgetting: forgotten of the epoch's failed tasks) with its 95% Wilson interval,
as in the run's own plots (memrl.report.intervals). `curve_band` says which (`Band.how`).

Q-value figures (MemRL runs, memory name ``memrl``).
- Calibration (paper Fig. 7): each episode that had memories injected is placed by the mean
  Q of those memories (``injected[].q`` in the episode records: Q at retrieval time, before
  that episode's update); 10 equal-width bins over [min(-1, lowest Q), max(1, highest Q)];
  the success rate per bin with its episode count and 95% Wilson interval, pooled over the
  group's seeds and all epochs. Episodes with no memory injected are a separate row ("none").
- Histograms per epoch: the Q of every memory in the bank at the end of each epoch, from the
  run's bank-update log (`bank_updates.jsonl`, memrl.journal.banklog; absent for runs from before
  it), and the Q of the injected memories per epoch (one value per injected memory per
  episode, from the records), i.e. the utilities of the memories actually used.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from memrl.metrics.compute import Q_BINS, calibration, mean_injected_q, q_bins, wilson
from memrl.report.grouping import REFERENCE, Group, _hashable, _sort_value, flatten, mark_suffix, short_key, short_value
from memrl.report.runs import Run
from memrl.report.intervals import over_replicates, proportion
from memrl.report.tables import group_estimate

# Swept keys with a figure of their own: key -> output stem.
PARAM_FIGURES = {"memory.lam": "lambda", "memory.alpha": "alpha"}
TOPK_KEYS = ("memory.k1", "memory.k2")


class Band(NamedTuple):
    """A curve's per-point mean, low and high, and `how`: which 95% interval low/high are."""

    mean: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    how: str


CURVES = ("sr", "csr", "forgetting")


def curve_counts(S: np.ndarray, which: str, zero_fail: str = "zero") -> list[tuple[int, int]]:
    """Per point of a curve of one run's (epochs, tasks) success matrix: (k, n) units, e.g.
    (solved, tasks) per epoch for SR; forgetting from epoch 2: (forgotten, failed)."""
    B = np.asarray(S).astype(bool)
    n = int(B.shape[1])
    if which == "sr":
        return [(int(row.sum()), n) for row in B]
    if which == "csr":
        return [(int(x), n) for x in np.logical_or.accumulate(B, axis=0).sum(axis=1)]
    if which == "forgetting":
        return [(int((B[t - 1] & ~B[t]).sum()), int((~B[t]).sum())) for t in range(1, B.shape[0])]
    raise ValueError(f"unknown curve {which!r} (one of {CURVES})")


def curve_band(g: Group, fn: Callable[[np.ndarray], list[float]], which: str | None = None) -> Band:
    """Per-epoch mean, low, high (curves cut to the shortest run): a Student-t interval over
    the distinct replicates when there are two or more; with one, a Wilson interval per point
    over that run's tasks (`which` names the curve: sr, csr or forgetting; without it, no
    interval at one replicate)."""
    curves = [[math.nan if v is None else v for v in fn(r.S)] for r in g.runs]
    n = min(len(c) for c in curves)
    if n == 0:
        return Band(np.array([]), np.array([]), np.array([]), "")
    arr = np.array([c[:n] for c in curves], dtype=float)
    if len(g.runs) > 1:
        ests = [over_replicates(list(arr[:, j])) for j in range(n)]
        return Band(np.array([e.mean for e in ests]), np.array([e.lo for e in ests]),
                    np.array([e.hi for e in ests]), f"t over {len(g.runs)} replicates")
    if which is None:
        nan = np.full(n, math.nan)
        return Band(arr[0], nan, nan.copy(), "1 replicate: no interval")
    ests = [proportion(k, m) for k, m in curve_counts(g.runs[0].S, which)[:n]]
    lo = np.array([e.lo for e in ests])
    hi = np.array([e.hi for e in ests])
    unit = "failed tasks" if which == "forgetting" else f"{g.runs[0].S.shape[1]} tasks"
    return Band(arr[0], lo, hi, f"1 replicate: Wilson over {unit}")


def param_rows(groups: Sequence[Group], key: str) -> list[dict[str, Any]]:
    """Final SR (Last) and CSR against one swept key, per (env, memory, other swept keys)."""
    rows = []
    for g in groups:
        if g.mode == "transfer" or key not in dict(g.params):
            continue
        others = {k: v for k, v in g.params if k != key}
        last, csr = group_estimate(g, "last"), group_estimate(g, "csr")
        rows.append({"benchmark": g.env, "memory": g.memory,
                     "other": ", ".join(f"{short_key(k)}={short_value(v)}" for k, v in others.items())
                     + mark_suffix(g.marks),
                     short_key(key): g.param(key), "n_tasks": g.n_tasks(), "n_seeds": len(g.runs),
                     "last_mean": last.mean, "last_lo": last.lo, "last_hi": last.hi,
                     "csr_mean": csr.mean, "csr_lo": csr.lo, "csr_hi": csr.hi, "interval": last.how})
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
        last, csr = group_estimate(g, "last"), group_estimate(g, "csr")
        rows.append({"benchmark": g.env, "memory": g.memory,
                     "other": ", ".join(f"{short_key(k)}={short_value(v)}" for k, v in others.items())
                     + mark_suffix(g.marks),
                     "k1": k1, "k2": k2, "n_tasks": g.n_tasks(), "n_seeds": len(g.runs),
                     "last_mean": last.mean, "last_lo": last.lo, "last_hi": last.hi,
                     "csr_mean": csr.mean, "csr_lo": csr.lo, "csr_hi": csr.hi, "interval": last.how})
    rows.sort(key=lambda r: (r["benchmark"], r["memory"], r["other"], _sort_value(r["k1"]), _sort_value(r["k2"])))
    return rows


def q_calibration_rows(groups: Sequence[Group], *, reference: str = REFERENCE,
                       n_bins: int = Q_BINS) -> list[dict[str, Any]]:
    """Success rate of episodes binned by the mean Q of their injected memories, with each
    bin's episode count and 95% Wilson interval (memrl.metrics.compute.calibration)."""
    mem = [g for g in groups if g.memory == reference and g.mode != "transfer"]
    all_q = [q for g in mem for r in g.runs for rec in r.records if (q := mean_injected_q(rec)) is not None]
    edges = q_bins(all_q, n_bins)
    rows = []
    for g in mem:
        qs, ok, none_n, none_ok = [], [], 0, 0
        for r in g.runs:
            for rec in r.records:
                q = mean_injected_q(rec)
                if q is None:
                    none_n += 1
                    none_ok += int(bool(rec.success))
                else:
                    qs.append(q)
                    ok.append(bool(rec.success))
        rows += [{"benchmark": g.env, "method": g.label, **row} for row in calibration(qs, ok, edges)]
        _, lo, hi = wilson(none_ok, none_n)
        rows.append({"benchmark": g.env, "method": g.label, "bin": "none", "q_lo": math.nan,
                     "q_hi": math.nan, "n_episodes": none_n, "n_success": none_ok,
                     "success_rate": none_ok / none_n if none_n else math.nan,
                     "wilson_lo": lo, "wilson_hi": hi})
    return rows


def bank_q_by_epoch(run: Run) -> dict[int, list[float]]:
    """The Q of every memory in the bank at the end of each epoch, from the run's bank-update
    log; {} for a run without a complete log (from before it)."""
    if not run.history.covers(run.records):
        return {}
    ends = run.history.q_at_epoch_end()
    return {e: sorted(ends[e].values()) for e in run.epochs if e in ends}


def injected_q_by_epoch(run: Run) -> dict[int, list[float]]:
    out: dict[int, list[float]] = defaultdict(list)
    for rec in run.records:
        for m in rec.injected or []:
            if isinstance(m, dict) and m.get("q") is not None:
                out[int(rec.epoch)].append(float(m["q"]))
    return dict(sorted(out.items()))
