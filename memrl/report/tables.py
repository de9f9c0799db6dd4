"""The report's tables: Table 1 (Last, CSR, forgetting), MemRL vs each method, Table 2
(transfer), as rows (CSV) and Markdown. The statistics are memrl.report.stats.

Transfer (Table 2): per run, the success rate per epoch of the held-out evaluation that
follows each training epoch (the run's eval records, as `memrl.metrics.compute.transfer_metrics`
reads them); its best over epochs, then mean and t-interval over seeds.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from memrl.metrics.compute import ZeroFail, csr_curve, forgetting_mean, sr_curve
from memrl.report.grouping import REFERENCE, Group
from memrl.report.runs import Run, complete_matrix
from memrl.report.stats import EXACT_BELOW, mcnemar, paired_bootstrap, t_interval


def _last(r: Run) -> float:
    return sr_curve(r.S)[-1]


def _csr(r: Run) -> float:
    return csr_curve(r.S)[-1]


def _fr_mean(r: Run, zero_fail: ZeroFail = "zero") -> float | None:
    return forgetting_mean(r.S, zero_fail)


def table1_rows(groups: Sequence[Group], zero_fail: ZeroFail = "zero") -> list[dict[str, Any]]:
    rows = []
    for g in groups:
        if g.mode == "transfer":
            continue
        last_m, last_lo, last_hi = t_interval(g.per_seed(_last))
        csr_m, csr_lo, csr_hi = t_interval(g.per_seed(_csr))
        fr_m, fr_lo, fr_hi = t_interval(g.per_seed(lambda r: _fr_mean(r, zero_fail)))
        rows.append({
            "benchmark": g.env, "method": g.label, "memory": g.memory,
            "params": json.dumps(dict(g.params), sort_keys=True) if g.params else "",
            "n_tasks": g.n_tasks(), "n_seeds": len(g.runs), "seeds": " ".join(map(str, g.seeds)),
            "epochs": min(len(r.epochs) for r in g.runs),
            "last_mean": last_m, "last_lo": last_lo, "last_hi": last_hi,
            "csr_mean": csr_m, "csr_lo": csr_lo, "csr_hi": csr_hi,
            "forgetting_mean": fr_m, "forgetting_lo": fr_lo, "forgetting_hi": fr_hi,
        })
    return rows


def _final_by_seed(g: Group, tasks: Sequence[str]) -> dict[int, np.ndarray]:
    out = {}
    for r in g.runs:
        final = r.final()
        out[r.seed] = np.array([final[t] for t in tasks], dtype=float)
    return out


def compare(ref: Group, other: Group, *, n_boot: int = 10_000, seed: int = 0) -> dict[str, Any] | None:
    """MemRL (ref) vs another method on their common tasks; None if they share no task."""
    tasks = sorted(set.intersection(*(set(r.task_ids) for r in ref.runs + other.runs)))
    if not tasks:
        return None
    ref_f, oth_f = _final_by_seed(ref, tasks), _final_by_seed(other, tasks)
    ref_mean = np.mean(list(ref_f.values()), axis=0)
    oth_mean = np.mean(list(oth_f.values()), axis=0)
    est, lo, hi = paired_bootstrap(ref_mean, oth_mean, n_boot=n_boot, seed=seed)
    common = sorted(set(ref_f) & set(oth_f))
    if common:
        pairs, pairing = [(s, s) for s in common], "same seed"
    else:
        pairs, pairing = list(zip(sorted(ref_f), sorted(oth_f))), "seeds in sorted order"
    b = c = n11 = n00 = 0
    for rs, os_ in pairs:
        x, y = ref_f[rs].astype(bool), oth_f[os_].astype(bool)
        b += int((x & ~y).sum())
        c += int((~x & y).sum())
        n11 += int((x & y).sum())
        n00 += int((~x & ~y).sum())
    test = mcnemar(b, c)
    return {
        "benchmark": ref.env, "reference": ref.label, "method": other.label,
        "n_tasks": len(tasks), "n_seeds_ref": len(ref.runs), "n_seeds_method": len(other.runs),
        "last_ref": float(ref_mean.mean()), "last_method": float(oth_mean.mean()),
        "delta": est, "delta_lo": lo, "delta_hi": hi, "n_boot": n_boot, "boot_seed": seed,
        "pairs": len(pairs) * len(tasks), "pairing": pairing,
        "both_solved": n11, "ref_only": b, "method_only": c, "neither": n00,
        "mcnemar_test": test["test"], "mcnemar_statistic": test["statistic"], "mcnemar_p": test["p"],
    }


def comparison_rows(groups: Sequence[Group], *, reference: str = REFERENCE, n_boot: int = 10_000,
                    seed: int = 0) -> list[dict[str, Any]]:
    rows = []
    train = [g for g in groups if g.mode != "transfer"]
    for ref in (g for g in train if g.memory == reference):
        for other in (g for g in train if g.env == ref.env and g.memory != reference):
            row = compare(ref, other, n_boot=n_boot, seed=seed)
            if row is not None:
                rows.append(row)
    return rows


def eval_matrix(run: Run) -> np.ndarray | None:
    """Success matrix of a transfer run's held-out evaluation (its eval records), or None."""
    recs = run.eval_records
    return complete_matrix(recs)[2] if recs else None


