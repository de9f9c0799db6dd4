"""Heaviest test files first (loaded by tests/conftest.py).

`make test`'s parallel pass hands whole files to pytest-xdist's workers as they free up
(`--dist loadfile`), in collection order; a heavy file collected last leaves one worker
running alone at the end. Files are therefore ordered by their measured time
(`tests/durations.json`: seconds per file, the sum of its tests' setup, call and teardown),
heaviest first; within a file the order stays as written, and a file not in the list keeps
its place after the listed ones.

`MEMRL_RECORD_DURATIONS=1 pytest ...` writes the list again from the run it ends (every
file that ran; the others keep their old figure).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

DURATIONS = Path(__file__).resolve().parent / "durations.json"
_RECORD = os.environ.get("MEMRL_RECORD_DURATIONS", "").strip() not in ("", "0")


def _weights() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    except (OSError, ValueError):
        return {}


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(session, config, items) -> None:
    weights = _weights()
    if weights:
        items.sort(key=lambda item: -weights.get(file_of(item.nodeid), 0.0))  # stable


def pytest_terminal_summary(terminalreporter) -> None:
    if not _RECORD:
        return
    per_file: dict[str, float] = defaultdict(float)
    for reports in terminalreporter.stats.values():
        for rep in reports:
            nodeid = getattr(rep, "nodeid", "")
            if "::" in nodeid and getattr(rep, "when", None) in ("setup", "call", "teardown"):
                per_file[file_of(nodeid)] += float(getattr(rep, "duration", 0.0) or 0.0)
    merged = {**_weights(), **{k: round(v, 1) for k, v in per_file.items()}}
    DURATIONS.write_text(json.dumps(dict(sorted(merged.items(), key=lambda kv: -kv[1])), indent=1) + "\n")
    terminalreporter.write_line(f"durations: {len(per_file)} files written to {DURATIONS}")
