"""`memrl report RUN_OR_MULTIRUN_DIR... --out DIR`: tables and figures from run directories
(found recursively). What is written and how it is computed: memrl/report/; what it refuses
and flags: memrl.report.inputs and docs/reading-results.md. Exit 2 (`memrl: ...`) for an input
it will not read."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from memrl.metrics.compute import ZERO_FAIL_READINGS
from memrl.report import write_report
from memrl.report.grouping import REFERENCE
from memrl.report.inputs import FLAG_MIXED, FLAG_UNFINISHED


def main(argv: Sequence[str] | None = None, prog: str = "memrl report") -> int:
    ap = argparse.ArgumentParser(
        prog=prog, description="Tables and figures from run directories (found recursively).")
    ap.add_argument("paths", nargs="+", type=Path, help="run directories or folders holding them")
    ap.add_argument("--out", type=Path, required=True, help="output folder")
    ap.add_argument("--n-boot", type=int, default=10_000, help="bootstrap draws (default 10000)")
    ap.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    ap.add_argument("--reference", default=REFERENCE, help="memory name compared against (default memrl)")
    ap.add_argument("--forgetting-zero-fail", choices=ZERO_FAIL_READINGS, default="zero",
                    help="an epoch with no failure (FR = 0/0): count it as 0 (default) or leave it out")
    ap.add_argument(FLAG_UNFINISHED, dest="include_unfinished", action="store_true",
                    help="report runs that did not finish (with what they completed), marked [unfinished]; "
                         "refused by default")
    ap.add_argument(FLAG_MIXED, dest="mixed", action="store_true",
                    help="report runs of one benchmark played on different task lists side by side, each "
                         "named by its list; refused by default")
    args = ap.parse_args(argv)
    try:
        files = write_report(args.paths, args.out, n_boot=args.n_boot, seed=args.seed,
                             reference=args.reference, zero_fail=args.forgetting_zero_fail,
                             include_unfinished=args.include_unfinished, mixed=args.mixed,
                             warn=lambda m: print(m, file=sys.stderr))
    except (FileNotFoundError, ValueError) as exc:
        print(f"memrl: {exc}", file=sys.stderr)
        return 2
    print(f"report written to {args.out}:")
    for name, path in files.items():
        print(f"  {name:<28} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
