"""End to end on real ALFWorld games with the embedded model's answers replayed from each
test's cassette (tests/cassette.py, recorded from Gemma 3 270M via llama.cpp; the real model's
own ALFWorld end-to-end test is the demo's, tests/demo/test_e2e_demo.py) and the MiniLM
embedder, through the real command line: a MemRL run, a replay from the cache with zero model
calls, SIGKILL + resume, and a Hydra multirun."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memrl.core.rundir import RunDir
from memory_state import snapshot
from data_paths import ALFWORLD


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not ALFWORLD.is_dir(), reason=f"ALFWorld data not at {ALFWORLD}"),
]

BASE = ["env.split=valid_seen", "memory.delta=auto", "llm=local", "embedder=minilm",
        "runner.progress=false"]


def _env(cache: Path) -> dict[str, str]:
    return dict(os.environ, ALFWORLD_DATA=str(ALFWORLD), MEMRL_CACHE_DIR=str(cache),
                HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", LITELLM_LOCAL_MODEL_COST_MAP="True")


def run(args: list[str], cache: Path, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memrl.cli", "run", *args], env=_env(cache),
                          capture_output=True, text=True, timeout=1800, **kw)


def bank_snapshot(run_dir: Path) -> list[dict]:
    from memrl.memory.bank import ChromaBank

    return snapshot(ChromaBank(RunDir(run_dir).bank))


def test_memrl_end_to_end_then_replay_from_cache(tmp_path, cassette):
    cache = cassette
    args = BASE + ["env.max_tasks=2", "env.max_steps=4", "runner.epochs=2"]
    first = run(args + [f"hydra.run.dir={tmp_path / 'a'}"], cache)
    assert first.returncode == 0, first.stderr[-3000:]
    run_dir = tmp_path / "a"
    metrics = json.loads(RunDir(run_dir).metrics.read_text())
    assert metrics["n_tasks"] == 2 and metrics["epochs"] == 2 and len(metrics["sr"]) == 2
    assert len(metrics["forgetting"]) == 1
    lines = RunDir(run_dir).episodes.read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    assert len(recs) == 4
    assert all(r["transcript"] and r["steps"] <= 4 for r in recs)
    assert all(r["llm_calls"] >= 2 for r in recs)  # actions plus the experience writer
    # epoch 2 sees the memories of epoch 1 (the same intents are above the auto δ)
    assert any(r["injected"] for r in recs if r["epoch"] == 2)
    for r in recs:
        for m in r["injected"]:
            assert m["id"].startswith("e001:") and m["q"] == 0.0  # Q before the update
    assert len(bank_snapshot(run_dir)) == 4
    card = json.loads(RunDir(run_dir).card.read_text())
    assert card["model"].startswith("local/") and card["status"] == "finished"
    assert card["memory_setup"]["delta"] > 0 and card["data_fingerprint"]
    assert card["llm_totals"]["requests"] > 0
    for name in ("sr.png", "csr.png", "forgetting.png"):
        assert (RunDir(run_dir).plots / name).stat().st_size > 1000
    assert str(RunDir(run_dir).metrics) in first.stdout

    # the same experiment again, in a new directory: every response comes from the cache
    again = run(args + [f"hydra.run.dir={tmp_path / 'b'}"], cache)
    assert again.returncode == 0, again.stderr[-3000:]
    card_b = json.loads(RunDir(tmp_path / "b").card.read_text())
    # no call: every request of the replay is a hit (the first run's own repeats were hits
    # already: the embedded model's greedy answers are cached without their seed); the
    # preflight's calls, one per purpose (the action, the writer), go past the cache by design
    # (memrl.control.preflight) and are counted apart
    assert card_b["llm_totals"]["calls"] == 0 and card_b["llm_totals"]["probes"] == 2
    # the embedded model's probes: each purpose's real prompt, the answer capped, the run's budget kept
    rows = card_b["sessions"][-1]["preflight"]
    assert len(rows) == 2 and rows[0]["purpose"] == "act", rows
    assert all(r["probe_cap"] == 4 and r["completion_tokens"] <= 4 and r["budget"] > 4
               and r["prompt_tokens"] > 20 for r in rows), rows
    assert card_b["llm_totals"]["cache_hits"] == card["llm_totals"]["requests"]
    assert json.loads(RunDir(tmp_path / "b").metrics.read_text()) == metrics
    assert bank_snapshot(tmp_path / "b") == bank_snapshot(run_dir)


def test_sigkill_mid_epoch_then_resume_matches_uninterrupted(tmp_path, cassette):
    import shutil

    args = BASE + ["env.max_tasks=3", "env.max_steps=3", "runner.epochs=2"]
    killed_cache = tmp_path / "cache_killed"
    shutil.copytree(cassette, killed_cache)  # the same recorded answers, a cache of its own
    ref = run(args + [f"hydra.run.dir={tmp_path / 'ref'}"], cassette)
    assert ref.returncode == 0, ref.stderr[-3000:]

    run_dir = tmp_path / "killed"
    cmd = [sys.executable, "-m", "memrl.cli", "run", *args, f"hydra.run.dir={run_dir}"]
    env = _env(killed_cache)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    episodes = RunDir(run_dir).episodes
    deadline = time.time() + 900
    # killed as soon as the first episode is committed: wherever the run then is (inside the
    # next episode, or a commit), before its end, whatever the machine's speed
    while time.time() < deadline and proc.poll() is None:
        if episodes.exists() and len(episodes.read_text().splitlines()) >= 1:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    n_before = len(episodes.read_text().splitlines())
    assert 1 <= n_before < 6  # killed mid-epoch-1 or early epoch 2

    resumed = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads(RunDir(run_dir).metrics.read_text()) == \
        json.loads(RunDir(tmp_path / "ref").metrics.read_text())
    assert bank_snapshot(run_dir) == bank_snapshot(tmp_path / "ref")
    card = json.loads(RunDir(run_dir).card.read_text())
    assert len(card["sessions"]) == 2 and card["sessions"][0].get("status") is None


def test_multirun_over_lambda(tmp_path, cassette):
    sweep = tmp_path / "sweep"
    out = run(["-m", "memory.lam=0,0.5,1", "debug=fast", *BASE, f"hydra.sweep.dir={sweep}"], cassette)
    assert out.returncode == 0, out.stderr[-3000:]
    cards = sorted(sweep.glob(f"*/{RunDir.CARD}"))
    assert len(cards) == 3
    lams = sorted(json.loads(c.read_text())["config"]["memory"]["lam"] for c in cards)
    assert lams == [0.0, 0.5, 1.0]
    for c in cards:
        assert RunDir(c.parent).metrics.exists()
