"""`memrl keys`: the config keys whose schema marks them as not changing results
(memrl/config/keys.py), or with --hydra the list configs/config.yaml must hold as
`hydra.job.config.override_dirname.exclude_keys`."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from memrl.config import keys


def main(argv: Sequence[str] | None = None, prog: str = "memrl keys") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("--hydra", action="store_true",
                    help="print the exclude_keys block for configs/config.yaml")
    args = ap.parse_args(argv)
    problems = keys.conflicts()
    if problems:
        print("memrl: schemas of one section mark these keys differently:\n  "
              + "\n  ".join(problems), file=sys.stderr)
        return 2
    if args.hydra:
        print("        exclude_keys:")
        for key in keys.hydra_exclude_keys():
            print(f"          - {key}")
    else:
        print(keys.describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())
