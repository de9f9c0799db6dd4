"""Every memory method end to end through the command line on real ALFWorld games with the
embedded model's answers replayed from the cassette `baselines_e2e_methods` (tests/cassette.py;
a small sample: 2 games, 2 epochs, 2 steps). The methods run as one Hydra
multirun (one process, as a researcher's sweep over `memory=` runs), sharing a response cache;
Pass@k, which needs sampling, runs on its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cassette import Cassette
from data_paths import ALFWORLD
from memrl.core.rundir import RunDir


# memrl itself runs end to end in test_e2e_alfworld.py and mem0 in test_mem0.py (slow tests
# there check more than this one does), so they are not repeated here.
# the newer methods (docs/methods.md) run here with the embedded model; on the other benchmarks
# they run with a scripted model (test_new_methods_resume.py)
NEWER = ["memq", "reasoningbank", "expel", "awm"]
SWEPT = ["memrl_rag", "memrl_no_norm_simgate", "none", "rag", "reflection", "self_rag", "memp", *NEWER]
SAMPLED = "pass_at_k"  # independent attempts need sampling: its own run at temperature 0.7
METHODS = SWEPT + [SAMPLED]
COMMON = ["env.split=valid_seen", "env.max_tasks=2", "env.max_steps=2", "runner.epochs=2", "llm=local",
          "runner.progress=false"]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not ALFWORLD.is_dir(), reason=f"ALFWorld data not at {ALFWORLD}"),
]


def _memrl(args: list[str], cache: Path) -> None:
    env = dict(os.environ, ALFWORLD_DATA=str(ALFWORLD), MEMRL_CACHE_DIR=str(cache),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", LITELLM_LOCAL_MODEL_COST_MAP="True")
    out = subprocess.run([sys.executable, "-m", "memrl.cli", "run", *args], env=env, capture_output=True,
                         text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]


@pytest.fixture(scope="module")
def run_dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("methods")
    tape = Cassette("baselines_e2e_methods", root / "cache")
    tape.start()
    _memrl(["-m", f"memory={','.join(SWEPT)}", *COMMON, f"hydra.sweep.dir={root / 'sweep'}"], root / "cache")
    _memrl([f"memory={SAMPLED}", *COMMON, "llm.temperature=0.7", f"hydra.run.dir={root / SAMPLED}"],
           root / "cache")
    tape.finish()
    swept = {json.loads(card.read_text())["config"]["memory"]["name"]: card.parent
             for card in (root / "sweep").glob(f"*/{RunDir(root).card.name}")}
    assert sorted(swept) == sorted(SWEPT), swept  # one run directory per method (hydra.sweep.subdir)
    return {**swept, SAMPLED: root / SAMPLED}


@pytest.mark.parametrize("method", METHODS)
def test_method_end_to_end(run_dirs, method):
    run_dir = run_dirs[method]
    metrics = json.loads(RunDir(run_dir).metrics.read_text())
    assert metrics["n_tasks"] == 2 and metrics["epochs"] == 2
    recs = [json.loads(x) for x in RunDir(run_dir).episodes.read_text().splitlines()]
    assert len(recs) == 4 and not any(r["errors"] for r in recs)
    card = json.loads(RunDir(run_dir).card.read_text())
    assert card["config"]["memory"]["name"] == method and card["status"] == "finished"
    if method == "none":
        assert all(r["injected"] == [] for r in recs)
    # each newer method makes its own calls, every one under its purpose (docs/methods.md)
    purposes = [{c["purpose"] for c in r["model_calls"]} - {"act"} for r in recs]
    if method == "memq":
        assert all(p <= {"write-script", "write-reflection"} and p for p in purposes)
    if method in ("reasoningbank", "awm"):  # the model judges every episode
        assert all(f"{method}-judge" in p for p in purposes)
    if method == "expel":
        assert set().union(*purposes) <= {"expel-compare", "expel-success"}
