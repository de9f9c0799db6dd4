"""`memrl check` names every model call of the newer methods (docs/methods.md) with its budget,
before anything runs: the preflight's probes (`MemoryModule.model_probes`) on the tiny benchmark
with a scripted model."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tiny_runs import FIXTURES, environ

PURPOSES = {
    "memq": {"write-reflection": 160},
    "reasoningbank": {"reasoningbank-judge": 64, "reasoningbank-extract-success": 320,
                      "reasoningbank-extract-failure": 320},
    "expel": {"expel-compare": 200, "expel-success": 200},
    "awm": {"awm-judge": 64, "awm-induce": 320},
}


@pytest.mark.parametrize("method", sorted(PURPOSES))
def test_check_lists_each_purpose_with_its_budget(tmp_path, method):
    out = subprocess.run([sys.executable, "-m", "memrl.cli", "check", f"memory={method}", "env=tiny",
                          "env.retrieval.delta=0.0", "embedder=hashing", "llm=scripted",
                          "llm.script=method_replies:tiny", f"hydra.searchpath=[file://{FIXTURES}]"],
                         cwd=tmp_path, env=environ(tmp_path), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {m.group(1): int(m.group(2)) for m in re.finditer(r"^llm\s+(\S+)\s+\S+\s+(\d+)\s", out.stdout, re.M)}
    assert rows == PURPOSES[method], out.stdout
