"""The report's tables: Table 1 (Last, CSR, forgetting), SR per epoch, MemRL vs each method,
Table 2 (transfer), as rows (CSV), Markdown and LaTeX (memrl.report.latex). The statistics are
memrl.report.stats; which interval each number carries is memrl.report.intervals (t over
distinct replicates, Wilson over tasks for one replicate), named in each row (`interval`).

Replicates: a group's `runs` are its distinct replicates; copies of another seed's episodes
(memrl.report.replicates) are named in the `copies` column and counted nowhere.

Comparisons pair MemRL's groups with another method's groups only when they agree on every
condition (the params outside `memory.*`: model, embedder, env settings, task list); a pair
that does not is not compared.

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
from memrl.report.intervals import Estimate, over_replicates, proportion, single
from memrl.report.stats import EXACT_BELOW, mcnemar, paired_bootstrap


def _last(r: Run) -> float:
    return sr_curve(r.S)[-1]


def _csr(r: Run) -> float:
    return csr_curve(r.S)[-1]


def _fr_mean(r: Run, zero_fail: ZeroFail = "zero") -> float | None:
    return forgetting_mean(r.S, zero_fail)


def group_estimate(g: Group, what: str, zero_fail: ZeroFail = "zero") -> Estimate:
    """A group's Last, CSR or mean forgetting (`what`), with the interval of
    memrl.report.intervals: t over its distinct replicates; one replicate: Wilson over its
    tasks for Last and CSR, none for the forgetting mean."""
    if what == "last":
        fn = _last
    elif what == "csr":
        fn = _csr
    elif what == "forgetting":
        def fn(r: Run) -> float | None:
            return _fr_mean(r, zero_fail)
    else:
        raise ValueError(f"unknown number {what!r}")
    if len(g.runs) > 1:
        return over_replicates(g.per_seed(fn))
    (r,) = g.runs
    B = np.asarray(r.S).astype(bool)
    if what == "last":
        return proportion(int(B[-1].sum()), int(B.shape[1]))
    if what == "csr":
        return proportion(int(B.any(axis=0).sum()), int(B.shape[1]))
    return single(fn(r))


def table1_rows(groups: Sequence[Group], zero_fail: ZeroFail = "zero") -> list[dict[str, Any]]:
    rows = []
    for g in groups:
        if g.mode == "transfer":
            continue
        last, csr = group_estimate(g, "last"), group_estimate(g, "csr")
        fr = group_estimate(g, "forgetting", zero_fail)
        rows.append({
            "benchmark": g.env, "method": g.label, "memory": g.memory,
            "params": json.dumps(dict(g.params), sort_keys=True, default=str) if g.params else "",
            "n_tasks": g.n_tasks(), "n_seeds": len(g.runs), "seeds": " ".join(map(str, g.seeds)),
            "copies": g.copies_text(), "epochs": min(len(r.epochs) for r in g.runs),
            "last_mean": last.mean, "last_lo": last.lo, "last_hi": last.hi,
            "csr_mean": csr.mean, "csr_lo": csr.lo, "csr_hi": csr.hi,
            "forgetting_mean": fr.mean, "forgetting_lo": fr.lo, "forgetting_hi": fr.hi,
            "interval": last.how, "marks": " ".join(g.marks),
        })
    return rows


def sr_epoch_rows(groups: Sequence[Group]) -> list[dict[str, Any]]:
    """SR per epoch of each training group (epochs cut to its shortest run), each with the
    interval of memrl.report.intervals (t over replicates, or Wilson over one run's tasks)."""
    rows = []
    for g in groups:
        if g.mode == "transfer":
            continue
        n = min(len(r.epochs) for r in g.runs)
        for e in range(n):
            if len(g.runs) > 1:
                est = over_replicates([sr_curve(r.S)[e] for r in g.runs])
            else:
                row = np.asarray(g.runs[0].S)[e]
                est = proportion(int(row.sum()), int(row.size))
            rows.append({"benchmark": g.env, "method": g.label, "epoch": e + 1,
                         "n_tasks": g.n_tasks(), "n_seeds": len(g.runs),
                         "sr_mean": est.mean, "sr_lo": est.lo, "sr_hi": est.hi, "interval": est.how})
    return rows


def _final_by_seed(g: Group, tasks: Sequence[str]) -> dict[int, np.ndarray]:
    out = {}
    for r in g.runs:
        final = r.final()
        out[r.seed] = np.array([final[t] for t in tasks], dtype=float)
    return out


def compare(ref: Group, other: Group, *, n_boot: int = 10_000, seed: int = 0) -> dict[str, Any] | None:
    """MemRL (ref) vs another method on their common tasks, over each group's distinct
    replicates; None if they share no task or disagree on a condition (`Group.conditions`)."""
    if dict(ref.conditions) != dict(other.conditions):
        return None
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
        "copies": "; ".join(f"{g.label}: {g.copies_text()}" for g in (ref, other) if g.copies),
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
        best = over_replicates([max(c) for c in curves])  # one replicate: a max, no interval
        rows.append({
            "benchmark": g.env, "method": g.label, "memory": g.memory,
            "n_tasks": str(ns[0]) if len(ns) == 1 else f"{ns[0]}-{ns[-1]}",
            "n_seeds": len(curves), "seeds": " ".join(map(str, g.seeds)),
            "best_epoch_mean": float(np.mean([int(np.argmax(c)) + 1 for c in curves])),  # first best
            "best_sr_mean": best.mean, "best_sr_lo": best.lo, "best_sr_hi": best.hi, "interval": best.how,
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


INTERVALS = ("95% intervals: Student-t over a group's distinct replicates (seeds whose runs are not "
             "copies of another's); with one replicate, Last and CSR (proportions of its tasks) carry "
             "a Wilson interval over its tasks and the mean forgetting none ([–]). Each row names "
             "its interval and n.")


def _replicates_note(rows: Sequence[dict[str, Any]]) -> str:
    copies = [f"{r['method']}: {r['copies']}" for r in rows if r.get("copies")]
    if not copies:
        return ""
    return ("\nNot independent replicates (a seed whose run repeats another seed's episodes: the same "
            "model requests or identical episodes; counted once): " + "; ".join(copies) + ".\n")


def _marks_note(rows: Sequence[dict[str, Any]]) -> str:
    marked = sorted({r["method"] for r in rows if r.get("marks")})
    if not marked:
        return ""
    return ("\n[unfinished]: holds a run that did not finish (its status or fewer epochs than planned), "
            "reported under --include-unfinished with what it completed: " + ", ".join(marked) + ".\n")


def table1_markdown(rows: Sequence[dict[str, Any]]) -> str:
    head = ("# Table 1: Last and CSR\n\n"
            "Mean over distinct replicates. Last = success rate of the final epoch; CSR = fraction of "
            "tasks solved at least once; forgetting = mean forgetting rate over epochs 2..E (how an "
            f"epoch with no failure is read: readings.md). {INTERVALS}\n\n")
    return head + markdown_table(*table1_cells(rows)) + _replicates_note(rows) + _marks_note(rows)


def table1_cells(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    return (["benchmark", "method", "n tasks", "replicates", "epochs", "Last", "CSR", "forgetting", "interval"],
            [[r["benchmark"], r["method"], r["n_tasks"], _replicates(r), r["epochs"],
              fmt_ci(r["last_mean"], r["last_lo"], r["last_hi"]),
              fmt_ci(r["csr_mean"], r["csr_lo"], r["csr_hi"]),
              fmt_ci(r["forgetting_mean"], r["forgetting_lo"], r["forgetting_hi"]), r["interval"] or "–"]
             for r in rows])


def _replicates(r: dict[str, Any]) -> str:
    return f"{r['n_seeds']} ({r['copies']})" if r.get("copies") else str(r["n_seeds"])


def sr_epoch_markdown(rows: Sequence[dict[str, Any]]) -> str:
    head = ("# SR per epoch\n\n"
            f"Success rate of each epoch: mean over distinct replicates. {INTERVALS}\n\n")
    return head + markdown_table(*sr_epoch_cells(rows))


def sr_epoch_cells(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    return (["benchmark", "method", "epoch", "n tasks", "replicates", "SR", "interval"],
            [[r["benchmark"], r["method"], r["epoch"], r["n_tasks"], r["n_seeds"],
              fmt_ci(r["sr_mean"], r["sr_lo"], r["sr_hi"]), r["interval"] or "–"] for r in rows])


def comparisons_markdown(rows: Sequence[dict[str, Any]]) -> str:
    head = ("# MemRL vs each method: final-epoch success on common tasks\n\n"
            "Δ = MemRL − method (mean over tasks of each task's final success averaged over the "
            "group's distinct replicates), 95% paired bootstrap over tasks. McNemar over (task, "
            "replicate) pairs: b = only MemRL solved, c = only the method solved; exact binomial "
            f"when b + c < {EXACT_BELOW}, else χ² with continuity correction. Only groups that agree on "
            "every condition (model, embedder, env settings, task list) are compared.\n\n")
    body = markdown_table(*comparison_cells(rows))
    copies = [r["copies"] for r in rows if r.get("copies")]
    note = ("\nCopies left out of the pairs (not independent replicates): " + "; ".join(dict.fromkeys(copies))
            + ".\n") if copies else ""
    return head + body + note


def comparison_cells(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    return (["benchmark", "reference", "method", "n tasks", "replicates", "Last ref", "Last method",
             "Δ [95% CI]", "b", "c", "test", "p"],
            [[r["benchmark"], r["reference"], r["method"], r["n_tasks"],
              f"{r['n_seeds_ref']} / {r['n_seeds_method']}", f"{r['last_ref']:.3f}",
              f"{r['last_method']:.3f}", fmt_ci(r["delta"], r["delta_lo"], r["delta_hi"]),
              r["ref_only"], r["method_only"], r["mcnemar_test"], f"{r['mcnemar_p']:.4g}"] for r in rows])


def table2_markdown(rows: Sequence[dict[str, Any]]) -> str:
    head = ("# Table 2: transfer (frozen bank, held-out split)\n\n"
            "Best validation success rate across epochs: mean over distinct replicates with a 95% "
            "Student-t interval over them (one replicate: a best over epochs, no interval).\n\n")
    return head + markdown_table(*table2_cells(rows))


def table2_cells(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    return (["benchmark", "method", "n tasks", "replicates", "best SR", "best epoch (mean)"],
            [[r["benchmark"], r["method"], r["n_tasks"], r["n_seeds"],
              fmt_ci(r["best_sr_mean"], r["best_sr_lo"], r["best_sr_hi"]),
              f"{r['best_epoch_mean']:.1f}"] for r in rows])


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
    return head + markdown_table(*staleness_cells(rows))


def staleness_cells(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    return (["benchmark", "method", "schedule", "width", "mean", "median", "p90", "max"],
            [[r["benchmark"], r["method"], r["schedule"],
              r["batch_size"] if r["schedule"] == "batch" else r["max_in_flight"],
              f"{r['mean']:.2f}", f"{r['median']:g}", f"{r['p90']:g}", r["max"]] for r in rows])


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
