"""The report tests' runs: a folder of fake run directories, one per (method, seed) of
test_report.MATRICES (`runs_dir`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_report import MATRICES, write_run

from memrl.core.rundir import RunDir


@pytest.fixture()
def runs_dir(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    for (memory, seed), S in MATRICES.items():
        write_run(root / "alfworld" / memory / f"seed={seed}", memory=memory, seed=seed, S=S)
    (root / "not_a_run").mkdir()
    RunDir(root / "not_a_run").card.write_text("{}")  # no episodes.jsonl: not a run
    return root
