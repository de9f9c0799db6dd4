"""The embedded model's prefix reuse, before and after, on ALFWorld prompts built from a teacher
run (memrl.demo.bench): prompt and decode tokens/s with reuse off and on, and whether the
answers are identical.

    .venv/bin/python scripts/bench_local_prefix.py runs/demo/teacher --prompts 24 [OVERRIDES...]

OVERRIDES are config overrides on top of `experiment=demo` (e.g. `llm=local_smollm2`,
`llm.n_threads=2`). Exit status 1 if any answer differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from memrl.demo.bench import bench_prefix_reuse
from memrl.demo.pipeline import BASE


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("teacher", type=Path, help="a teacher run (python -m memrl.cli teach)")
    ap.add_argument("--prompts", type=int, default=24)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)
    res = bench_prefix_reuse(args.teacher, BASE + args.overrides, args.prompts)
    print(json.dumps(res, indent=2))
    return 0 if res.get("identical", True) else 1


if __name__ == "__main__":
    sys.exit(main())
