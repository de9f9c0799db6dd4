"""Run metrics (docs/design.md §5), computed from a run's episode records alone.

For N tasks over epochs t = 1..E the success matrix is s[t, i] ∈ {0, 1}:

- SR_t  = mean_i s[t, i];  Last = SR_E.
- CSR_t = fraction of tasks solved at least once in epochs 1..t;  CSR = CSR_E.
- FR_t  = #(s[t-1, i] = 1 and s[t, i] = 0) / #(s[t, i] = 0), for t ≥ 2.
  An epoch with no failure has FR_t = 0/0, which is undefined. Two readings
  (`forgetting_zero_fail`): `zero` (default) counts it as 0 -- nothing can have been
  forgotten -- which pulls the mean down; `skip` leaves it out (None in the curve, not
  in the mean). `forgetting_mean` is the mean of FR_2..FR_E under the reading chosen and
  is None (JSON null) when no epoch is left; metrics.json also holds the mean under both
  readings and the count of such epochs (`forgetting_zero_fail_epochs`).
- Retrieval (`retrieval`, per epoch, from the episodes' `info.retrieval`): the mean size
  of the Phase-A pool over all retrievals (an empty pool counts 0) and the share of the
  non-empty pools that held only the task's own memories (a saturated pool: when tasks
  repeat, their own memories tie at similarity 1). Absent for modules that do not record it.
- staleness: the distribution of the episodes' retrieval staleness (updates committed
  between an episode's retrieval and its own; `staleness_stats`).

Several records for one (task, epoch) -- e.g. Pass@k attempts -- count as a
success if any of them succeeded.

Intervals of one run's proportions (an epoch's SR over its N tasks, a Q-calibration bin's
success rate over its episodes): the 95% Wilson score interval (`wilson`). Q calibration
(`calibration`): episodes binned by the mean Q of their injected memories (as recorded at
retrieval), 10 equal-width bins over [min(-1, lowest Q), max(1, highest Q)] (`q_bins`).

CLI: ``memrl metrics <run_dir> [--no-plots] [--allow-missing] [--forgetting-zero-fail zero|skip]``
(memrl/cli/metrics.py).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal, Sequence

import numpy as np

from memrl.core.records import EpisodeRecord, read_episodes, write_json_atomic
from memrl.core.rundir import RunDir
from memrl.metrics.utility import utility_readings

ZeroFail = Literal["zero", "skip"]
ZERO_FAIL_READINGS: tuple[str, ...] = ("zero", "skip")


def _index(records: Sequence[EpisodeRecord]) -> tuple[list[str], list[int], dict[tuple[str, int], bool]]:
    if not records:
        raise ValueError("no episode records")
    cells: dict[tuple[str, int], bool] = {}
    for r in records:
        key = (r.task_id, int(r.epoch))
        cells[key] = cells.get(key, False) or bool(r.success)
    task_ids = sorted({t for t, _ in cells})
    seen = {e for _, e in cells}
    # A contiguous epoch range, so a wholly missing epoch shows up as missing cells.
    epochs = list(range(min(seen), max(seen) + 1))
    return task_ids, epochs, cells


def missing_cells(records: Sequence[EpisodeRecord]) -> list[tuple[str, int]]:
    """(task_id, epoch) pairs with no record, in (epoch, task) order."""
    task_ids, epochs, cells = _index(records)
    return [(t, e) for e in epochs for t in task_ids if (t, e) not in cells]


def success_matrix(
    records: Sequence[EpisodeRecord], allow_missing: bool = False
) -> tuple[list[str], list[int], np.ndarray]:
    """Return (sorted task ids, epochs, S) with S[t, i] ∈ {0, 1}, shape (E, N).

    Missing (task, epoch) cells raise ValueError unless `allow_missing`, in which case
    they count as failures (use `missing_cells` to list them; `compute_metrics`
    reports them under ``missing_cells``).
    """
    task_ids, epochs, cells = _index(records)
    missing = [(t, e) for e in epochs for t in task_ids if (t, e) not in cells]
    if missing and not allow_missing:
        shown = ", ".join(f"{t}@epoch{e}" for t, e in missing[:10])
        more = f" (+{len(missing) - 10} more)" if len(missing) > 10 else ""
        raise ValueError(f"{len(missing)} missing (task, epoch) cells: {shown}{more} (an unfinished "
                         "run, or a torn episodes file: the run's own command continues it and "
                         "restores a torn last batch; --allow-missing counts them as failures)")
    col = {t: i for i, t in enumerate(task_ids)}
    row = {e: j for j, e in enumerate(epochs)}
    S = np.zeros((len(epochs), len(task_ids)), dtype=int)
    for (t, e), ok in cells.items():
        S[row[e], col[t]] = int(ok)
    return task_ids, epochs, S


def _check(S: np.ndarray) -> np.ndarray:
    S = np.asarray(S)
    if S.ndim != 2 or S.shape[0] == 0 or S.shape[1] == 0:
        raise ValueError(f"success matrix must be non-empty (E, N), got shape {S.shape}")
    return S.astype(bool)


def sr_curve(S: np.ndarray) -> list[float]:
    """SR_t per epoch."""
    return [float(x) for x in _check(S).mean(axis=1)]


def last(S: np.ndarray) -> float:
    """SR of the final epoch."""
    return sr_curve(S)[-1]


def csr_curve(S: np.ndarray) -> list[float]:
    """CSR_t: fraction of tasks solved at least once in epochs 1..t."""
    return [float(x) for x in np.logical_or.accumulate(_check(S), axis=0).mean(axis=1)]


def csr(S: np.ndarray) -> float:
    return csr_curve(S)[-1]


def forgetting_curve(S: np.ndarray, zero_fail: ZeroFail = "zero") -> list[float | None]:
    """FR_t for t = 2..E (empty if E < 2). Where no task failed at t (0/0): 0 with
    `zero_fail="zero"`, None with `"skip"`."""
    if zero_fail not in ZERO_FAIL_READINGS:
        raise ValueError(f"forgetting_zero_fail: {zero_fail!r} is not one of {', '.join(ZERO_FAIL_READINGS)}")
    B = _check(S)
    out: list[float | None] = []
    for t in range(1, B.shape[0]):
        fails = ~B[t]
        denom = int(fails.sum())
        out.append(float((B[t - 1] & fails).sum()) / denom if denom else
                   (0.0 if zero_fail == "zero" else None))
    return out


def forgetting_mean(S: np.ndarray, zero_fail: ZeroFail = "zero") -> float | None:
    fr = [x for x in forgetting_curve(S, zero_fail) if x is not None]
    return float(np.mean(fr)) if fr else None


def zero_fail_epochs(S: np.ndarray) -> int:
    """Epochs t ≥ 2 in which no task failed (FR_t = 0/0)."""
    return int(_check(S)[1:].all(axis=1).sum())


def retrieval_by_epoch(records: Sequence[EpisodeRecord]) -> dict[str, dict[str, Any]]:
    """Per epoch (keyed by epoch as a string), from the episodes' `info.retrieval`: the
    number of retrievals, how many found an empty pool, the mean Phase-A pool size (empty
    pools count 0) and the share of non-empty pools made only of the task's own memories
    (None when every pool was empty). Empty when no record carries retrieval info."""
    per: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        got = (r.info or {}).get("retrieval")
        if isinstance(got, dict):
            per.setdefault(int(r.epoch), []).append(got)
    out: dict[str, dict[str, Any]] = {}
    for epoch in sorted(per):
        rows = per[epoch]
        pools = [int(x.get("pool", 0)) for x in rows]
        filled = [x for x, n in zip(rows, pools) if n > 0]
        out[str(epoch)] = {
            "retrievals": len(rows),
            "empty": len(rows) - len(filled),
            "mean_pool": float(np.mean(pools)),
            "own_only_share": (sum(bool(x.get("own_only")) for x in filled) / len(filled)) if filled else None,
        }
    return out


# scipy's norm.ppf(0.975), to the last bit (tests/metrics check it): the 95% intervals every run
# writes need no scipy import, which costs a run about a second
Z_975 = 1.959963984540054


def z_quantile(p: float) -> float:
    if p == 0.975:
        return Z_975
    try:
        from scipy.stats import norm
    except ImportError:  # pragma: no cover
        raise RuntimeError("normal quantiles other than 0.975 need scipy") from None
    return float(norm.ppf(p))


def wilson(k: int, n: int, level: float = 0.95) -> tuple[float, float, float]:
    """(k/n, low, high): the Wilson score interval of a proportion; NaNs for n = 0."""
    if n <= 0:
        return math.nan, math.nan, math.nan
    z = z_quantile(0.5 + level / 2)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # the interval holds p exactly (rounding can put centre - half a hair above 0 at k = 0)
    return p, min(p, max(0.0, centre - half)), max(p, min(1.0, centre + half))


Q_BINS = 10


def q_bins(values: Sequence[float], n_bins: int = Q_BINS) -> np.ndarray:
    lo = min(-1.0, min(values)) if len(values) else -1.0
    hi = max(1.0, max(values)) if len(values) else 1.0
    return np.linspace(lo, hi, n_bins + 1)


def bin_index(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin i holds edges[i] <= v < edges[i+1]; the top edge belongs to the last bin."""
    return np.clip(np.searchsorted(edges, values, side="right") - 1, 0, len(edges) - 2)


