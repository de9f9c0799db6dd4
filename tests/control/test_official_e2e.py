"""Each official-code preset (`experiment=<bench>_official`) end to end through the command
line on its real environment, with the embedded model's answers replayed from each test's
cassette (tests/cassette.py: recorded from Gemma 3 270M via llama.cpp; the preflight still
calls the model) and MiniLM: two tasks, two epochs, few steps. What is checked is the official retrieval path
(intent-key pools, the fixed similarity statistics, the official batch sizes, the records of
what each retrieval's pool held), not success: the model is far too weak for that.

With two tasks and the official batch sizes (ALFWorld/HLE 32, BigCodeBench 25, Lifelong 5),
each epoch is one batch: epoch 1 retrieves from an empty bank, epoch 2 from the two memories
of epoch 1, and each task's own intent key (similarity 1, above the 0.5 gate) is in its pool.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memrl.core.rundir import RunDir
from memory_state import snapshot
from data_paths import ALFWORLD, BCB_HARD_TRAIN, LIFELONG

ROOT = Path(__file__).resolve().parents[2]
BCB = BCB_HARD_TRAIN
HLE = ROOT / "tests" / "fixtures" / "hle" / "hle_fixture.jsonl"

LOCAL = ["llm=local", "embedder=minilm", "runner.epochs=2", "runner.progress=false",
         "memory.writer.max_tokens=32", "memory.writer.max_trajectory_chars=600"]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                       reason="llama_cpp (llama-cpp-python, the `local` extra) is not installed"),
]


def run(args: list[str], tmp: Path, **env: str) -> tuple[subprocess.CompletedProcess, Path]:
    run_dir = tmp / "run"
    environ = dict(os.environ, MEMRL_CACHE_DIR=str(tmp / "cache"), HF_HUB_OFFLINE="1",
                   TRANSFORMERS_OFFLINE="1", LITELLM_LOCAL_MODEL_COST_MAP="True", **env)
    out = subprocess.run([sys.executable, "-m", "memrl.cli", "run", *args, *LOCAL, f"hydra.run.dir={run_dir}"],
                         env=environ, capture_output=True, text=True, timeout=1500, cwd=ROOT)
    return out, run_dir


def check_official_run(out: subprocess.CompletedProcess, run_dir: Path, env_name: str) -> list[dict]:
    assert out.returncode == 0, out.stderr[-3000:]
    rd = RunDir(run_dir)
    card = json.loads(rd.card.read_text())
    assert card["status"] == "finished" and card["model"].startswith("local/")
    assert card["config"]["env"]["name"] == env_name
    memory = card["config"]["memory"]
    assert memory["pool_by_intent"] is True and memory["phase_a_ties"] == "oldest"
    assert memory["delta"] == 0.5 and memory["z_clip"] == 3.0 and memory["sim_stats"]
    assert card["config"]["runner"]["batch_size"] >= 5
    recs = [json.loads(x) for x in rd.episodes.read_text().splitlines()]
    tasks = sorted({r["task_id"] for r in recs})
    assert len(tasks) == 2 and len(recs) == 4 and {r["epoch"] for r in recs} == {1, 2}
    for r in recs:
        pool = r["info"]["retrieval"]["pool"]
        if r["epoch"] == 1:  # one batch per epoch: the bank is empty when epoch 1 retrieves
            assert pool == 0 and r["injected"] == []
        else:  # the task's own key (sim 1) is in the pool; with two tasks all of it is injected
            ids = [m["id"] for m in r["injected"]]
            assert f"e001:{r['task_id']}" in ids and len(ids) == pool <= 2
            assert r["info"]["retrieval"]["own_only"] == (ids == [f"e001:{r['task_id']}"])
            assert all(m["id"].startswith("e001:") for m in r["injected"])
    metrics = json.loads(rd.metrics.read_text())
    assert metrics["n_tasks"] == 2 and metrics["epochs"] == 2
    assert metrics["retrieval"]["1"] == {"retrievals": 2, "empty": 2, "mean_pool": 0.0, "own_only_share": None}
    second = metrics["retrieval"]["2"]
    assert second["empty"] == 0 and 1.0 <= second["mean_pool"] <= 2.0
    assert metrics["forgetting_zero_fail"] == "zero" and "forgetting_zero_fail_epochs" in metrics
    bank = bank_of(run_dir)
    assert len(bank) == 4  # errored episodes count (official): every episode wrote a memory
    intents = {r["task_id"]: r["intent"] for r in recs}
    for t in tasks:  # epoch 2's memory joined the task's own key (cos 1 >= the dedup threshold)
        assert bank[f"e002:{t}"]["intent"] == bank[f"e001:{t}"]["intent"] == intents[t]
    return recs


def bank_of(run_dir: Path) -> dict[str, dict]:
    from memrl.memory.bank import ChromaBank

    return {e["id"]: e for e in snapshot(ChromaBank(RunDir(run_dir).bank))}


@pytest.mark.skipif(not ALFWORLD.is_dir(), reason=f"ALFWorld data not at {ALFWORLD}")
def test_alfworld_official(tmp_path, cassette):
    # the official 4,096-token budget and its two-line reply (no stop sequence) would have the
    # embedded model write up to 4,096 tokens a step: a short budget keeps the test quick
    out, run_dir = run(["experiment=alfworld_official", "env.split=valid_seen", "env.max_tasks=2",
                        "env.max_steps=2", "env.max_tokens=48"], tmp_path, ALFWORLD_DATA=str(ALFWORLD))
    recs = check_official_run(out, run_dir, "alfworld")
    # the official retrieval text: the first observation (room description + task)
    assert all("Your task is to: " in r["intent"] and r["intent"].index("Your task is to") > 0 for r in recs)


@pytest.mark.skipif(not HLE.is_file(), reason=f"no HLE fixture at {HLE}")
def test_hle_official(tmp_path, cassette):
    out, run_dir = run(["experiment=hle_official", "env=hle", f"env.data_path={HLE}", "env.modality=text",
                        "env.max_tasks=2", "env.max_tokens=32", "env.judge.backend=local",
                        "env.judge.model=gemma3-270m-q4_k_m", "env.judge.max_tokens=48"], tmp_path)
    recs = check_official_run(out, run_dir, "hle")
    bank = bank_of(run_dir)
    for r in recs:  # the official HLE runner: a new memory's Q starts at 1 if solved, else 0
        if r["epoch"] == 2:
            assert bank[f"e002:{r['task_id']}"]["q"] == (1.0 if r["success"] else 0.0)


@pytest.mark.skipif(not BCB.is_file(), reason=f"BigCodeBench data not at {BCB}")
def test_bcb_official(tmp_path, cassette):
    from memrl_envs.sandbox import bwrap_available

    why = bwrap_available()
    if why is not None:
        pytest.skip(f"no sandbox here: {why}")
    if importlib.util.find_spec("bigcodebench") is None:
        pytest.skip("bigcodebench (the checker) is not installed")
    out, run_dir = run(["experiment=bcb_official", f"env.data_path={BCB}", "env.part=all",
                        "env.task_ids=[BigCodeBench/19,BigCodeBench/854]", "env.time_limit_s=20",
                        "env.max_tokens=96"], tmp_path)
    recs = check_official_run(out, run_dir, "bigcodebench")
    # the official retrieval text: the whole instruct prompt, code header included
    assert all("You should write self-contained code" in r["intent"] for r in recs)
    assert all(r["outcome_detail"] in ("pass", "fail", "timeout", "syntax_error") for r in recs)


def lifelong_os_rootfs() -> Path:
    """The Lifelong-OS root file system, or a skip naming what is missing (data, the overlay
    sandbox, the built root file system)."""
    from memrl_envs.lifelong_os.rootfs import is_built, rootfs_path
    from memrl_envs.lifelong_os.shell import overlay_available

    if not (LIFELONG / "os_interaction_train.json").is_file():
        pytest.skip(f"no Lifelong data at {LIFELONG}")
    why = overlay_available()
    if why is not None:
        pytest.skip(f"no Lifelong-OS sandbox here: {why}")
    rootfs = rootfs_path()
    if not is_built(rootfs):
        pytest.skip(f"no root file system at {rootfs} (make rootfs)")
    return rootfs


def test_llb_os_official(tmp_path, cassette):
    rootfs = lifelong_os_rootfs()
    # ../shared/data has the train file only (the official preset merges the val file beside it)
    out, run_dir = run(["experiment=llb_os_official", "env.max_tasks=2", "env.max_steps=2",
                        "env.max_tokens=64", "env.val_path=null"], tmp_path, LIFELONG_DATA=str(LIFELONG),
                       MEMRL_ROOTFS_DIR=str(rootfs.parent))
    recs = check_official_run(out, run_dir, "lifelong_os")
    bank = bank_of(run_dir)
    # Lifelong official: Q_init 0.5, failure reward 0 (α 0.3): one update takes 0.5 to 0.35
    # (failure) or 0.65 (success); a memory injected into both tasks gets two, in task order
    assert all(m["q"] == 0.5 for r in recs if r["epoch"] == 2 for m in r["injected"])
    assert all(e["q"] == 0.5 for e in bank.values() if not e["visits"])
    assert {round(e["q"], 6) for e in bank.values() if e["visits"]} <= {0.35, 0.65, 0.245, 0.545, 0.455, 0.755}


@pytest.mark.skipif(not (LIFELONG / "db_train.json").is_file(), reason=f"no Lifelong DB data at {LIFELONG}")
def test_llb_db_official(tmp_path, cassette):
    from memrl_envs.lifelong_db.server import MariaDBServer, find_binary

    if find_binary("mariadbd", "mysqld") is None:
        pytest.skip("no MariaDB server binary (apt-get install -y mariadb-server)")
    with MariaDBServer(tmp_path / "mariadb") as server:
        out, run_dir = run(["experiment=llb_db_official", "env.max_tasks=2", "env.max_steps=2", "env.val_path=null",
                            "env.prompt_rows=2", "env.max_tokens=48", "env.observation_max_chars=300",
                            f"env.server_dir={server.base_dir}"], tmp_path, LIFELONG_DATA=str(LIFELONG))
        check_official_run(out, run_dir, "lifelong_db")
