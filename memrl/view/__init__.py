"""`memrl view RUN_OR_FOLDER... [--out FILE] [--task ID]` (also `python -m memrl.view ...`):
one self-contained HTML page (memrl/view/page.py) for every run found under the paths; with
several runs (a sweep) the methods are overlaid. No server and no network: open the file
in any browser. Default output: `<run>/view.html` for one run, `memrl_view.html` in the
current folder for several. plotly is a dependency (pinned in pyproject.toml).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Sequence

from memrl.errors import cli_exit
from memrl.rundir import RunDir


def write_page(paths: Sequence[str | Path], out: str | Path | None = None, *,
               task: str | None = None) -> Path:
    """Write the page for the runs under `paths`; returns the file."""
    from memrl.view.data import RunView
    from memrl.view.page import build_page

    found = RunDir.find(paths)
    if not found:
        raise FileNotFoundError(f"no run directory ({RunDir.CARD} + {RunDir.EPISODES}) under "
                                + ", ".join(map(str, paths)))
    runs = [RunView.load(rd) for rd in found]
    if out is None:
        out = found[0].view if len(found) == 1 else Path("memrl_view.html")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(build_page(runs, task=task), encoding="utf-8")
    return out


def main(argv: Sequence[str] | None = None, prog: str = "memrl view") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories or folders holding them")
    ap.add_argument("--out", type=Path, default=None, help="the HTML file to write")
    ap.add_argument("--task", default=None, help="the task shown first in the task-memories panel")
    args = ap.parse_args(argv)
    def act() -> None:
        path = write_page(args.runs, args.out, task=args.task)
        print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB; open it in a browser)")

    return cli_exit(act, FileNotFoundError, 2, prefix="memrl")
