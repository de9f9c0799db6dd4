"""Grouping runs into the rows of the report.

Runs are grouped by (mode, env name, memory name, params). Mode is ``config.runner.mode``
("train" when absent); transfer runs (``runner.mode == "transfer"``) only go to Table 2.
A run's params (`series_params`) are the config keys (flattened, dotted) that tell it apart:
those whose values differ between the runs of its (mode, env, memory) family -- e.g.
``memory.lam`` in a λ sweep or ``memory.k1``/``memory.k2`` in a top-k grid -- and those
outside ``memory.*`` that differ anywhere in its (mode, env) family (another model, embedder
or env setting: the conditions a comparison must share), ignoring the grouping axes
themselves (`AXES`) and every key whose schema marks it as not changing results (cache and
data locations, progress bars, concurrency, logging: memrl.config.keys); runs played on
different task lists, reported under `--mixed`, carry their list as the pseudo-key `tasks`.

Within a group, runs are the seeds (``config.seed``); a second run with the same seed in one
group is dropped with a warning (the first by path order is kept), and a run whose episodes
repeat another seed's (memrl.report.replicates) is not a replicate: it is kept aside
(`Group.copies`), named in a warning and in the tables, and left out of every interval and
test.

Labels (`short_labels`) are short and unique: the method with the fewest params that still
tell the benchmark's groups apart (addresses -- URLs, hosts, ports, paths -- and a config
option's `name` beside its model go first), values cut to `VALUE_CHARS`; a label longer
than `LABEL_CHARS` is `method (setting N)`, its full params listed in groups.md and
report.json. A group holding a
run reported under a flag carries the flag's mark (`[unfinished]`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from memrl.report.replicates import Copy, Episodes, distinct
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
    runs: list[Run]  # the distinct replicates, sorted by seed
    copies: list[Copy[Run]] = field(default_factory=list)  # runs that repeat one of `runs`
    name: str = ""  # the short unique label (`assign_labels`); "" before it is assigned

    @property
    def label(self) -> str:
        return self.name or series_label(self.memory, self.params) + mark_suffix(self.marks)

    @property
    def marks(self) -> list[str]:
        """Why some of its runs are reported only under a flag (e.g. unfinished)."""
        return sorted({m for r in self.runs + [c.run for c in self.copies] for m in r.marks})

    @property
    def seeds(self) -> list[int]:
        return [r.seed for r in self.runs]

    @property
    def conditions(self) -> tuple[tuple[str, Any], ...]:
        """The params outside the method's own section: what a comparison must agree on."""
        return tuple((k, v) for k, v in self.params if not k.startswith("memory."))

    def param(self, key: str) -> Any:
        return dict(self.params).get(key)

    def n_tasks(self) -> str:
        ns = sorted({len(r.task_ids) for r in self.runs})
        return str(ns[0]) if len(ns) == 1 else f"{ns[0]}-{ns[-1]}"

    def per_seed(self, fn: Callable[[Run], float | None]) -> list[float]:
        return [v for v in (fn(r) for r in self.runs) if v is not None]

    def copies_text(self) -> str:
        """'seed 1 = seed 0' per copy ('' without copies)."""
        return ", ".join(f"seed {c.run.seed} = seed {c.of.seed}" for c in self.copies)


def mark_suffix(marks: Sequence[str]) -> str:
    return "".join(f" [{m}]" for m in marks)


def series_label(memory: str, params: Sequence[tuple[str, Any]]) -> str:
    """A method with its settings, e.g. `memrl (lam=0.5)`, values shortened (`short_value`)."""
    if not params:
        return memory
    inner = ", ".join(f"{short_key(k)}={short_value(v)}" for k, v in params)
    return f"{memory} ({inner})"


def short_key(key: str) -> str:
    return key.removeprefix("memory.")


def _fmt_value(v: Any) -> str:
    return json.dumps(v) if isinstance(v, (list, dict)) else str(v)


