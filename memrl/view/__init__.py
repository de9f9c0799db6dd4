"""The MemRL page of `memrl view RUN_OR_FOLDER... [--out FILE] [--task ID]` (memrl/cli/view.py):
one self-contained HTML page (memrl/view/page.py) for every run found under the paths; with
several runs (a sweep) the methods are overlaid. No server and no network: open the file
in any browser (for a long run, with the folder `<page>_files/` beside it, which holds the
task panel's memory texts: memrl/view/tasks.py). Default output: `<run>/view.html` for one run, `memrl_view.html` in the
current folder for several. plotly is a dependency (pinned in pyproject.toml).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from memrl.core.rundir import RunDir


def write_page(paths: Sequence[str | Path], out: str | Path | None = None, *,
               task: str | None = None) -> Path:
    """Write the page for the runs under `paths`; returns the file."""
    from memrl.view.data import RunView
    from memrl.view.page import build_page
    from memrl.view.tasks import SideFiles

    found = RunDir.find(paths)
    if not found:
        raise FileNotFoundError(f"no run directory ({RunDir.CARD} + {RunDir.EPISODES}) under "
                                + ", ".join(map(str, paths)))
    runs = [RunView.load(rd) for rd in found]
    if out is None:
        out = found[0].view if len(found) == 1 else Path("memrl_view.html")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(build_page(runs, task=task, side=SideFiles(out)), encoding="utf-8")
    return out
