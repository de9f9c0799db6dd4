"""End to end on real BigCodeBench-Hard tasks through the command line: a MemRL run with the
embedded model (Gemma 3 270M) and MiniLM for two epochs, and the canonical oracle. The three
tasks need only the standard library, so the eval extra is not required."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memrl.core.rundir import RunDir
from memrl_envs.sandbox import bwrap_available
from data_paths import BCB_HARD_TRAIN

DATA = BCB_HARD_TRAIN
TASKS = "[BigCodeBench/19,BigCodeBench/854,BigCodeBench/928]"
_WHY = bwrap_available()

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not DATA.is_file(), reason=f"BigCodeBench data not at {DATA}"),
    pytest.mark.skipif(_WHY is not None, reason=f"no sandbox here: {_WHY}"),
    pytest.mark.skipif(importlib.util.find_spec("bigcodebench") is None,
                       reason="bigcodebench (the checker) is not installed"),
]
BASE = ["env=bigcodebench", f"env.data_path={DATA}", "env.part=all", f"env.task_ids={TASKS}",
        "env.max_tasks=3", "env.time_limit_s=20", "runner.progress=false"]


def run(args: list[str], tmp: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, MEMRL_CACHE_DIR=str(tmp / "cache"), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", LITELLM_LOCAL_MODEL_COST_MAP="True")
    return subprocess.run([sys.executable, "-m", "memrl.cli", "run", *args], env=env, capture_output=True,
                          text=True, timeout=1200)


def records(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in RunDir(run_dir).episodes.read_text().splitlines()]


def test_memrl_two_epochs_with_the_embedded_model(tmp_path):
    run_dir = tmp_path / "memrl"
    out = run(BASE + ["llm=local", "embedder=minilm", "memory.delta=auto", "runner.epochs=2",
                      "env.max_tokens=96", "memory.writer.max_trajectory_chars=800",
                      f"hydra.run.dir={run_dir}"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    recs = records(run_dir)
    assert len(recs) == 6 and {r["epoch"] for r in recs} == {1, 2}
    assert {r["task_id"] for r in recs} == {"BigCodeBench/19", "BigCodeBench/854", "BigCodeBench/928"}
    for r in recs:
        # the model's code was judged by the real tests: a benchmark outcome, never a harness error
        assert r["outcome_detail"] in ("pass", "fail", "timeout", "syntax_error"), r["info"]
        assert r["success"] == (r["outcome_detail"] == "pass")
        assert r["steps"] == 1 and r["transcript"][0]["observation"].startswith("Outcome: ")
        assert r["llm_calls"] >= 2  # the code plus the experience writer
        assert not r["errors"]
    # epoch 2 retrieves what epoch 1 wrote: a task's own earlier attempt is among its memories
    second = [r for r in recs if r["epoch"] == 2]
    assert any(f"e001:{r['task_id']}" in [m["id"] for m in r["injected"]] for r in second)
    assert not any(m["id"].startswith("e002:") for r in recs if r["epoch"] == 1 for m in r["injected"])
    assert all(r["info"]["memories_injected"] == len(r["injected"]) for r in recs)
    metrics = json.loads(RunDir(run_dir).metrics.read_text())
    assert metrics["n_tasks"] == 3 and metrics["epochs"] == 2 and len(metrics["sr"]) == 2
    assert metrics["sr"][0] == sum(r["success"] for r in recs if r["epoch"] == 1) / 3
    card = json.loads(RunDir(run_dir).card.read_text())
    assert card["status"] == "finished" and card["model"].startswith("local/")


def test_canonical_oracle_through_the_command_line(tmp_path):
    run_dir = tmp_path / "canonical"
    out = run(BASE + ["agent=canonical", "memory=none", "runner.epochs=1", f"hydra.run.dir={run_dir}"],
              tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    recs = records(run_dir)
    assert [r["outcome_detail"] for r in recs] == ["pass"] * 3
    assert all(r["llm_calls"] == 0 for r in recs)
    assert json.loads(RunDir(run_dir).metrics.read_text())["sr"] == [1.0]
    card = json.loads(RunDir(run_dir).card.read_text())
    assert card["model"] is None
    sandbox = card["sessions"][-1]["sandbox"]  # what the sandboxes held, or why not
    assert sandbox["mode"].startswith("host-root") and sandbox["parallel"]["granted"] >= 1
    assert all((cap in sandbox["enforced"]) != (cap in sandbox["missing"]) for cap in ("memory", "pids", "disk"))
