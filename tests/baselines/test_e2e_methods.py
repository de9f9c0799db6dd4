"""Every memory method end to end through the command line on real ALFWorld games with the
embedded model (a small sample: 2 games, 2 epochs, 2 steps)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memrl.core.rundir import RunDir

ALFWORLD = Path(__file__).resolve().parents[3] / "shared" / "data" / "alfworld"

# memrl itself runs end to end in test_e2e_alfworld.py and mem0 in test_mem0.py (slow tests
# there check more than this one does), so they are not repeated here.
METHODS = ["memrl_rag", "memrl_no_norm_simgate", "none", "pass_at_k", "rag", "reflection",
           "self_rag", "memp"]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not ALFWORLD.is_dir(), reason=f"ALFWorld data not at {ALFWORLD}"),
]


@pytest.mark.parametrize("method", METHODS)
def test_method_end_to_end(tmp_path, method):
    env = dict(os.environ, ALFWORLD_DATA=str(ALFWORLD), MEMRL_CACHE_DIR=str(tmp_path / "cache"),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", LITELLM_LOCAL_MODEL_COST_MAP="True")
    run_dir = tmp_path / "run"
    args = [f"memory={method}", "env.split=valid_seen", "env.max_tasks=2", "env.max_steps=2",
            "runner.epochs=2", "llm=local", "runner.progress=false", f"hydra.run.dir={run_dir}"]
    if method == "pass_at_k":
        args.append("llm.temperature=0.7")  # independent attempts need sampling
    out = subprocess.run([sys.executable, "-m", "memrl.cli", "run", *args], env=env, capture_output=True,
                         text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    metrics = json.loads(RunDir(run_dir).metrics.read_text())
    assert metrics["n_tasks"] == 2 and metrics["epochs"] == 2
    recs = [json.loads(x) for x in RunDir(run_dir).episodes.read_text().splitlines()]
    assert len(recs) == 4 and not any(r["errors"] for r in recs)
    card = json.loads(RunDir(run_dir).card.read_text())
    assert card["config"]["memory"]["name"] == method and card["status"] == "finished"
    if method == "none":
        assert all(r["injected"] == [] for r in recs)