def eval_sr_curve(run: Run) -> list[float]:
    """SR per epoch of a transfer run's held-out evaluation ([] when there is none)."""
    S = eval_matrix(run)
    return sr_curve(S) if S is not None else []


def table2_rows(groups: Sequence[Group]) -> list[dict[str, Any]]:
    rows = []
    for g in groups:
        if g.mode != "transfer":
            continue
        mats = [S for S in (eval_matrix(r) for r in g.runs) if S is not None]
        if not mats:
            continue
        curves = [sr_curve(S) for S in mats]
        ns = sorted({int(S.shape[1]) for S in mats})
        best_m, best_lo, best_hi = t_interval([max(c) for c in curves])
        rows.append({
            "benchmark": g.env, "method": g.label, "memory": g.memory,
            "n_tasks": str(ns[0]) if len(ns) == 1 else f"{ns[0]}-{ns[-1]}",
            "n_seeds": len(curves), "seeds": " ".join(map(str, g.seeds)),
            "best_epoch_mean": float(np.mean([int(np.argmax(c)) + 1 for c in curves])),  # first best
            "best_sr_mean": best_m, "best_sr_lo": best_lo, "best_sr_hi": best_hi,
        })
    return rows


def fmt_ci(m: float, lo: float, hi: float, digits: int = 3) -> str:
    if m is None or (isinstance(m, float) and math.isnan(m)):
        return "–"
    if math.isnan(lo):
        return f"{m:.{digits}f} [–]"
    return f"{m:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(x: Any) -> str:
        return str(x).replace("|", "\\|")
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(cell(x) for x in row) + " |" for row in rows]
    return "\n".join(out) + "\n"


def table1_markdown(rows: Sequence[dict[str, Any]]) -> str:
    head = ("# Table 1: Last and CSR\n\n"
            "Mean over seeds with a 95% Student-t interval across seeds ([–]: one seed). "
            "Last = success rate of the final epoch; CSR = fraction of tasks solved at least once; "
            "forgetting = mean forgetting rate over epochs 2..E (how an epoch with no failure "
            "is read: readings.md).\n\n")
    body = markdown_table(
        ["benchmark", "method", "n tasks", "seeds", "epochs", "Last", "CSR", "forgetting"],
        [[r["benchmark"], r["method"], r["n_tasks"], r["n_seeds"], r["epochs"],
          fmt_ci(r["last_mean"], r["last_lo"], r["last_hi"]),
          fmt_ci(r["csr_mean"], r["csr_lo"], r["csr_hi"]),
          fmt_ci(r["forgetting_mean"], r["forgetting_lo"], r["forgetting_hi"])] for r in rows])
    return head + body


