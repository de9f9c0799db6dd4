"""The report's readings (readings.md): how to read two of its numbers.

- Forgetting: an epoch in which no task failed has FR = 0/0. The tables use one reading
  (`zero`: counted as 0, or `skip`: left out; `memrl.metrics.compute`); here, per group, the count of
  such epochs over its seeds and the mean forgetting rate under both readings (mean over seeds).
- Retrieval, per epoch (the episodes' `info.retrieval`, all seeds of a group pooled,
  `memrl.metrics.compute.retrieval_by_epoch`): the mean Phase-A pool size over all retrievals (an empty
  pool counts 0) and the share of non-empty pools made only of the task's own memories. When
  tasks repeat, a task's own memories tie at similarity 1; a share near 1 is a saturated pool.
- Warnings (first, when there are any): settings that made a method behave as another, per
  run (memrl.metrics.degenerate: a gate nothing passes, epochs whose retrievals were empty,
  λ with no pool to rank, k larger than the bank, ...), and settings of one method whose runs
  played identical episodes (the setting changed nothing: `identical_settings`).
- Utility (`memrl.metrics.utility`): per group, all seeds pooled, whether the Q a memory had
  before an episode predicts that episode's outcome (point-biserial r and AUC, 95% bootstrap
  intervals over episodes); the retrospective correlation (Q at a memory's last injection
  against the success rate of the episodes it was injected into), labelled circular; and per
  epoch the share of injected memories written by a successful episode.
"""

from __future__ import annotations

import math
from typing import Sequence

from memrl.metrics.compute import ZERO_FAIL_READINGS, ZeroFail, forgetting_mean, retrieval_by_epoch, zero_fail_epochs
from memrl.metrics.degenerate import run_warnings
from memrl.metrics.utility import injected_from_success, q_prospective, q_success
from memrl.report.grouping import Group
from memrl.report.replicates import same_episodes
from memrl.report.stats import t_interval
from memrl.report.tables import markdown_table


def _num(x: float | None, digits: int = 3) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _with_ci(value: float | None, ci: list[float] | None) -> str:
    return _num(value) + (f" [{_num(ci[0])}, {_num(ci[1])}]" if ci else "")


def setting_warnings(groups: Sequence[Group]) -> list[list[str]]:
    """[benchmark, method, seed, warning] for every warning of every run of the groups
    (memrl.metrics.degenerate.run_warnings), then `identical_settings`."""
    rows = []
    for g in groups:
        for r in g.runs:
            for w in run_warnings({**r.card, "config": r.config}, r.records):
                rows.append([g.env, g.label, str(r.seed), w])
    return rows + identical_settings(groups)


def identical_settings(groups: Sequence[Group]) -> list[list[str]]:
    """Groups of one method that differ in a setting yet played identical episodes (their
    seed-0-most runs compared, memrl.report.replicates): the setting changed nothing."""
    rows = []
    fam: dict[tuple[str, str, str], list[Group]] = {}
    for g in groups:
        fam.setdefault((g.mode, g.env, g.memory), []).append(g)
    for gs in fam.values():
        for i, a in enumerate(gs):
            for b in gs[i + 1:]:
                ra, rb = a.runs[0], b.runs[0]
                why = ra.episodes and rb.episodes and same_episodes(ra.episodes, rb.episodes)
                if why:
                    rows.append([a.env, f"{a.label} / {b.label}", f"{ra.seed} / {rb.seed}",
                                 f"{a.label} and {b.label} played identical episodes ({why}): the setting "
                                 "that tells them apart changed nothing in these runs"])
    return rows


