"""scripts/ci_times.py reads the times and counts of a `.ci/run` log: its own total line, or
for a run stopped by a failed pass before printing it, a wrapper's `rc=N wall=S` line; a log
without a pass's line is refused by name."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
ct = importlib.import_module("ci_times")

LOG = """setup took 107 s
2 failed, 1138 passed, 5 warnings in 1196.47s (0:19:56)
169 passed, 1140 deselected, 1 warning in 299.15s (0:04:59)
make test: parallel pass exit 1 in 1198 s, serial pass exit 0 in 303 s
"""


def test_a_finished_log_gives_every_figure():
    got = ct.read(LOG + "CI took 1612 s in all (exit 2)\n")
    assert got == {"setup_s": 107, "parallel_s": 1198, "serial_s": 303, "total_s": 1612,
                   "passed": 1307, "failed": 2, "skipped": 0}


def test_a_wrappers_wall_line_stands_in_for_the_total():
    assert ct.read(LOG + "rc=2 wall=1608\n")["total_s"] == 1608


def test_a_log_without_a_pass_is_refused():
    with pytest.raises(ValueError, match="parallel pass"):
        ct.read("setup took 3 s\nCI took 9 s in all\n")
