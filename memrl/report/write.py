"""`write_report`: every table and figure of the report for a set of run directories.

The inputs are admitted first (memrl.report.inputs: a path that is no run, an unfinished run,
runs on different task lists are refused unless a flag says otherwise); the runs are grouped
with copies of another seed's episodes set aside (memrl.report.grouping); every table is
written as CSV, Markdown and LaTeX (booktabs, memrl.report.latex); `groups.md` lists each
label with its full settings, seeds and runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Sequence

from memrl.journal.runcard import identity_label
from memrl.metrics.compute import ZeroFail
from memrl.report.figures import (plot_curves, plot_forgetting, plot_param, plot_q_calibration, plot_q_hist, plot_topk,
                                  runs_of, safe_name)
from memrl.report.grouping import REFERENCE, Group, group_runs
from memrl.report.inputs import admit, check_runs
from memrl.report.latex import latex_table
from memrl.report.readings import readings_markdown, setting_warnings
from memrl.report.runs import load_run
from memrl.report.series import (PARAM_FIGURES, bank_q_by_epoch, injected_q_by_epoch, param_rows, q_calibration_rows,
                                 topk_rows)
from memrl.report.tables import (INTERVALS, comparison_cells, comparison_rows, comparisons_markdown, markdown_table,
                                 sr_epoch_cells, sr_epoch_markdown, sr_epoch_rows, staleness_cells, staleness_markdown,
                                 staleness_rows, table1_cells, table1_markdown, table1_rows, table2_cells,
                                 table2_markdown, table2_rows, write_csv)

# table stem -> its LaTeX caption
CAPTIONS = {
    "table1": "Last and CSR: mean over distinct replicates. " + INTERVALS,
    "sr_by_epoch": "Success rate per epoch: mean over distinct replicates. " + INTERVALS,
    "comparisons": "MemRL vs each method on common tasks: Δ with a 95% paired bootstrap over tasks; "
                   "McNemar over (task, replicate) pairs (b: only MemRL solved, c: only the method).",
    "table2": "Transfer: best validation success rate across epochs, mean over distinct replicates "
              "(95% t interval over them).",
    "staleness": "Retrieval staleness: updates committed between an episode's retrieval and its own update.",
}


def write_report(paths: Sequence[str | Path], out: str | Path, *, n_boot: int = 10_000,
                 seed: int = 0, reference: str = REFERENCE, zero_fail: ZeroFail = "zero",
                 include_unfinished: bool = False, mixed: bool = False,
                 warn: Callable[[str], None] = print) -> dict[str, Path]:
    """Write every table and figure into `out`; returns {name: path} of the files written.
    Raises memrl.report.inputs.Refused (a ValueError) naming every input it will not read."""
    out = Path(out)
    admitted = admit(paths, include_unfinished=include_unfinished, warn=warn)
    runs = []
    for d in admitted.runs:
        r = load_run(d)
        if r is None:  # emptied since it was found
            continue
        for w in r.warnings:
            warn(f"warning: {d}: {w}")
        runs.append(r)
    if not runs:
        raise FileNotFoundError("no run with an episode under " + ", ".join(map(str, paths)))
    check_runs(runs, include_unfinished=include_unfinished, mixed=mixed, warn=warn)
    groups = group_runs(runs, warn=warn)
    for bench, method, run_seed, text in setting_warnings(groups):
        warn(f"warning: {bench} / {method} (seed {run_seed}): {text}")
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}

    def put(name: str, path: Path) -> None:
        files[name] = path

    def table(stem: str, rows: list, markdown: Callable, cells: Callable) -> None:
        if not rows:
            return
        (out / f"{stem}.md").write_text(markdown(rows), encoding="utf-8")
        put(f"{stem}.md", out / f"{stem}.md")
        put(f"{stem}.csv", write_csv(out / f"{stem}.csv", rows))
        (out / f"{stem}.tex").write_text(latex_table(*cells(rows), caption=CAPTIONS[stem], label=stem),
                                         encoding="utf-8")
        put(f"{stem}.tex", out / f"{stem}.tex")

    (out / "readings.md").write_text(readings_markdown(groups, zero_fail), encoding="utf-8")
    put("readings.md", out / "readings.md")
    (out / "groups.md").write_text(groups_markdown(groups), encoding="utf-8")
    put("groups.md", out / "groups.md")
    table("table1", table1_rows(groups, zero_fail), table1_markdown, table1_cells)
    table("sr_by_epoch", sr_epoch_rows(groups), sr_epoch_markdown, sr_epoch_cells)
    table("comparisons", comparison_rows(groups, reference=reference, n_boot=n_boot, seed=seed),
          comparisons_markdown, comparison_cells)
    table("table2", table2_rows(groups), table2_markdown, table2_cells)
    table("staleness", staleness_rows(groups), staleness_markdown, staleness_cells)

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
               "reference": reference, "include_unfinished": include_unfinished, "mixed": mixed,
               "groups": [{"mode": g.mode, "benchmark": g.env, "method": g.label,
                           "params": dict(g.params), "seeds": g.seeds, "marks": g.marks,
                           "runs": [str(r.path) for r in g.runs],
                           "copies": [{"run": str(c.run.path), "seed": c.run.seed, "of": str(c.of.path),
                                       "reason": c.reason} for c in g.copies]} for g in groups]}
    (out / "report.json").write_text(json.dumps(summary, indent=2, default=str), encoding="utf-8")
    put("report.json", out / "report.json")
    return files


def groups_markdown(groups: Sequence[Group]) -> str:
    """Each label with its full settings, its replicates and the runs behind them."""
    rows = []
    for g in groups:
        params = ", ".join(f"{k}={v}" for k, v in g.params) or "–"
        copies = "; ".join(f"seed {c.run.seed} = seed {c.of.seed} ({c.reason})" for c in g.copies) or "–"
        runs = "<br>".join(str(r.path) for r in g.runs)
        rows.append([g.mode, g.env, g.label, params, " ".join(map(str, g.seeds)), copies, runs])
    return ("# Groups\n\nEvery label of the tables and figures, with the settings that tell it apart, "
            "its distinct replicates (seeds), the seeds whose runs repeat another's episodes "
            "(counted once) and its run directories.\n\n"
            + markdown_table(["mode", "benchmark", "label", "settings", "replicates (seeds)", "copies",
                              "runs"], rows))
