"""`memrl demo [--out DIR] [OVERRIDES...]` (`make demo`): memory changing outcomes offline (memrl.demo.pipeline)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Sequence

from memrl.core.errors import ConfigError
from memrl.demo.demo_report import render, write
from memrl.demo.pipeline import (ATTEMPT_STEPS, BASE, DEFAULT_OUT, DEMO_TIES, METHODS, TEACHER_STEPS, Phase,
                                 alongside_teacher, analyse, cores, run_students)
from memrl.demo.teach import BANK_ORDERS, history_bank


def main(argv: Sequence[str] | None = None, prog: str = "memrl demo") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--bench-prompts", type=int, default=0,
                    help="prompts timed with prefix reuse off and on (0 = skip)")
    ap.add_argument("--teacher-steps", type=int, default=TEACHER_STEPS,
                    help=f"the teacher's step cap (default {TEACHER_STEPS})")
    ap.add_argument("--attempt-steps", type=int, default=ATTEMPT_STEPS,
                    help=f"the step cap of the teacher's failed attempt (default {ATTEMPT_STEPS})")
    ap.add_argument("--order", choices=BANK_ORDERS, default="history",
                    help="which of a game's two memories is older: the attempt (history) or a coin per game")
    ap.add_argument("--ties", choices=("oldest", "newest", "random"), default=DEMO_TIES,
                    help="how both methods order memories of equal similarity (memory.bank.ties; default "
                         f"{DEMO_TIES}: under oldest or newest with --order history the rule alone decides what "
                         "RAG shows)")
    ap.add_argument("--methods", default=",".join(METHODS), help="comma-separated subset of " + ",".join(METHODS))
    ap.add_argument("--jobs", type=int, default=cores(),
                    help="cores to use (default: this process's): the other students' runs at once, then "
                         "MemRL's with that many llama.cpp threads, each a process; 1 = one after another, "
                         "in this process (memrl.demo.pipeline.run_students)")
    ap.add_argument("overrides", nargs="*", help="config overrides for every run")
    args = ap.parse_args(argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        print(f"memrl: --methods: unknown {unknown}; known {list(METHODS)}", file=sys.stderr)
        return 2
    out: Path = args.out
    phases: list[Phase] = []
    try:
        banks = []

        def teacher() -> Path:
            t0 = time.monotonic()
            bank = history_bank(BASE + args.overrides, out / "teacher", attempt_steps=args.attempt_steps,
                                expert_steps=args.teacher_steps, order=args.order)
            phases.append(Phase("teacher (expert twice, no model)", time.monotonic() - t0))
            print(f"[demo] {bank.describe()}", flush=True)
            banks.append(bank)
            return bank.bank_dir.resolve()

        t0 = time.monotonic()
        dirs = run_students(out, teacher, args.overrides, methods, jobs=args.jobs, ties=args.ties)
        early = alongside_teacher(methods, args.jobs)
        phases.append(Phase("students (" + ", ".join(methods) + ")" +
                            (f"; {', '.join(early)} started with the teacher" if early else ""),
                            time.monotonic() - t0 - phases[0].seconds))  # the phases add up to the wall time
        bank = banks[0]
    except ConfigError as exc:
        print(f"memrl: {exc}", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    res = analyse(out, bank.expert.run_dir, dirs, order=bank.order)
    res.teacher.update(attempt_steps=args.attempt_steps, order=bank.order, attempt_first=len(bank.attempt_first),
                       attempts_solved=bank.attempt.solved)
    if args.bench_prompts > 0:
        from memrl.demo.bench import bench_prefix_reuse

        threads = [f"llm.n_threads={args.jobs}"] if args.jobs > 1 else []  # the students are done: every core
        res.speed["bench"] = bench_prefix_reuse(bank.expert.run_dir, BASE + threads + args.overrides,
                                                args.bench_prompts)
    phases.append(Phase("analysis and speed check", time.monotonic() - t0))
    res.phases = phases
    files = write(res)
    print(render(res))
    print("files: " + ", ".join(str(p) for p in files.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
