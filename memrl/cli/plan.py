"""`memrl plan [-m] [--yes] [HYDRA OVERRIDES...]`: calls, tokens, cost and wall time before a run
(memrl.control.plan). It says what it does while it does it (listing the tasks, each pilot),
and a pilot that spends is quoted first and asked about (memrl.control.pilot_quote); what the
pilot cost is printed after it. Exit 1: a question answered no (nothing spent)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from memrl.control.plan import (DEFAULT_PILOT_TASKS, PLAN_YES_ENV, RunPlan, _duration, _is_hydra, _without, compose,
                                count_tasks, estimate, evidence, expand, pilot, run_name)
from memrl.control.pilot_quote import PilotQuote, quote, spent
from memrl.core.errors import ConfigError


def say(msg: str) -> None:
    print(f"plan: {msg}", file=sys.stderr, flush=True)


def prepare(overrides: list[str]) -> tuple[Any, int]:
    """The run's validated config and its task count; says what it is doing while the env
    lists its tasks (the first time on a benchmark, e.g. ALFWorld reads every game once)."""
    from memrl.config.validate import validate

    v = validate(compose([o for o in overrides if not _is_hydra(o)]))
    say(f"listing the tasks of {v.env.name} (the first time, each game or task is read once and cached: "
        "progress follows)")
    t0 = time.monotonic()
    n_tasks = count_tasks(v)
    if not n_tasks:
        raise ConfigError("env: the selection holds no task")
    say(f"{n_tasks} tasks ({time.monotonic() - t0:.0f} s)")
    return v, n_tasks


def plan_run(overrides: list[str], v: Any, n_tasks: int, args: argparse.Namespace) -> RunPlan:
    name = " ".join(overrides) or "(defaults)"
    if args.from_dir is not None:
        ev = evidence(args.from_dir, f"the run in {args.from_dir}")
    else:
        p = min(args.pilot_tasks, n_tasks)
        where = args.pilot_dir / run_name(overrides)
        base = [o for o in _without(overrides, ("env.max_tasks", "runner.epochs", "runner.progress"))
                if not _is_hydra(o)]
        say(f"pilot of {name}: {p} tasks x 1 epoch into {where}")
        pilot(base, where, p, 1, quiet=not args.verbose, echo=say)
        ev = evidence(where, f"a pilot of {p} tasks x 1 epoch in {where}")
        if ev.max_injected == 0 and getattr(v.memory, "name", "none") != "none":
            say("no memory was injected yet: one more pilot epoch on the same tasks, to see injection sizes")
            pilot(base, where, p, 2, quiet=not args.verbose, echo=say)  # see how large injections are
            ev = evidence(where, f"a pilot of {p} tasks x 1 epoch (+1 epoch for injection sizes) in {where}")
        say(spent(where))
    return estimate(name, v, n_tasks, ev, chars_per_token=args.chars_per_token,
                    call_seconds=args.call_seconds)


def ask_before_pilots(quotes: list[PilotQuote], yes: bool) -> bool:
    """Say what the pilots will cost; when one bills, ask (module doc of memrl.control.plan)."""
    for q in quotes:
        say(q.line())
    paid = [q for q in quotes if q.bills]
    if not paid:
        return True
    known = [q.cost_usd for q in paid if q.cost_usd is not None]
    total = f"about ${sum(known):,.4f}" + (" + unpriced" if len(known) < len(paid) else "") if known \
        else "an unknown amount"
    if yes or os.environ.get(PLAN_YES_ENV):
        say(f"running {len(paid)} paid pilot(s), {total} ({'--yes' if yes else PLAN_YES_ENV})")
        return True
    if not sys.stdin.isatty():
        print(f"memrl: the pilot(s) would spend {total}; not run without a question. Answer it at a terminal, "
              f"pass --yes (or {PLAN_YES_ENV}=1), or plan from an existing run with --from RUN_DIR",
              file=sys.stderr)
        return False
    try:
        answer = input(f"run the pilot(s), {total}? [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


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
    ap.add_argument("--pilot-tasks", type=int, default=DEFAULT_PILOT_TASKS,
                    help=f"how many tasks the pilot plays (one epoch) to measure calls, tokens and seconds per "
                         f"episode (default {DEFAULT_PILOT_TASKS}; more: a steadier estimate, more spent)")
    ap.add_argument("--pilot-dir", type=Path, default=Path("runs/.plan"),
                    help="where the pilot runs are kept (their answers stay in the response cache, so the real "
                         "run gets them free); default runs/.plan")
    ap.add_argument("--chars-per-token", type=float, default=4.0)
    ap.add_argument("--call-seconds", type=float, help="seconds per model call (else the pilot's)")
    ap.add_argument("--json", type=Path, help="also write the plan here")
    ap.add_argument("--confirm", action="store_true", help="ask before going on (module doc)")
    ap.add_argument("-y", "--yes", action="store_true",
                    help="run a paid pilot without asking (else its estimated cost is shown and a question asked)")
    ap.add_argument("--verbose", action="store_true", help="show the pilot runs' output")
    args, overrides = ap.parse_known_args(argv)
    progress = logging.StreamHandler(sys.stderr)  # the envs' progress lines while they list their tasks
    progress.setFormatter(logging.Formatter("plan: %(message)s"))
    envs_log = logging.getLogger("memrl_envs")
    envs_log.addHandler(progress)
    envs_log.setLevel(logging.INFO)
    unknown = [o for o in overrides if o.startswith("--")]
    if unknown:
        ap.error(f"unknown option(s) {unknown}")
    try:
        from memrl.config.groups import check_group_choices

        check_group_choices(overrides)
        runs = expand(overrides, args.multirun)
        prepared = [prepare(run) for run in runs]
        if args.from_dir is None:
            quotes = [quote(v, min(args.pilot_tasks, n), 1 if getattr(v.memory, "name", "none") == "none" else 2,
                            chars_per_token=args.chars_per_token) for v, n in prepared]
            if not ask_before_pilots(quotes, args.yes):
                print("memrl: no pilot run, nothing spent", file=sys.stderr)
                return 1
        plans = [plan_run(run, v, n, args) for run, (v, n) in zip(runs, prepared)]
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
    if args.confirm and not (args.yes or confirm()):
        print("memrl: not started", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