def readings_markdown(groups: Sequence[Group], zero_fail: ZeroFail = "zero") -> str:
    forgetting, retrieval, utility, retro, shares = [], [], [], [], []
    for g in groups:
        if g.mode == "transfer":
            continue
        means = {z: t_interval(g.per_seed(lambda r, z=z: forgetting_mean(r.S, z)))[0]
                 for z in ZERO_FAIL_READINGS}
        forgetting.append([g.env, g.label, sum(zero_fail_epochs(r.S) for r in g.runs),
                           sum(max(len(r.epochs) - 1, 0) for r in g.runs),
                           _num(means["zero"]), _num(means["skip"])])
        for epoch, x in retrieval_by_epoch([rec for r in g.runs for rec in r.records]).items():
            retrieval.append([g.env, g.label, epoch, x["retrievals"], x["empty"], _num(x["mean_pool"], 2),
                              _num(x["own_only_share"])])
        pooled = [rec for r in g.runs for rec in r.records]
        qp = q_prospective(pooled)
        if qp["injections"]:
            utility.append([g.env, g.label, qp["episodes"], qp["injections"], qp["distinct_q"],
                            _with_ci(qp["point_biserial"], qp["point_biserial_ci"]), _with_ci(qp["auc"], qp["auc_ci"])])
        qs = q_success(pooled)
        if qs["memories"]:
            retro.append([g.env, g.label, qs["memories"], qs["injections"],
                          _with_ci(qs["pearson"], qs["pearson_ci"]), _with_ci(qs["spearman"], qs["spearman_ci"])])
        for epoch, x in injected_from_success(pooled).items():
            if x["success"] + x["failure"] + x["unknown"]:
                shares.append([g.env, g.label, epoch, x["success"], x["failure"], x["unknown"], _num(x["share"])])
    how = "counted as 0" if zero_fail == "zero" else "left out of the mean"
    warned = setting_warnings(groups)
    out = ["# Readings\n"]
    if warned:
        out += ["Warnings: settings under which a method behaved as another (memrl.metrics.degenerate), "
                "per run.\n", markdown_table(["benchmark", "method", "seed", "warning"], warned), ""]
    out += [f"Forgetting: an epoch in which no task failed has FR = 0/0. The tables use the reading "
           f"`{zero_fail}` ({how}); both means are below (mean over seeds).\n",
           markdown_table(["benchmark", "method", "0/0 epochs", "epochs >= 2", "mean (zero)", "mean (skip)"],
                          forgetting)]
    if retrieval:
        out += ["\nRetrieval, per epoch (all seeds pooled): mean Phase-A pool size over all retrievals "
                "(an empty pool counts 0) and the share of non-empty pools made only of the task's own "
                "memories (saturation).\n",
                markdown_table(["benchmark", "method", "epoch", "retrievals", "empty", "mean pool",
                                "own-only share"], retrieval)]
    if utility:
        out += ["\nDoes Q predict the next outcome? (all seeds pooled) For every injection, the memory's Q "
                "before that episode (from earlier outcomes only) against the episode's success: the "
                "point-biserial r and the AUC (0.5: no better than chance), with 95% bootstrap intervals "
                "over episodes. A similarity-only method has Q = 0 throughout (r: –, AUC 0.5). Its binned "
                "form is the Q-calibration figure.\n",
                markdown_table(["benchmark", "method", "episodes", "injections", "distinct Q", "point-biserial r",
                                "AUC"], utility)]
    if retro:
        out += ["\nRetrospective (circular; not evidence that Q is worth anything): a memory's Q at its last "
                "injection against the success rate of the episodes it was injected into. Q is a running "
                "average of those same outcomes, so this correlation is high by construction. It is not "
                "the paper's Figure-7 computation, which the paper's code does not include "
                "(docs/experiments.md).\n",
                markdown_table(["benchmark", "method", "memories", "injections", "Pearson r", "Spearman ρ"],
                               retro)]
    if shares:
        out += ["\nInjected memories by the outcome of the episode that wrote them, per epoch (unknown: "
                "written outside these records, e.g. imported).\n",
                markdown_table(["benchmark", "method", "epoch", "from successes", "from failures", "unknown",
                                "share from successes"], shares)]
    return "\n".join(out)
