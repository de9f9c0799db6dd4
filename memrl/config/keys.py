"""Which config keys change what a run computes, derived from the marks on the schema fields
(memrl.core.fields; what each mark means for the resume check, the report's groups and the run
directory's name: docs/design.md §8, "Same command, same directory").

A config's keys are read with the marks of the schemas it is validated by: the fixed sections'
and those of the env and memory classes its `_target_`s name (a class that does not import
here is read with the marks of every class its group offers). No two schemas of one section
may mark a key differently (`conflicts`), so this is the same as reading every schema.

Derived here: `resume_exempt(config)` (memrl.journal.runcard), `report_ignored(config)`
(memrl.report.grouping) and `hydra_exclude_keys()`, written out in configs/config.yaml because
Hydra reads it before any memrl code runs (a test checks the two agree; `memrl keys --hydra`
prints it). And a run card's `_target_`s that name a class by a path it has since left
(`MOVED_TARGETS`).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping

from pydantic import BaseModel

from memrl.core.fields import DATA_LOCATION, EXTENT, NO_EFFECT, RESULT, schema_marks

# config groups whose schema is the `Settings` of the class their `_target_` names
TARGET_GROUPS = ("env", "memory")


# ------------------------------------------------------------------------------- sections
def _config_dir(config_dir: Path | None) -> Path:
    from memrl.config.frame import CONFIG_DIR

    return Path(config_dir) if config_dir is not None else CONFIG_DIR


def _target_classes(group: str, config_dir: Path | None = None) -> list[type]:
    """The classes the options of a target group name (configs/<group>/*.yaml) that import
    here (a class whose extra is not installed is left out: see `unimportable`)."""
    found: dict[str, type] = {}
    for target in _group_targets(group, config_dir):
        cls = _import(target)
        if cls is not None:
            found[target] = cls
    return list(found.values())


def _group_targets(group: str, config_dir: Path | None = None) -> list[str]:
    targets: list[str] = []
    for path in sorted((_config_dir(config_dir) / group).glob("*.yaml")):
        match = re.search(r"^_target_:\s*(\S+)", path.read_text(encoding="utf-8"), re.M)
        if match and match.group(1) not in targets:
            targets.append(match.group(1))
    return targets


@lru_cache(maxsize=None)
def _import(target: str) -> type | None:
    from hydra.utils import get_class

    try:
        cls = get_class(target)
    except Exception:  # not installed here (an extra), or a class that no longer exists
        return None
    return cls if isinstance(getattr(cls, "Settings", None), type) else None


def unimportable() -> list[str]:
    """Classes the config groups name that do not import here (their marks are unknown)."""
    return [t for g in TARGET_GROUPS for t in _group_targets(g) if _import(t) is None]


def _fixed_schemas() -> dict[str, list[type[BaseModel]]]:
    from memrl.config.sections import SECTION_SCHEMAS, LoggerSettings, PathsSettings

    out: dict[str, list[type[BaseModel]]] = {k: [v] for k, v in SECTION_SCHEMAS.items()}
    out["logger"] = [LoggerSettings]
    out["paths"] = [PathsSettings]
    return out


def section_schemas() -> dict[str, list[type[BaseModel]]]:
    """Every schema a section of the composed config can be validated by."""
    out = _fixed_schemas()
    for group in TARGET_GROUPS:
        out[group] = [cls.Settings for cls in _target_classes(group)]
    return out


def _merge(section: str, schemas: Iterable[type[BaseModel]],
           conflicts: list[str]) -> dict[str, str]:
    merged: dict[str, str] = {}
    source: dict[str, str] = {}
    for schema in schemas:
        for key, mark in schema_marks(schema, section + ".").items():
            if key in merged and merged[key] != mark:
                conflicts.append(f"{key}: {mark} in {schema.__name__}, {merged[key]} in {source[key]}")
                continue
            merged[key], source[key] = mark, schema.__name__
    if merged and all(m == NO_EFFECT for m in merged.values()):
        merged[section] = NO_EFFECT
    return merged


@lru_cache(maxsize=1)
def _all_marks() -> tuple[dict[str, str], tuple[str, ...]]:
    conflicts: list[str] = []
    marks: dict[str, str] = {}
    for section, schemas in section_schemas().items():
        marks.update(_merge(section, schemas, conflicts))
    return marks, tuple(conflicts)


@lru_cache(maxsize=1)
def _fixed_marks() -> dict[str, str]:
    out: dict[str, str] = {}
    for section, schemas in _fixed_schemas().items():
        out.update(_merge(section, schemas, []))
    return out


@lru_cache(maxsize=None)
def _group_marks(group: str, target: str | None) -> dict[str, str]:
    """Marks of a target section: its class's schema; for a class unknown here (none named,
    or it does not import), those of every class the group's options name."""
    cls = _import(target) if target else None
    schemas = [cls.Settings] if cls is not None else [c.Settings for c in _target_classes(group)]
    return _merge(group, schemas, [])


def marks(config: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Dotted key -> mark (keys not listed change results). For a config: the marks of the
    schemas it is validated by (its own env and memory classes); without one: of every
    schema any config can use."""
    if config is None:
        return dict(_all_marks()[0])
    out = dict(_fixed_marks())
    for group in TARGET_GROUPS:
        node = config.get(group)
        target = node.get("_target_") if isinstance(node, Mapping) else None
        out.update(_group_marks(group, str(target) if target else None))
    return out


def conflicts() -> list[str]:
    """Keys two schemas of one section mark differently (must be none)."""
    return list(_all_marks()[1])


def keys_marked(*wanted: str, config: Mapping[str, Any] | None = None) -> frozenset[str]:
    return frozenset(k for k, m in marks(config).items() if m in wanted)


def resume_exempt(config: Mapping[str, Any] | None = None) -> frozenset[str]:
    """Keys that may differ between the sessions of one run."""
    return keys_marked(NO_EFFECT, EXTENT, DATA_LOCATION, config=config)


def report_ignored(config: Mapping[str, Any] | None = None) -> frozenset[str]:
    """Keys whose values never make two runs two experiments in the report."""
    return keys_marked(NO_EFFECT, DATA_LOCATION, config=config)


def path_keys(config_dir: Path | None = None) -> list[str]:
    """Config keys the run directory pattern spells out already (hydra.run.dir, e.g.
    `runs/${env.name}/${memory.name}/${llm.name}/...`): repeating them in the override part
    of the name would say nothing new."""
    text = (_config_dir(config_dir) / "config.yaml").read_text(encoding="utf-8")
    dirs = re.findall(r"^\s+(?:dir|subdir):\s*(\S+)", text, re.M)
    keys = {k for d in dirs for k in re.findall(r"\$\{([A-Za-z_][\w.]*)\}", d)}
    return sorted(k for k in keys if not k.startswith("hydra."))


def hydra_exclude_keys() -> list[str]:
    """Override keys left out of the run directory's name (any config: every schema)."""
    return sorted(set(path_keys()) | keys_marked(NO_EFFECT, EXTENT))


# ------------------------------------------------------------------------------- moved classes
# `_target_`s that named a class by a path it has since left (issue 25's restructuring): a run
# card written before keeps its old path, and is read with the new one, so the run resumes
MOVED_TARGETS = {
    "memrl_envs.lifelong.LifelongDbEnv": "memrl_envs.lifelong_db.LifelongDbEnv",
    "memrl_envs.lifelong.LifelongOsEnv": "memrl_envs.lifelong_os.LifelongOsEnv",
    "memrl_envs.lifelong.db_env.LifelongDbEnv": "memrl_envs.lifelong_db.LifelongDbEnv",
    "memrl_envs.lifelong.os_env.LifelongOsEnv": "memrl_envs.lifelong_os.LifelongOsEnv",
    "memrl_envs.alfworld.adapter.AlfworldEnv": "memrl_envs.alfworld.AlfworldEnv",
    "memrl_envs.bigcodebench.adapter.BigCodeBenchEnv": "memrl_envs.bigcodebench.BigCodeBenchEnv",
    "memrl_envs.hle.adapter.HLEEnv": "memrl_envs.hle.HLEEnv",
}


def current_targets(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a config whose env / memory `_target_` names a moved class by its path now."""
    out = dict(config)
    for group in TARGET_GROUPS:
        node = out.get(group)
        if isinstance(node, Mapping) and node.get("_target_") in MOVED_TARGETS:
            out[group] = {**node, "_target_": MOVED_TARGETS[node["_target_"]]}
    return out


# ------------------------------------------------------------------------------- configs
def retired(config: Mapping[str, Any]) -> set[str]:
    """Keys an older version of a section's schema had and a run card may still hold
    (`RETIRED_FIELDS` on the Settings of the class the section's `_target_` names)."""
    out: set[str] = set()
    for group in TARGET_GROUPS:
        node = config.get(group)
        target = node.get("_target_") if isinstance(node, Mapping) else None
        cls = _import(str(target)) if target else None
        if cls is not None:
            out |= {f"{group}.{k}" for k in getattr(cls.Settings, "RETIRED_FIELDS", ())}
    return out


def without(config: Mapping[str, Any], keys: Iterable[str], prefix: str = "") -> dict[str, Any]:
    """A copy of a nested config without the dotted `keys` (a key drops its whole subtree)."""
    drop = set(keys)
    out: dict[str, Any] = {}
    for k, v in config.items():
        key = f"{prefix}{k}"
        if key in drop:
            continue
        out[k] = without(v, drop, key + ".") if isinstance(v, Mapping) else v
    return out


def describe() -> str:
    """Every marked key, one per line (`memrl keys`)."""
    return "\n".join(f"{m:<14} {k}" for k, m in sorted(marks().items(), key=lambda km: (km[1], km[0]))
                     if m != RESULT)
