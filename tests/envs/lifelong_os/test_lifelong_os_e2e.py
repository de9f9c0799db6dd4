"""End to end on real Lifelong-OS tasks with the embedded model (Gemma 3 270M via llama.cpp)
and the MiniLM embedder, through the real command line: MemRL for two epochs, every episode in
its own throwaway system. The model is weak; the test asserts the pipeline (records, the
sandboxed commands' outputs, memories injected in epoch 2, metrics), not success."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memrl.core.rundir import RunDir
from memrl_envs.lifelong_os.rootfs import RootfsError, build_rootfs, is_built, rootfs_path
from memrl_envs.lifelong_os.shell import overlay_available
from data_paths import LIFELONG


_WHY = overlay_available()

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (LIFELONG / "os_interaction_train.json").is_file(),
                       reason=f"Lifelong data not at {LIFELONG}"),
    pytest.mark.skipif(_WHY is not None, reason=f"no Lifelong-OS sandbox here: {_WHY}"),
]


@pytest.fixture(scope="module")
def rootfs() -> Path:
    path = rootfs_path()
    if is_built(path):
        return path
    if shutil.which("debootstrap") is None and not Path("/usr/sbin/debootstrap").exists():
        pytest.skip(f"no root file system at {path} and debootstrap is not installed (make rootfs)")
    try:
        return build_rootfs()
    except RootfsError as exc:
        pytest.fail(f"building the root file system failed: {exc}")


def test_memrl_on_os_tasks_two_epochs(tmp_path, rootfs):
    run_dir = tmp_path / "run"
    env = dict(os.environ, LIFELONG_DATA=str(LIFELONG), MEMRL_CACHE_DIR=str(tmp_path / "cache"),
               MEMRL_ROOTFS_DIR=str(rootfs.parent), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               LITELLM_LOCAL_MODEL_COST_MAP="True")
    args = ["env=lifelong_os", "llm=local", "embedder=minilm", "memory.delta=auto", "env.max_tasks=3",
            "env.max_steps=3", "env.max_tokens=96", "runner.epochs=2", "runner.progress=false",
            f"hydra.run.dir={run_dir}"]
    out = subprocess.run([sys.executable, "-m", "memrl.cli", "run", *args], env=env, capture_output=True, text=True,
                         timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    metrics = json.loads(RunDir(run_dir).metrics.read_text())
    assert metrics["n_tasks"] == 3 and metrics["epochs"] == 2 and len(metrics["sr"]) == 2
    assert metrics["errored_episodes"] == 0
    recs = [json.loads(x) for x in RunDir(run_dir).episodes.read_text().splitlines()]
    assert len(recs) == 6 and {r["task_id"] for r in recs} == {"os-0", "os-1", "os-2"}
    outcomes = {"success", "failed", "eval_timeout", "llm_error"}
    for r in recs:
        assert r["errors"] == [] and r["outcome_detail"] in outcomes, r["info"]
        assert 1 <= r["steps"] <= 3 and r["transcript"] and r["llm_calls"] >= 2  # actions + experience writer
        assert r["info"]["init_exit"] == 0 and r["info"]["eval_exit"] is not None  # both scripts ran
        assert r["success"] == (r["info"]["eval_exit"] == 0)
    ran = [s for r in recs for s in r["transcript"]
           if s["action"] != "finish" and not s["action"].startswith("[invalid]")]
    assert ran and all(s["observation"] for s in ran)  # commands ran in the sandbox and answered
    # epoch 2 sees epoch 1's memories (the same intents are above the auto δ)
    assert any(r["injected"] for r in recs if r["epoch"] == 2)
    card = json.loads(RunDir(run_dir).card.read_text())
    assert card["status"] == "finished" and card["model"].startswith("local/") and card["data_fingerprint"]
    assert card["config"]["env"]["name"] == "lifelong_os"
    sandbox = card["sessions"][-1]["sandbox"]  # what the episodes' sandboxes held, or why not
    assert sandbox["mode"].startswith("root file system") and "/proc/sys" in sandbox["kernel_interfaces"]["read_only"]
    assert all((cap in sandbox["enforced"]) != (cap in sandbox["missing"]) for cap in ("memory", "pids", "disk"))