# labels: how long a value or a label may grow before it is shortened
VALUE_CHARS = 24
LABEL_CHARS = 64
# leaf names of keys that say where something is served or stored, not what it is: left out
# of labels unless they alone tell two series apart
ADDRESS_LEAVES = frozenset({"api_base", "host", "port", "socket", "url", "collection", "api_key_env",
                            "cache_path", "cache_dir", "scratch_dir", "server_dir", "rootfs_dir"})


def is_address(key: str) -> bool:
    leaf = key.rsplit(".", 1)[-1]
    return leaf in ADDRESS_LEAVES or leaf.endswith(("_path", "_dir", "_file"))


def short_value(v: Any, limit: int = VALUE_CHARS) -> str:
    """A value as a label shows it: at most `limit` characters (a long one keeps its start
    and end around '…')."""
    text = _fmt_value(v)
    if len(text) <= limit:
        return text
    head = (limit - 1) * 2 // 3
    return text[:head] + "…" + text[-(limit - 1 - head):]


def _drop_order(key: str) -> tuple[int, str]:
    """Which keys a label gives up first when another already tells the same groups apart:
    addresses, then `name` keys (a config option's name beside its model), then the others,
    the method's own keys and the task list last."""
    leaf = key.rsplit(".", 1)[-1]
    if is_address(key):
        return (0, key)
    if leaf == "name":
        return (1, key)
    if key.startswith("memory.") or key == "tasks":
        return (3, key)
    return (2, key)


def _partition(series: Sequence[tuple[str, str, Sequence[tuple[str, Any]]]], keys: set[str],
               by_method: bool) -> list[int]:
    seen: dict[str, int] = {}
    return [seen.setdefault(_hashable([fam, m if by_method else "", [(k, v) for k, v in p if k in keys]]),
                            len(seen)) for fam, m, p in series]


def _fewest(series: Sequence[tuple[str, str, Sequence[tuple[str, Any]]]], keys: set[str],
            by_method: bool) -> set[str]:
    """`keys` less every key whose distinctions the others already make (`_drop_order`)."""
    target = _partition(series, keys, by_method)
    for key in sorted(keys, key=_drop_order):
        if _partition(series, keys - {key}, by_method) == target:
            keys = keys - {key}
    return keys


def short_labels(series: Sequence[tuple[str, str, Sequence[tuple[str, Any]]]]) -> list[str]:
    """Short, unique labels for series given as (family, method, params), e.g. family = mode
    and benchmark: the method with the fewest keys that still tell the family's series apart
    (a key is left out when the others already make the same distinctions: an address, a
    config option's `name` beside its model, ...), each value shortened (`short_value`); a
    label still longer than `LABEL_CHARS` (or shortened into another's) becomes
    `method (setting N)`, its full settings listed beside it (report.json, groups.md). Keys
    outside `memory.*` (the conditions: model, embedder, env settings, task list) are kept
    where they tell any two series of the family apart, whatever their methods."""
    every = {k for _, _, p in series for k, _ in p}
    # conditions (outside memory.*) tell the family's series apart whatever their method: a
    # method run on another model says so; the method's own keys, within the method
    keys = _fewest(series, {k for k in every if not k.startswith("memory.")}, by_method=False) | \
        _fewest(series, {k for k in every if k.startswith("memory.")}, by_method=True)
    out = [series_label(m, [(k, v) for k, v in p if k in keys]) for _, m, p in series]
    taken: dict[tuple[str, str], set[str]] = defaultdict(set)  # labels of other settings
    for i, (fam, m, p) in enumerate(series):
        for j, (f2, _, p2) in enumerate(series):
            if f2 == fam and out[j] == out[i] and _hashable(list(p2)) != _hashable(list(p)):
                taken[(fam, out[i])].add(_hashable(list(p)))
    for i, (fam, m, p) in enumerate(series):
        if len(out[i]) > LABEL_CHARS or taken.get((fam, out[i])):
            same = [j for j, (f2, m2, _) in enumerate(series) if (f2, m2) == (fam, m)]
            settings = list(dict.fromkeys(_hashable(list(series[j][2])) for j in same))
            out[i] = f"{m} (setting {settings.index(_hashable(list(p))) + 1})"
    return out