def mean_injected_q(rec: EpisodeRecord) -> float | None:
    """The mean Q (at retrieval) of the memories injected into an episode; None: none."""
    qs = [m.get("q") for m in rec.injected or [] if isinstance(m, dict) and m.get("q") is not None]
    return float(np.mean(qs)) if qs else None


def calibration(qs: Sequence[float], oks: Sequence[bool], edges: np.ndarray) -> list[dict[str, Any]]:
    """Per bin of `edges`: episodes n, successes k, rate k/n and its 95% Wilson interval."""
    idx = bin_index(np.asarray(qs, dtype=float), edges) if len(qs) else np.array([], dtype=int)
    okv = np.asarray(oks, dtype=int)
    rows = []
    for i in range(len(edges) - 1):
        sel = idx == i
        n = int(sel.sum())
        k = int(okv[sel].sum()) if n else 0
        _, lo, hi = wilson(k, n)
        rows.append({"bin": i, "q_lo": float(edges[i]), "q_hi": float(edges[i + 1]),
                     "n_episodes": n, "n_success": k, "success_rate": k / n if n else math.nan,
                     "wilson_lo": lo, "wilson_hi": hi})
    return rows


def outcome_counts(records: Sequence[EpisodeRecord], field: str = "outcome") -> dict[str, dict[str, int]]:
    """Episodes per outcome for each epoch, keyed by epoch as a string: the shared `outcome`
    (success / failure / timeout / env_error / llm_error / judge_error, the same words for
    every env), or with `field="outcome_detail"` the env's own classes (e.g. BigCodeBench's
    syntax_error); episodes without a detail are not counted there."""
    out: dict[str, dict[str, int]] = {}
    for r in records:
        value = getattr(r, field)
        if not value:
            continue
        per_epoch = out.setdefault(str(int(r.epoch)), {})
        per_epoch[value] = per_epoch.get(value, 0) + 1
    return {e: dict(sorted(c.items())) for e, c in sorted(out.items(), key=lambda kv: int(kv[0]))}


