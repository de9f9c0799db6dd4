"""The options of the config groups (`env=alfworld`, `memory=memrl`, ...), checked before Hydra
composes: a group option that does not exist is `memrl: env=alfwrld: ...`, exit 2, naming the
group's options and the closest one, as every other config error is (Hydra's own message for
it is a traceback-style exit 1).

The options are the YAML files of `configs/<group>/` and of the same folder under every
`hydra.searchpath=[file://...]` entry of the command line (the tests' fixtures add groups
there). Hydra's own groups (`hydra/...`) are left to Hydra.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Sequence

from memrl.core.errors import ConfigError


def config_dirs(overrides: Sequence[str]) -> list[Path]:
    """configs/ and every file:// (or plain) folder a `hydra.searchpath=[...]` override adds."""
    from memrl.config.frame import CONFIG_DIR

    dirs = [CONFIG_DIR]
    for o in overrides:
        key, _, value = o.lstrip("+~").partition("=")
        if key != "hydra.searchpath":
            continue
        for item in value.strip("[]").split(","):
            item = item.strip().strip("'\"")
            if item.startswith("file://"):
                dirs.append(Path(item.removeprefix("file://")))
            elif item and "://" not in item:
                dirs.append(Path(item))
    return dirs


def group_options(group: str, dirs: Sequence[Path]) -> list[str]:
    """The options of a config group (YAML stems), over every config folder."""
    return sorted({p.stem for d in dirs for p in (d / group).glob("*.yaml")})


def check_group_choices(overrides: Sequence[str]) -> None:
    """ConfigError naming every `group=option` of the command line whose option does not exist."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception:  # a syntax error: Hydra's message says it best
        return
    dirs = config_dirs(overrides)
    problems = []
    for o in parsed:
        group = o.key_or_group
        if group.startswith("hydra") or o.is_delete() or not any((d / group).is_dir() for d in dirs):
            continue
        options = group_options(group, dirs)
        values = list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.value()]
        for v in values:
            if v is None or str(v) == "null" or str(v) in options:
                continue
            near = difflib.get_close_matches(str(v), options, n=1)
            hint = f"; did you mean {group}={near[0]}?" if near else ""
            problems.append(f"{group}={v}: no such option of the config group {group} "
                            f"(its options: {', '.join(options)}){hint}")
    if problems:
        raise ConfigError("\n  ".join(problems) if len(problems) == 1
                          else "invalid configuration:\n  " + "\n  ".join(problems))
