"""Grouping runs into the rows of the report.

Runs are grouped by (mode, env name, memory name, swept keys). Mode is
``config.runner.mode`` ("train" when absent); transfer runs (``runner.mode == "transfer"``)
only go to Table 2. Swept keys are detected, per (mode, env, memory) family, as the config
keys (flattened, dotted) whose values differ between the family's runs -- e.g.
``memory.lam`` in a λ sweep or ``memory.k1``/``memory.k2`` in a top-k grid -- ignoring the
grouping axes themselves (`AXES`) and every key whose schema marks it as not changing results
(cache and data locations, progress bars, concurrency, logging: memrl.config.keys). Within a
group, runs are the seeds (``config.seed``); a second run with the same seed in one group is
dropped with a warning (the first by path order is kept).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from memrl.report.runs import Run

REFERENCE = "memrl"
# the report's own axes: a group is (mode, env, memory) and its runs are the seeds
AXES = frozenset({"seed", "runner.mode", "env.name", "memory.name"})


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def ignored_keys(configs: Sequence[dict[str, Any]]) -> frozenset[str]:
    """Keys that never make two runs two groups: the report's own axes and every key the
    runs' schemas mark as not changing results (memrl.config.keys.report_ignored)."""
    from memrl.config.keys import report_ignored

    out = set(AXES)
    for c in configs:
        out |= report_ignored(c)
    return frozenset(out)


def _ignored(key: str, ignored: frozenset[str]) -> bool:
    """A key is ignored when it, or a section above it (e.g. `logger`), is."""
    parts = key.split(".")
    return any(".".join(parts[:i]) in ignored for i in range(1, len(parts) + 1))


def comparable_config(config: dict[str, Any]) -> dict[str, Any]:
    """A run's config without the keys its section's schema has retired (an older run card
    may still hold them), a key it lacks holding its schema's default (an older card lacks
    what its YAML left out: memrl.config.validate.with_defaults)."""
    from memrl.config.keys import retired, without
    from memrl.config.validate import with_defaults

    return without(with_defaults(config), retired(config))


def _hashable(v: Any) -> str:
    return json.dumps(v, sort_keys=True, default=str)


def swept_keys(configs: Sequence[dict[str, Any]]) -> list[str]:
    """Dotted config keys whose values differ between the configs (except `ignored_keys`)."""
    flat = [flatten(comparable_config(c)) for c in configs]
    keys = sorted({k for f in flat for k in f})
    ignored = ignored_keys(configs)
    return [k for k in keys if not _ignored(k, ignored) and len({_hashable(f.get(k)) for f in flat}) > 1]


@dataclass
class Group:
    mode: str
    env: str
    memory: str
    params: tuple[tuple[str, Any], ...]  # swept key -> value, sorted by key
    runs: list[Run]  # sorted by seed

    @property
    def label(self) -> str:
        return series_label(self.memory, self.params)

    @property
    def seeds(self) -> list[int]:
        return [r.seed for r in self.runs]

    def param(self, key: str) -> Any:
        return dict(self.params).get(key)

    def n_tasks(self) -> str:
        ns = sorted({len(r.task_ids) for r in self.runs})
        return str(ns[0]) if len(ns) == 1 else f"{ns[0]}-{ns[-1]}"

    def per_seed(self, fn: Callable[[Run], float | None]) -> list[float]:
        return [v for v in (fn(r) for r in self.runs) if v is not None]


def series_label(memory: str, params: Sequence[tuple[str, Any]]) -> str:
    """A method with its swept settings, e.g. `memrl (lam=0.5)`: the report's row label and
    the MemRL page's series name."""
    if not params:
        return memory
    inner = ", ".join(f"{short_key(k)}={_fmt_value(v)}" for k, v in params)
    return f"{memory} ({inner})"


def short_key(key: str) -> str:
    return key.removeprefix("memory.")


def _fmt_value(v: Any) -> str:
    return json.dumps(v) if isinstance(v, (list, dict)) else str(v)


def group_runs(runs: Sequence[Run], warn: Callable[[str], None] = print) -> list[Group]:
    families: dict[tuple[str, str, str], list[Run]] = defaultdict(list)
    for r in runs:
        families[(r.mode, r.env, r.memory)].append(r)
    groups: list[Group] = []
    for (mode, env, memory), fam in sorted(families.items()):
        keys = swept_keys([r.config for r in fam])
        by_params: dict[str, list[Run]] = defaultdict(list)
        params_of: dict[str, tuple[tuple[str, Any], ...]] = {}
        for r in fam:
            flat = flatten(comparable_config(r.config))
            params = tuple((k, flat.get(k)) for k in keys)
            h = _hashable(params)
            by_params[h].append(r)
            params_of[h] = params
        for h, members in by_params.items():
            kept: dict[int, Run] = {}
            for r in sorted(members, key=lambda r: str(r.path)):
                if r.seed in kept:
                    warn(f"warning: {r.path}: same group and seed as {kept[r.seed].path}; ignored")
                    continue
                kept[r.seed] = r
            groups.append(Group(mode, env, memory, params_of[h], [kept[s] for s in sorted(kept)]))
    groups.sort(key=lambda g: (g.mode, g.env, g.memory != REFERENCE, g.memory,
                               [(k, _sort_value(v)) for k, v in g.params]))
    return groups


def _sort_value(v: Any) -> tuple[int, float, str]:
    if isinstance(v, bool) or v is None:
        return (1, 0.0, str(v))
    if isinstance(v, (int, float)):
        return (0, float(v), "")
    return (1, 0.0, _hashable(v))
