"""`memrl config [HYDRA OVERRIDES...] [--json]`: the full config a run with these overrides
would use, validated, before anything runs: every key of every section with its value, its
default where the value differs, whether it changes results, and what it means (the schemas
say it: memrl.config.describe), then what the run's seed changes (memrl.control.forewarn).
Nothing is built, no model is called, no directory is written.

A mistyped key gets the closest one (`memory.lambda: ... did you mean memory.lam?`), a group
option that does not exist gets the group's options (`env=alfwrld`); both are `memrl: ...`,
exit 2, as in `memrl run`."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

from memrl.core.errors import ConfigError


def describe(overrides: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """(the text `memrl config` prints, the full config) for one run's overrides."""
    from memrl.config.describe import describe_section
    from memrl.config.frame import SECTIONS
    from memrl.config.sections import SECTION_SCHEMAS
    from memrl.config.validate import full_config, validate
    from memrl.control.forewarn import seed_effects, seed_warning
    from memrl.control.plan import compose

    cfg = compose(list(overrides))
    v = validate(cfg)
    config = full_config(cfg, v)
    schemas = {**SECTION_SCHEMAS, "env": v.env_cls.Settings, "memory": v.memory_cls.Settings}
    lines = [f"# memrl run {' '.join(overrides) or '(defaults)'}: the full config, validated. After '#': "
             "the default where the value differs, 'no effect on results' for keys that do not change "
             "results, and what the key means (its schema's words)."]
    for section in SECTIONS:
        values = dict(config.get(section) or {})
        target = values.pop("_target_", None)
        schema = schemas[section]
        head = f"{section}:"
        origin = target or f"{schema.__module__}.{schema.__name__}"
        lines.append(f"{head:<40} # {origin}")
        lines += describe_section(schema, values)
    effects = seed_effects(v)
    lines.append(f"{'seed: ' + str(v.seed):<40} # what a seed changes here: "
                 + ("; ".join(effects) if effects else "nothing"))
    warning = seed_warning(v.seed, effects)
    if warning:
        lines.append(f"# {warning}")
    return "\n".join(lines), config


def main(argv: Sequence[str] | None = None, prog: str = "memrl config") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                 epilog="Any other argument is a Hydra override, as `memrl run` takes it.")
    ap.add_argument("--json", action="store_true", help="print the full config as JSON (no descriptions)")
    args, overrides = ap.parse_known_args(argv)
    unknown = [o for o in overrides if o.startswith("-")]
    if unknown:
        ap.error(f"unknown option(s) {unknown}")
    try:
        from memrl.config.groups import check_group_choices
        from memrl.control.plan import expand

        check_group_choices(overrides)
        if len(expand(overrides, multirun=True)) > 1:
            raise ConfigError("memrl config shows one run: give one value per key (a sweep's runs one at a time)")
        text, config = describe(overrides)
    except ConfigError as exc:
        print(f"memrl: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(config, indent=2, default=str) if args.json else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
