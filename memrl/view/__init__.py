"""The MemRL page of `memrl view RUN_OR_FOLDER... [--out FILE] [--task ID]` (memrl/cli/view.py):
one self-contained HTML page (memrl/view/page.py) for every run found under the paths; with
several runs (a sweep) the methods are overlaid. No server and no network: open the file
in any browser (for a long run, with the folder `<page>_files/` beside it, which holds the
task panel's memory texts: memrl/view/tasks.py). Default output: `<run>/view.html` for one run, `memrl_view.html` in the
current folder for several. plotly is a dependency (pinned in pyproject.toml).

What it reads is what the report reads (memrl.report.inputs): a path that is no run, an
unfinished run (`--include-unfinished` shows it, marked), runs on different task lists
(`--mixed`) are refused with `memrl: ...`, exit 2; a run that repeats another seed's episodes
is left out of the charts and named (memrl.view.labels).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence


def write_page(paths: Sequence[str | Path], out: str | Path | None = None, *,
               task: str | None = None, include_unfinished: bool = False, mixed: bool = False,
               warn: Callable[[str], None] = print) -> Path:
    """Write the page for the runs under `paths`; returns the file. Raises
    memrl.report.inputs.Refused (a ValueError) naming every input it will not read."""
    from memrl.report.inputs import admit, check_runs
    from memrl.view.data import RunView
    from memrl.view.labels import assign_labels, drop_copies
    from memrl.view.page import build_page
    from memrl.view.tasks import SideFiles

    found = admit(paths, include_unfinished=include_unfinished, warn=warn).runs
    runs = [RunView.load(rd) for rd in found]
    check_runs(runs, include_unfinished=include_unfinished, mixed=mixed, warn=warn)
    runs, copies = drop_copies(runs)
    for c in copies:
        warn(f"warning: {c.run.path}: seed {c.run.seed} repeats seed {c.of.seed}'s episodes "
             f"({c.reason}): not an independent replicate; left out of the charts")
    assign_labels(runs)
    if out is None:
        out = found[0].view if len(found) == 1 else Path("memrl_view.html")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(build_page(runs, task=task, copies=copies, side=SideFiles(out)), encoding="utf-8")
    return out
