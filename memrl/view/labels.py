"""Which runs the MemRL page shows, and what it calls them: the same rules as the report's
(memrl.report.inputs, memrl.report.replicates, memrl.report.grouping), so a run reads alike in
both.

- A run whose episodes repeat another seed's of the same method and settings is a copy, not
  a replicate: the page leaves it out of every chart and names it in the summary (`copies`).
- Each run's label is its method with the settings that tell the page's runs apart (a λ sweep:
  `memrl (lam=0.5)`), then its seed where seeds differ, then its marks (`[unfinished]`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Sequence

from memrl.report.replicates import Copy, distinct
from memrl.view.data import RunView


def _params(runs: Sequence[RunView]) -> list[tuple[tuple[str, Any], ...]]:
    from memrl.report.grouping import series_params
    from memrl.report.inputs import data_key

    tasks = data_key(runs)
    return series_params([(r.mode, r.env, r.method, r.config) for r in runs],
                         [{"tasks": tasks[id(r)]} if id(r) in tasks else {} for r in runs])


def drop_copies(runs: Sequence[RunView]) -> tuple[list[RunView], list[Copy[RunView]]]:
    """The runs that are distinct replicates within their method and settings (in the order
    given), and the copies left out."""
    from memrl.report.grouping import _hashable

    params = _params(runs)
    groups: dict[str, list[RunView]] = defaultdict(list)
    for r, p in zip(runs, params):
        groups[_hashable([r.mode, r.env, r.method, list(p)])].append(r)
    dropped: list[Copy[RunView]] = []
    for members in groups.values():
        _, copies = distinct(sorted(members, key=lambda r: r.seed), lambda r: r.episodes)
        dropped += copies
    gone = {id(c.run) for c in dropped}
    return [r for r in runs if id(r) not in gone], dropped


def assign_labels(runs: Sequence[RunView]) -> None:
    """Set each run's `display` label (module doc)."""
    from memrl.report.grouping import mark_suffix, short_labels

    params = _params(runs)
    series = short_labels([(f"{r.mode}/{r.env}", r.method, p) for r, p in zip(runs, params)])
    models = {r.ident["model"] for r in runs}
    envs = {r.env for r in runs}
    seeds = {r.seed for r in runs}
    for r, lab in zip(runs, series):
        parts = [lab]
        if len(models) > 1 and not any(k.startswith("llm.") for k, _ in params[runs.index(r)]):
            parts.append(r.ident["model"])
        if len(envs) > 1:
            parts.append(r.env)
        r.series = " ".join(parts) + mark_suffix(r.marks)
        if len(seeds) > 1:
            parts.append(f"seed {r.seed}")
        r.display = " ".join(parts) + mark_suffix(r.marks)