def staleness_stats(records: Sequence[EpisodeRecord]) -> dict[str, Any] | None:
    """How stale the episodes' retrievals were: per training episode, the updates committed
    between its retrieval and its own (memrl.control.runner; 0 = the paper's online loop). Mean,
    median, 90th percentile, max and the count of each value; None for records that do not
    carry it (written before it existed)."""
    values = np.array([int(r.staleness) for r in records if r.staleness is not None])
    if values.size == 0:
        return None
    counts = {str(int(v)): int(n) for v, n in zip(*np.unique(values, return_counts=True))}
    return {"mean": float(values.mean()), "median": float(np.median(values)),
            "p90": float(np.percentile(values, 90)), "max": int(values.max()), "counts": counts}


def compute_metrics(records: Sequence[EpisodeRecord], allow_missing: bool = False,
                    zero_fail: ZeroFail = "zero") -> dict[str, Any]:
    task_ids, epochs, S = success_matrix(records, allow_missing=allow_missing)
    tokens = {"prompt": 0, "completion": 0}
    parts = {"reasoning": 0, "cached_prompt": 0}  # of completion / of prompt, where reported
    for r in records:
        for k in tokens:
            tokens[k] += int((r.tokens or {}).get(k, 0))
        for k in parts:
            parts[k] += int((r.tokens or {}).get(k, 0))
    tokens.update({k: v for k, v in parts.items() if v})
    # Cache hits are a property of the execution, not of the experiment: they live in the run
    # card, so a resumed or replayed run has the same metrics as an uninterrupted one.
    return {
        "sr": sr_curve(S),
        "last": last(S),
        "csr": csr(S),
        "csr_curve": csr_curve(S),
        "forgetting": forgetting_curve(S, zero_fail),
        "forgetting_mean": forgetting_mean(S, zero_fail),
        "forgetting_zero_fail": zero_fail,
        "forgetting_zero_fail_epochs": zero_fail_epochs(S),
        "forgetting_mean_by_reading": {z: forgetting_mean(S, z) for z in ZERO_FAIL_READINGS},  # type: ignore[arg-type]
        "n_tasks": len(task_ids),
        "epochs": len(epochs),
        "n_episodes": len(records),
        "errored_episodes": sum(1 for r in records if r.errors),
        "tokens": tokens,
        "llm_calls": sum(int(r.llm_calls) for r in records),
        "missing_cells": [[t, e] for t, e in missing_cells(records)],
        "outcomes": outcome_counts(records),
        "outcome_details": outcome_counts(records, "outcome_detail"),
        "retrieval": retrieval_by_epoch(records),
        "staleness": staleness_stats(records),
        "utility": utility_readings(records),
    }


