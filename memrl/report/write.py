"""`write_report`: every table and figure of the report for a set of run directories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Sequence

from memrl.core.rundir import RunDir
from memrl.journal.runcard import identity_label
from memrl.metrics.compute import ZeroFail
from memrl.report.figures import (plot_curves, plot_forgetting, plot_param, plot_q_calibration, plot_q_hist, plot_topk,
                                  runs_of, safe_name)
from memrl.report.grouping import REFERENCE, group_runs
from memrl.report.readings import readings_markdown
from memrl.report.runs import find_runs, load_run
from memrl.report.series import (PARAM_FIGURES, bank_q_by_epoch, injected_q_by_epoch, param_rows, q_calibration_rows,
                                 topk_rows)
from memrl.report.tables import (comparison_rows, comparisons_markdown, staleness_markdown, staleness_rows,
                                 table1_markdown, table1_rows, table2_markdown, table2_rows, write_csv)


def write_report(paths: Sequence[str | Path], out: str | Path, *, n_boot: int = 10_000,
                 seed: int = 0, reference: str = REFERENCE, zero_fail: ZeroFail = "zero",
                 warn: Callable[[str], None] = print) -> dict[str, Path]:
    """Write every table and figure into `out`; returns {name: path} of the files written."""
    out = Path(out)
    run_dirs = find_runs(paths)
    if not run_dirs:
        raise FileNotFoundError(f"no run directory ({RunDir.CARD} + {RunDir.EPISODES}) under "
                                + ", ".join(map(str, paths)))
    runs = []
    for d in run_dirs:
        r = load_run(d)
        if r is None:
            warn(f"warning: {d}: no episodes yet; skipped")
            continue
        for w in r.warnings:
            warn(f"warning: {d}: {w}")
        runs.append(r)
    if not runs:
        raise FileNotFoundError("run directories found, but none has an episode yet")
    groups = group_runs(runs, warn=warn)
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}

    def put(name: str, path: Path) -> None:
        files[name] = path

    t1 = table1_rows(groups, zero_fail)
    (out / "readings.md").write_text(readings_markdown(groups, zero_fail), encoding="utf-8")
    put("readings.md", out / "readings.md")
    if t1:
        (out / "table1.md").write_text(table1_markdown(t1), encoding="utf-8")
        put("table1.md", out / "table1.md")
        put("table1.csv", write_csv(out / "table1.csv", t1))
    comp = comparison_rows(groups, reference=reference, n_boot=n_boot, seed=seed)
    if comp:
        (out / "comparisons.md").write_text(comparisons_markdown(comp), encoding="utf-8")
        put("comparisons.md", out / "comparisons.md")
        put("comparisons.csv", write_csv(out / "comparisons.csv", comp))
    t2 = table2_rows(groups)
    if t2:
        (out / "table2.md").write_text(table2_markdown(t2), encoding="utf-8")
        put("table2.md", out / "table2.md")
        put("table2.csv", write_csv(out / "table2.csv", t2))
    st = staleness_rows(groups)
    if st:
        (out / "staleness.md").write_text(staleness_markdown(st), encoding="utf-8")
        put("staleness.md", out / "staleness.md")
        put("staleness.csv", write_csv(out / "staleness.csv", st))

    train = [g for g in groups if g.mode != "transfer"]
    for env in sorted({g.env for g in train}):
        gs = [g for g in train if g.env == env]
        name = f"curves_{safe_name(env)}.png"
        put(name, plot_curves(gs, env, out / name))
        name = f"forgetting_{safe_name(env)}.png"
        put(name, plot_forgetting(gs, env, out / name, zero_fail))

    for key, stem in PARAM_FIGURES.items():
        rows = param_rows(groups, key)
        if rows:
            put(f"{stem}.csv", write_csv(out / f"{stem}.csv", rows))
            put(f"{stem}.png", plot_param(rows, key, out / f"{stem}.png"))
    rows = topk_rows(groups)
    if len({(r["k1"], r["k2"]) for r in rows}) > 1:
        put("topk_grid.csv", write_csv(out / "topk_grid.csv", rows))
        put("topk_grid.png", plot_topk(rows, out / "topk_grid.png"))

    qrows = q_calibration_rows(groups, reference=reference)
    if any(r["bin"] != "none" and r["n_episodes"] for r in qrows):
        put("q_calibration.csv", write_csv(out / "q_calibration.csv", qrows))
        mem = [g for g in train if g.memory == reference]
        put("q_calibration.png", plot_q_calibration(qrows, out / "q_calibration.png",
                                                    subtitle=runs_of(mem)))
    used: set[str] = set()
    for g in train:
        if g.memory != reference:
            continue
        for r in g.runs:
            if not injected_q_by_epoch(r) and not bank_q_by_epoch(r):
                continue
            stem = safe_name(f"{g.env}_{g.label}_seed{r.seed}")
            base, i = stem, 1
            while stem in used:
                i += 1
                stem = f"{base}_{i}"
            used.add(stem)
            name = f"q_hist_{stem}.png"
            who = identity_label({**r.identity, "method": g.label})
            put(name, plot_q_hist(r, f"{who}: Q per epoch", out / name))

    summary = {"runs": [str(r.path) for r in runs], "n_boot": n_boot, "boot_seed": seed,
               "reference": reference,
               "groups": [{"mode": g.mode, "benchmark": g.env, "method": g.label,
                           "params": dict(g.params), "seeds": g.seeds,
                           "runs": [str(r.path) for r in g.runs]} for g in groups]}
    (out / "report.json").write_text(json.dumps(summary, indent=2, default=str), encoding="utf-8")
    put("report.json", out / "report.json")
    return files
