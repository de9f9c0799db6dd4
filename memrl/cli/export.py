"""`memrl export inspect RUN... [--out DIR]`: a run as Inspect AI eval logs (memrl.export).

    inspect RUN_OR_FOLDER... [--out DIR] [--cache FILE | --no-cache]
        Inspect AI eval logs (memrl/export/inspect_logs.py): one log per epoch (and per
        transfer evaluation), one sample per episode. Every run under the folders is
        exported; the logs go to DIR (default: each run's own `inspect/` folder). Browse them
        with `inspect view --log-dir DIR`. The model calls' prompts come from the response
        cache (default $MEMRL_CACHE_DIR/llm.sqlite) where it still holds them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from memrl.core.errors import cli_exit
from memrl.core.rundir import RunDir


def cmd_inspect(args: argparse.Namespace) -> int:
    from memrl.export.inspect_logs import export_run

    runs = RunDir.find(args.runs)
    if not runs:
        print(f"memrl: no run directory ({RunDir.CARD} + {RunDir.EPISODES}) under "
              + ", ".join(map(str, args.runs)), file=sys.stderr)
        return 2
    cache = None
    if not args.no_cache:
        from memrl.core.cachedir import LLM_CACHE, default_cache_dir
        from memrl.llm.response_cache import ResponseCache

        path = args.cache or default_cache_dir() / LLM_CACHE
        if path.is_file():
            cache = ResponseCache(path)
        else:
            print(f"note: no response cache at {path}: the logs carry no model-call events")
    def act() -> None:
        for rd in runs:
            out = args.out if args.out is not None else rd.inspect
            paths = export_run(rd, out, cache=cache)
            print(f"{rd}: {len(paths)} log{'s' if len(paths) != 1 else ''} in {out}")

    try:
        code = cli_exit(act, RuntimeError, 2, prefix="memrl")
    finally:
        if cache is not None:
            cache.close()
    if code:
        return code
    shown = args.out if args.out is not None else "<run>/" + RunDir.INSPECT
    print(f"browse: inspect view --log-dir {shown}")
    return 0


def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    sub = p.add_subparsers(dest="cmd", required=True)
    sp = sub.add_parser("inspect", help="Inspect AI eval logs")
    sp.add_argument("runs", nargs="+", type=Path, help="run directories or folders holding them")
    sp.add_argument("--out", type=Path, default=None, help="where the logs go (default <run>/inspect)")
    sp.add_argument("--cache", type=Path, default=None, help="the response cache file")
    sp.add_argument("--no-cache", action="store_true", help="no model-call events")
    sp.set_defaults(fn=cmd_inspect)
    return p


def main(argv: Sequence[str] | None = None, prog: str = "memrl export") -> int:
    args = parser(prog).parse_args(argv)
    return int(args.fn(args))
