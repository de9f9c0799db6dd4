"""`memrl metrics RUN_DIR`: compute a run's metrics from its episode records, write
metrics.json (and the plots), print them."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from memrl.metrics.compute import ZERO_FAIL_READINGS, write_metrics
from memrl.report.plots import write_run_plots


def main(argv: Sequence[str] | None = None, prog: str = "memrl metrics") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--no-plots", action="store_true", help="write metrics.json only")
    ap.add_argument("--allow-missing", action="store_true", help="count missing (task, epoch) cells as failures")
    ap.add_argument("--forgetting-zero-fail", choices=ZERO_FAIL_READINGS, default="zero",
                    help="an epoch with no failure (FR = 0/0): count it as 0 (default) or skip it")
    args = ap.parse_args(argv)
    try:
        metrics = write_metrics(args.run_dir, allow_missing=args.allow_missing, zero_fail=args.forgetting_zero_fail)
        if not args.no_plots:
            write_run_plots(args.run_dir, args.forgetting_zero_fail)
    except (FileNotFoundError, ValueError) as exc:
        print(f"memrl metrics: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(metrics, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
