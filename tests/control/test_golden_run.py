"""Behaviour kept across restructurings: small full runs (tests/golden_run.py) give the same
records, cache keys, bank, bank-update log, memory texts, metrics, launch log and run-card
config as the golden file made before the restructuring, byte for byte once wall-clock
fields are left out. A deliberate change of behaviour regenerates the file
(`python tests/golden_run.py --write`) in the commit that makes it, and says why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from golden_run import GOLDEN, RUNS, produce

pytestmark = pytest.mark.slow


def differences(want: Any, got: Any, path: str = "") -> list[str]:
    if isinstance(want, dict) and isinstance(got, dict):
        out: list[str] = []
        for k in sorted(set(want) | set(got)):
            if k not in got or k not in want:
                out.append(f"{path}.{k}: {'missing now' if k not in got else 'new'}")
            else:
                out += differences(want[k], got[k], f"{path}.{k}")
        return out
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return [d for i, (a, b) in enumerate(zip(want, got)) for d in differences(a, b, f"{path}[{i}]")]
    return [] if want == got else [f"{path}: {json.dumps(want)[:200]} then, {json.dumps(got)[:200]} now"]


def test_small_runs_give_the_golden_outputs(tmp_path: Path) -> None:
    want = json.loads(GOLDEN.read_text())
    assert sorted(want) == sorted(RUNS)
    got = json.loads(json.dumps(produce(tmp_path), sort_keys=True))  # the file's own JSON round trip
    diffs = differences(want, got)
    assert not diffs, f"{len(diffs)} differences from {GOLDEN.name}:\n" + "\n".join(diffs[:30])


def test_the_comparison_finds_a_changed_value() -> None:
    want = {"a": [{"q": 0.3, "id": "e001:t0"}], "b": 1}
    assert differences(want, {"a": [{"q": 0.3, "id": "e001:t0"}], "b": 1}) == []
    assert differences(want, {"a": [{"q": 0.31, "id": "e001:t0"}], "b": 1}) == [".a[0].q: 0.3 then, 0.31 now"]
    assert differences(want, {"a": [{"q": 0.3}], "c": 1}) == [".a[0].id: missing now", ".b: missing now", ".c: new"]