def comparisons_markdown(rows: Sequence[dict[str, Any]]) -> str:
    head = ("# MemRL vs each method: final-epoch success on common tasks\n\n"
            "Δ = MemRL − method (mean over tasks of each task's seed-averaged final success), "
            "95% paired bootstrap over tasks. McNemar over (task, seed) pairs: "
            "b = only MemRL solved, c = only the method solved; exact binomial when b + c < "
            f"{EXACT_BELOW}, else χ² with continuity correction.\n\n")
    body = markdown_table(
        ["benchmark", "reference", "method", "n tasks", "Last ref", "Last method", "Δ [95% CI]",
         "b", "c", "test", "p"],
        [[r["benchmark"], r["reference"], r["method"], r["n_tasks"], f"{r['last_ref']:.3f}",
          f"{r['last_method']:.3f}", fmt_ci(r["delta"], r["delta_lo"], r["delta_hi"]),
          r["ref_only"], r["method_only"], r["mcnemar_test"], f"{r['mcnemar_p']:.4g}"] for r in rows])
    return head + body


def table2_markdown(rows: Sequence[dict[str, Any]]) -> str:
    head = ("# Table 2: transfer (frozen bank, held-out split)\n\n"
            "Best validation success rate across epochs: mean over seeds with a 95% "
            "Student-t interval across seeds.\n\n")
    body = markdown_table(
        ["benchmark", "method", "n tasks", "seeds", "best SR", "best epoch (mean)"],
        [[r["benchmark"], r["method"], r["n_tasks"], r["n_seeds"],
          fmt_ci(r["best_sr_mean"], r["best_sr_lo"], r["best_sr_hi"]),
          f"{r['best_epoch_mean']:.1f}"] for r in rows])
    return head + body


def staleness_rows(groups: Sequence[Group]) -> list[dict[str, Any]]:
    """Per training group: its schedule and how stale its episodes' retrievals were (updates
    committed between an episode's retrieval and its own; memrl.metrics.compute.staleness_stats over
    the records of all its seeds). Groups whose records carry no staleness are left out."""
    from memrl.metrics.compute import staleness_stats

    rows = []
    for g in groups:
        if g.mode == "transfer":
            continue
        st = staleness_stats([rec for r in g.runs for rec in r.records])
        if st is None:
            continue
        runner = g.runs[0].config.get("runner") or {}
        rows.append({"benchmark": g.env, "method": g.label, "schedule": runner.get("schedule", "batch"),
                     "batch_size": runner.get("batch_size"), "max_in_flight": runner.get("max_in_flight"),
                     "mean": st["mean"], "median": st["median"], "p90": st["p90"], "max": st["max"]})
    return rows


def staleness_markdown(rows: Sequence[dict[str, Any]]) -> str:
    head = ("# Retrieval staleness\n\n"
            "Updates committed between an episode's retrieval and its own update (0 for every "
            "episode is the paper's online loop; batch: an episode's place in its batch; async: "
            "timing).\n\n")
    body = markdown_table(
        ["benchmark", "method", "schedule", "width", "mean", "median", "p90", "max"],
        [[r["benchmark"], r["method"], r["schedule"],
          r["batch_size"] if r["schedule"] == "batch" else r["max_in_flight"],
          f"{r['mean']:.2f}", f"{r['median']:g}", f"{r['p90']:g}", r["max"]] for r in rows])
    return head + body


def write_csv(path: Path, rows: Sequence[dict[str, Any]], fields: Sequence[str] | None = None) -> Path:
    fields = list(fields or (rows[0].keys() if rows else []))
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow({k: _csv_value(r.get(k)) for k in fields})
    return path


def _csv_value(v: Any) -> Any:
    if isinstance(v, float) and math.isnan(v):
        return ""
    return v
