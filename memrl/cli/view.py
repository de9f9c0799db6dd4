"""`memrl view RUN_OR_SWEEP... [--out FILE] [--task ID]`: the MemRL page (memrl.view)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from memrl.core.errors import cli_exit
from memrl.report.inputs import FLAG_MIXED, FLAG_UNFINISHED
from memrl.view import write_page


def main(argv: Sequence[str] | None = None, prog: str = "memrl view") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories or folders holding them")
    ap.add_argument("--out", type=Path, default=None, help="the HTML file to write")
    ap.add_argument("--task", default=None, help="the task shown first in the task-memories panel")
    ap.add_argument(FLAG_UNFINISHED, dest="include_unfinished", action="store_true",
                    help="show runs that did not finish, marked [unfinished]; refused by default")
    ap.add_argument(FLAG_MIXED, dest="mixed", action="store_true",
                    help="show runs of one benchmark played on different task lists; refused by default")
    args = ap.parse_args(argv)
    def act() -> None:
        path = write_page(args.runs, args.out, task=args.task, include_unfinished=args.include_unfinished,
                          mixed=args.mixed, warn=lambda m: print(m, file=sys.stderr))
        print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB; open it in a browser)")

    return cli_exit(act, (FileNotFoundError, ValueError), 2, prefix="memrl")
