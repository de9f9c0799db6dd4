"""`memrl plan [-m] [HYDRA OVERRIDES...]`: calls, tokens, cost and wall time before a run (memrl.control.plan)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

from memrl.control.plan import (DEFAULT_PILOT_TASKS, PLAN_YES_ENV, RunPlan, _duration, _is_hydra, _without, compose,
                                count_tasks, estimate, evidence, expand, pilot, run_name)
from memrl.core.errors import ConfigError


def plan_run(overrides: list[str], args: argparse.Namespace) -> RunPlan:
    from memrl.config.validate import validate

    v = validate(compose([o for o in overrides if not _is_hydra(o)]))
    n_tasks = count_tasks(v)
    if not n_tasks:
        raise ConfigError("env: the selection holds no task")
    name = " ".join(overrides) or "(defaults)"
    if args.from_dir is not None:
        ev = evidence(args.from_dir, f"the run in {args.from_dir}")
    else:
        p = min(args.pilot_tasks, n_tasks)
        where = args.pilot_dir / run_name(overrides)
        base = [o for o in _without(overrides, ("env.max_tasks", "runner.epochs", "runner.progress"))
                if not _is_hydra(o)]
        pilot(base, where, p, 1, quiet=not args.verbose)
        ev = evidence(where, f"a pilot of {p} tasks x 1 epoch in {where}")
        if ev.max_injected == 0 and getattr(v.memory, "name", "none") != "none":
            pilot(base, where, p, 2, quiet=not args.verbose)  # see how large injections are
            ev = evidence(where, f"a pilot of {p} tasks x 1 epoch (+1 epoch for injection sizes) in {where}")
    return estimate(name, v, n_tasks, ev, chars_per_token=args.chars_per_token,
                    call_seconds=args.call_seconds)


def confirm() -> bool:
    if os.environ.get(PLAN_YES_ENV) or not sys.stdin.isatty():
        return True
    try:
        answer = input("proceed? [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def main(argv: Sequence[str] | None = None, prog: str = "python -m memrl.cli plan") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                 epilog="Any other argument is a Hydra override of the run.")
    ap.add_argument("-m", "--multirun", action="store_true", help="the overrides are a sweep")
    ap.add_argument("--from", dest="from_dir", type=Path, help="estimate from this run, no pilot")
    ap.add_argument("--pilot-tasks", type=int, default=DEFAULT_PILOT_TASKS)
    ap.add_argument("--pilot-dir", type=Path, default=Path("runs/.plan"))
    ap.add_argument("--chars-per-token", type=float, default=4.0)
    ap.add_argument("--call-seconds", type=float, help="seconds per model call (else the pilot's)")
    ap.add_argument("--json", type=Path, help="also write the plan here")
    ap.add_argument("--confirm", action="store_true", help="ask before going on (module doc)")
    ap.add_argument("--verbose", action="store_true", help="show the pilot runs' output")
    args, overrides = ap.parse_known_args(argv)
    unknown = [o for o in overrides if o.startswith("--")]
    if unknown:
        ap.error(f"unknown option(s) {unknown}")
    try:
        from memrl.config.groups import check_group_choices

        check_group_choices(overrides)
        runs = expand(overrides, args.multirun)
        plans = [plan_run(run, args) for run in runs]
    except ConfigError as exc:
        print(f"memrl: {exc}", file=sys.stderr)
        return 2
    print(f"plan: {len(plans)} run(s)")
    for p in plans:
        print(p.line())
    if len(plans) > 1:
        walls = [p.wall_s for p in plans]
        total_wall = _duration(sum(walls)) if all(w is not None for w in walls) else "unknown"  # type: ignore[arg-type]
        unpriced = " (some runs unpriced)" if any(p.unpriced for p in plans) else ""
        print(f"total: {sum(p.requests for p in plans):,} model requests, "
              f"{sum(p.prompt_tokens + p.completion_tokens for p in plans):,} tokens, "
              f"${sum(p.cost_usd for p in plans):,.2f}{unpriced}, wall {total_wall} one run after another "
              "(before cache hits shared between runs)")
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(p) for p in plans], indent=2), encoding="utf-8")
    if args.confirm and not confirm():
        print("memrl: not started", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
