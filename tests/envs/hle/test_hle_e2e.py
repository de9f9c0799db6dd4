"""End to end on the HLE fixture through the real command line: the embedded model (Gemma 3
270M via llama.cpp) answers and, as a second client, judges; MiniLM embeds; MemRL runs two
epochs. Then the same command in a new directory replays everything from the response
cache, judge calls included. The model is far too small to answer HLE: this checks the
pipeline (records, judge verdicts, memories injected in epoch 2, metrics), not accuracy."""

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

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = ROOT / "tests" / "fixtures" / "hle" / "hle_fixture.jsonl"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                       reason="llama_cpp (llama-cpp-python, the `local` extra) is not installed"),
]

ARGS = ["env=hle", f"env.data_path={FIXTURE}", "env.modality=text", "env.max_tasks=3",
        "env.max_tokens=40", "env.judge.backend=local", "env.judge.model=gemma3-270m-q4_k_m", "env.judge.max_tokens=48",
        "llm=local", "embedder=minilm", "memory.delta=auto", "memory.writer.max_tokens=24",
        "runner.epochs=2", "runner.progress=false"]


def run(run_dir: Path, cache: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, MEMRL_CACHE_DIR=str(cache), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               LITELLM_LOCAL_MODEL_COST_MAP="True")
    return subprocess.run([sys.executable, "-m", "memrl.cli", "run", *ARGS, f"hydra.run.dir={run_dir}"],
                          env=env, capture_output=True, text=True, timeout=1200, cwd=ROOT)


def test_hle_two_epochs_with_the_embedded_model_as_solver_and_judge(tmp_path) -> None:
    from memrl.memory.bank import ChromaBank

    cache = tmp_path / "cache"
    first = run(tmp_path / "a", cache)
    assert first.returncode == 0, first.stderr[-3000:]
    run_dir = tmp_path / "a"
    recs = [json.loads(line) for line in RunDir(run_dir).episodes.read_text().splitlines()]
    assert len(recs) == 6 and {r["epoch"] for r in recs} == {1, 2}
    text_ids = [json.loads(x)["id"] for x in FIXTURE.read_text().splitlines()
                if not json.loads(x)["image"]][:3]
    assert sorted({r["task_id"] for r in recs}) == sorted(text_ids)
    for r in recs:
        outcome = r["outcome_detail"]
        assert outcome in ("correct", "incorrect", "judge_error")
        assert r["success"] == (outcome == "correct")
        assert (outcome == "judge_error") == bool(r["errors"])
        assert len(r["transcript"]) == 1 and r["transcript"][0]["observation"]
        judge = r["info"]["judge"]
        if not r["transcript"][0]["action"].strip():  # an empty answer is not sent to the judge
            assert judge is None and outcome == "incorrect"
            continue
        assert judge["model"].startswith("local/") and judge["calls"] == 1
        assert judge["prompt_tokens"] > 100 and judge["completion_tokens"] > 0
        assert r["tokens"]["prompt"] > 0 and r["llm_calls"] >= 1
    # epoch 2 sees the memories of epoch 1 (the same questions are above the auto δ)
    assert any(r["injected"] for r in recs if r["epoch"] == 2)
    assert not any(r["injected"] for r in recs if r["epoch"] == 1 and r["task_id"] == text_ids[0])
    graded = sum(1 for r in recs if not r["errors"])
    assert len(snapshot(ChromaBank(RunDir(run_dir).bank))) == graded  # judge errors teach nothing
    metrics = json.loads(RunDir(run_dir).metrics.read_text())
    assert metrics["n_tasks"] == 3 and metrics["epochs"] == 2 and len(metrics["sr"]) == 2
    assert metrics["errored_episodes"] == 6 - graded
    card = json.loads(RunDir(run_dir).card.read_text())
    assert card["status"] == "finished" and card["model"].startswith("local/")
    assert card["llm_totals"]["calls"] > 0

    # the same command in a new directory: solver and judge answers all come from the cache
    again = run(tmp_path / "b", cache)
    assert again.returncode == 0, again.stderr[-3000:]
    card_b = json.loads(RunDir(tmp_path / "b").card.read_text())
    # no solver call: the preflight's, one per purpose (the answer, the writer), go past the
    # cache by design (memrl.control.preflight) and are counted apart
    assert card_b["llm_totals"]["calls"] == 0 and card_b["llm_totals"]["probes"] == 2
    recs_b = [json.loads(line) for line in RunDir(tmp_path / "b").episodes.read_text().splitlines()]
    assert all(r["info"]["judge"]["cache_hits"] == 1 for r in recs_b if r["info"]["judge"])
    assert [r["outcome_detail"] for r in recs_b] == [r["outcome_detail"] for r in recs]
    assert json.loads(RunDir(tmp_path / "b").metrics.read_text()) == metrics