def series_params(items: Sequence[tuple[str, str, str, dict[str, Any]]],
                  extra: Sequence[dict[str, Any]] | None = None) -> list[tuple[tuple[str, Any], ...]]:
    """Per item (mode, env, memory, config): the keys that tell it apart, with its values:
    the keys that differ between the configs of its (mode, env, memory) family, and those
    outside `memory.*` that differ anywhere in its (mode, env) family (the conditions a
    comparison must share: another model, embedder or env setting); `extra` per item adds
    pseudo-keys (the task list: memrl.report.inputs.data_key). Keys that do not change
    results are never among them (`swept_keys`)."""
    extra = list(extra) if extra is not None else [{} for _ in items]
    fam: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    cond: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, (mode, env, memory, _) in enumerate(items):
        fam[(mode, env, memory)].append(i)
        cond[(mode, env)].append(i)
    keys_of: dict[int, set[str]] = defaultdict(set)
    for idx in fam.values():
        for k in swept_keys([items[i][3] for i in idx]):
            for i in idx:
                keys_of[i].add(k)
    for idx in cond.values():
        for k in swept_keys([items[i][3] for i in idx]):
            if not k.startswith("memory."):
                for i in idx:
                    keys_of[i].add(k)
    out = []
    for i, (_, _, _, config) in enumerate(items):
        flat = flatten(comparable_config(config))
        params = [(k, flat.get(k)) for k in sorted(keys_of[i])] + sorted(extra[i].items())
        out.append(tuple(params))
    return out


def group_runs(runs: Sequence[Run], warn: Callable[[str], None] = print) -> list[Group]:
    """Runs into groups (module doc): the distinct replicates of each setting, copies of
    another seed's episodes left out and named (`Group.copies`, a warning each)."""
    from memrl.report.inputs import data_key

    tasks = data_key(runs)
    params = series_params([(r.mode, r.env, r.memory, r.config) for r in runs],
                           [{"tasks": tasks[id(r)]} if id(r) in tasks else {} for r in runs])
    by_key: dict[tuple[str, str, str, str], list[Run]] = defaultdict(list)
    params_of: dict[tuple[str, str, str, str], tuple[tuple[str, Any], ...]] = {}
    for r, p in zip(runs, params):
        key = (r.mode, r.env, r.memory, _hashable(p))
        by_key[key].append(r)
        params_of[key] = p
    groups: list[Group] = []
    for key, members in by_key.items():
        kept: dict[int, Run] = {}
        for r in sorted(members, key=lambda r: str(r.path)):
            if r.seed in kept:
                warn(f"warning: {r.path}: same group and seed as {kept[r.seed].path}; ignored")
                continue
            kept[r.seed] = r
        ordered = [kept[s] for s in sorted(kept)]
        distinct_runs, copies = distinct(ordered, lambda r: r.episodes or Episodes({}, {}, {}))
        mode, env, memory, _ = key
        g = Group(mode, env, memory, params_of[key], distinct_runs, copies)
        groups.append(g)
    groups.sort(key=lambda g: (g.mode, g.env, g.memory != REFERENCE, g.memory,
                               [(k, _sort_value(v)) for k, v in g.params]))
    assign_labels(groups)
    for g in groups:
        for c in g.copies:
            warn(f"warning: {g.env} / {g.label}: seed {c.run.seed} ({c.run.path}) repeats seed "
                 f"{c.of.seed}'s episodes ({c.reason}): not an independent replicate; counted once")
    return groups


def assign_labels(groups: Sequence[Group]) -> None:
    """Give each group its short unique label (`short_labels`), marks appended."""
    labels = short_labels([(f"{g.mode}/{g.env}", g.memory, g.params) for g in groups])
    for g, lab in zip(groups, labels):
        g.name = lab + mark_suffix(g.marks)


def _sort_value(v: Any) -> tuple[int, float, str]:
    if isinstance(v, bool) or v is None:
        return (1, 0.0, str(v))
    if isinstance(v, (int, float)):
        return (0, float(v), "")
    return (1, 0.0, _hashable(v))
