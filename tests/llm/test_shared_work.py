"""Shared work across the methods of a sweep: with an empty bank every memory method's prompts
are the no-memory prompts, so a sweep run one method after another on one response cache
pays for the first batch once (cache hits in the later methods' run cards).

A real sweep: `python -m memrl.cli run -m memory=none,memrl,rag,reflection` on ALFWorld games,
the fault server (no faults) as the model through litellm, one shared cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memrl.core.records import iter_jsonl
from memrl.core.rundir import RunDir
from memrl.testing.fault_server import FaultPlan, FaultServer
from data_paths import ALFWORLD


KEY_ENV = "MEMRL_SHARED_TEST_KEY"
METHODS = ("none", "memrl", "rag", "reflection")


def _records(run_dir: Path) -> list[dict]:
    return list(iter_jsonl(RunDir(run_dir).episodes))


@pytest.mark.slow
@pytest.mark.skipif(not ALFWORLD.is_dir(), reason=f"ALFWorld data not at {ALFWORLD}")
def test_a_sweep_pays_for_the_empty_bank_batch_once(tmp_path):
    n_tasks, steps = 3, 5
    with FaultServer(FaultPlan()) as server:
        args = ["-m", f"memory={','.join(METHODS)}", "env=alfworld", "env.split=valid_seen",
                f"env.max_tasks={n_tasks}", f"env.max_steps={steps}", "runner.epochs=1",
                f"runner.batch_size={n_tasks}", "runner.progress=false", "embedder=hashing",
                "llm=openai_compatible", "llm.model=openai/fault", f"llm.api_base={server.api_base}",
                f"llm.api_key_env={KEY_ENV}", f"hydra.sweep.dir={tmp_path / 'sweep'}",
                "hydra.sweep.subdir=${memory.name}"]
        env = dict(os.environ, ALFWORLD_DATA=str(ALFWORLD), MEMRL_CACHE_DIR=str(tmp_path / "cache"),
                   HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", LITELLM_LOCAL_MODEL_COST_MAP="True",
                   **{KEY_ENV: "unused"})
        proc = subprocess.run([sys.executable, "-m", "memrl.cli", "run", *args], env=env,
                              capture_output=True, text=True, timeout=900)
        served = server.counts()
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = {m: tmp_path / "sweep" / m for m in METHODS}
    base = {r["task_id"]: r for r in _records(runs["none"])}
    assert len(base) == n_tasks and all(r["cache_hits"] == 0 and r["llm_calls"] >= 1 for r in base.values())
    paid = 0
    for method in METHODS:
        card = json.loads(RunDir(runs[method]).card.read_text())
        totals = card["llm_totals"]
        paid += totals["billed_replies"]  # every reply the server sent, the preflight's included
        if method == "none":
            continue
        # the whole first batch ran on an empty bank: every act call the no-memory run paid
        # for is a cache hit here (a method's own writer calls come on top)
        for r in _records(runs[method]):
            assert r["injected"] == []
            assert r["cache_hits"] >= base[r["task_id"]]["llm_calls"], (method, r["task_id"])
        assert totals["cache_hits"] >= sum(r["llm_calls"] for r in base.values())
    # the server answered each paid call once, and no more than the runs paid for
    assert served["requests"] == paid