def load_run(run_dir: str | Path | RunDir) -> list[EpisodeRecord]:
    path = RunDir(run_dir).episodes
    if not path.is_file():
        raise FileNotFoundError(f"no {path.name} in {run_dir}")
    return read_episodes(path, light=True)


def transfer_metrics(records: list[EpisodeRecord]) -> dict[str, Any]:
    """Held-out evaluation after each training epoch (frozen bank). As the paper reports
    transfer: the best validation success rate across epochs."""
    _, epochs, S = success_matrix(records, allow_missing=True)
    sr = sr_curve(S)
    best = max(range(len(sr)), key=lambda i: (sr[i], -i))
    return {"sr": sr, "best": sr[best], "best_epoch": epochs[best], "n_tasks": int(S.shape[1]),
            "epochs": [int(e) for e in epochs]}


def write_metrics(run_dir: str | Path | RunDir, allow_missing: bool = False,
                  zero_fail: ZeroFail = "zero") -> dict[str, Any]:
    """Compute metrics for a run and write `metrics.json` (atomically); the run's plots are
    drawn from the same records by memrl.report.plots.write_run_plots."""
    rd = RunDir(run_dir)
    records = load_run(rd)
    metrics = compute_metrics(records, allow_missing=allow_missing, zero_fail=zero_fail)
    eval_path = rd.eval_episodes
    if eval_path.is_file() and eval_path.stat().st_size:
        metrics["transfer"] = transfer_metrics(read_episodes(eval_path, light=True))
    write_json_atomic(rd.metrics, metrics)
    return metrics
