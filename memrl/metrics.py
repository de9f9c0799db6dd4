"""Run metrics (docs/design.md §5), computed from a run's episode records alone.

For N tasks over epochs t = 1..E the success matrix is s[t, i] ∈ {0, 1}:

- SR_t  = mean_i s[t, i];  Last = SR_E.
- CSR_t = fraction of tasks solved at least once in epochs 1..t;  CSR = CSR_E.
- FR_t  = #(s[t-1, i] = 1 and s[t, i] = 0) / #(s[t, i] = 0), for t ≥ 2.
- staleness: the distribution of the episodes' retrieval staleness (updates committed
  between an episode's retrieval and its own; `staleness_stats`).
  Convention: FR_t = 0 when no task failed at epoch t (denominator 0) -- nothing
  can have been forgotten then. `forgetting_mean` is the mean of FR_2..FR_E and
  is None (JSON null) when E < 2.

Several records for one (task, epoch) -- e.g. Pass@k attempts -- count as a
success if any of them succeeded.

CLI: ``memrl metrics <run_dir> [--no-plots] [--allow-missing]`` (also
``python -m memrl.metrics``; see memrl/cli/metrics.py).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from memrl.records import EpisodeRecord, read_episodes, write_json_atomic
from memrl.rundir import RunDir


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


def forgetting_curve(S: np.ndarray) -> list[float]:
    """FR_t for t = 2..E (empty if E < 2); 0 where no task failed at t."""
    B = _check(S)
    out: list[float] = []
    for t in range(1, B.shape[0]):
        fails = ~B[t]
        denom = int(fails.sum())
        out.append(float((B[t - 1] & fails).sum()) / denom if denom else 0.0)
    return out


def forgetting_mean(S: np.ndarray) -> float | None:
    fr = forgetting_curve(S)
    return float(np.mean(fr)) if fr else None


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
    between its retrieval and its own (memrl.runner; 0 = the paper's online loop). Mean,
    median, 90th percentile, max and the count of each value; None for records that do not
    carry it (written before it existed)."""
    values = np.array([int(r.staleness) for r in records if r.staleness is not None])
    if values.size == 0:
        return None
    counts = {str(int(v)): int(n) for v, n in zip(*np.unique(values, return_counts=True))}
    return {"mean": float(values.mean()), "median": float(np.median(values)),
            "p90": float(np.percentile(values, 90)), "max": int(values.max()), "counts": counts}


def compute_metrics(records: Sequence[EpisodeRecord], allow_missing: bool = False) -> dict[str, Any]:
    task_ids, epochs, S = success_matrix(records, allow_missing=allow_missing)
    tokens = {"prompt": 0, "completion": 0}
    for r in records:
        for k in tokens:
            tokens[k] += int((r.tokens or {}).get(k, 0))
    # Cache hits are a property of the execution, not of the experiment: they live in the run
    # card, so a resumed or replayed run has the same metrics as an uninterrupted one.
    return {
        "sr": sr_curve(S),
        "last": last(S),
        "csr": csr(S),
        "csr_curve": csr_curve(S),
        "forgetting": forgetting_curve(S),
        "forgetting_mean": forgetting_mean(S),
        "n_tasks": len(task_ids),
        "epochs": len(epochs),
        "n_episodes": len(records),
        "errored_episodes": sum(1 for r in records if r.errors),
        "tokens": tokens,
        "llm_calls": sum(int(r.llm_calls) for r in records),
        "missing_cells": [[t, e] for t, e in missing_cells(records)],
        "outcomes": outcome_counts(records),
        "outcome_details": outcome_counts(records, "outcome_detail"),
        "staleness": staleness_stats(records),
    }


def load_run(run_dir: str | Path | RunDir) -> list[EpisodeRecord]:
    path = RunDir(run_dir).episodes
    if not path.is_file():
        raise FileNotFoundError(f"no {path.name} in {run_dir}")
    return read_episodes(path)


def transfer_metrics(records: list[EpisodeRecord]) -> dict[str, Any]:
    """Held-out evaluation after each training epoch (frozen bank). As the paper reports
    transfer: the best validation success rate across epochs."""
    _, epochs, S = success_matrix(records, allow_missing=True)
    sr = sr_curve(S)
    best = max(range(len(sr)), key=lambda i: (sr[i], -i))
    return {"sr": sr, "best": sr[best], "best_epoch": epochs[best], "n_tasks": int(S.shape[1]),
            "epochs": [int(e) for e in epochs]}


def write_metrics(run_dir: str | Path | RunDir, plots: bool = True,
                  allow_missing: bool = False) -> dict[str, Any]:
    """Compute metrics for a run, write `metrics.json` (atomically) and, optionally, plots."""
    rd = RunDir(run_dir)
    metrics = compute_metrics(load_run(rd), allow_missing=allow_missing)
    eval_path = rd.eval_episodes
    if eval_path.is_file() and eval_path.stat().st_size:
        metrics["transfer"] = transfer_metrics(read_episodes(eval_path))
    write_json_atomic(rd.metrics, metrics)
    if plots:
        from memrl.plots import plot_curves

        plot_curves(metrics, rd.plots)
    return metrics


if __name__ == "__main__":  # the command line lives in memrl/cli/metrics.py
    from memrl.cli.metrics import main

    sys.exit(main())
