"""`python -m memrl.cli plan`: sweeps expand as Hydra's basic sweeper does; the straggler model;
and (slow) the plan from a pilot against the real run it plans: model calls and tokens within
25%, and the pilot's answers served from cache to the real run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memrl.control.plan import expand, expected_max, pool_calls, run_name
from memrl.core.errors import ConfigError
from memrl.core.records import iter_jsonl
from memrl.core.rundir import RunDir
from memrl.testing.fault_server import FaultPlan, FaultServer
from data_paths import ALFWORLD


KEY_ENV = "MEMRL_PLAN_TEST_KEY"


def test_a_sweep_expands_to_its_runs() -> None:
    runs = expand(["memory=none,memrl", "seed=0,1", "env.max_tasks=3"], multirun=True)
    assert runs == [["memory=none", "seed=0", "env.max_tasks=3"], ["memory=none", "seed=1", "env.max_tasks=3"],
                    ["memory=memrl", "seed=0", "env.max_tasks=3"], ["memory=memrl", "seed=1", "env.max_tasks=3"]]
    assert expand([], multirun=False) == [[]]
    with pytest.raises(ConfigError, match="-m"):
        expand(["memory=none,memrl"], multirun=False)
    name = run_name(["memory=memrl", "hydra.sweep.dir=x,y"])
    assert "=" not in name and "," not in name and name != run_name(["memory=none"])


def test_the_longest_of_a_batch() -> None:
    assert expected_max([5, 5, 5], 8) == 5
    assert expected_max([1, 3], 1) == 2  # one draw: the mean
    assert abs(expected_max([1, 3], 2) - (1 * 0.25 + 3 * 0.75)) < 1e-9
    assert expected_max([6, 10, 30], 32) > 29.9  # a batch of 32 waits for its straggler


def test_the_pool_estimate_follows_a_simulated_pool() -> None:
    """plan.pool_calls against the zero-overhead pool of scripts/bench_throughput.py, on
    straggler-like lengths (most games run to 30 calls, the others end after 4-29)."""
    import importlib.util
    import random

    spec = importlib.util.spec_from_file_location("bench_throughput", Path(__file__).resolve().parents[2]
                                                  / "scripts" / "bench_throughput.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rng = random.Random(3)
    lengths = [30 if rng.random() < 0.6 else rng.randint(4, 29) for _ in range(128)]
    mean = sum(lengths) / len(lengths)
    for epochs, overlap in ((1, True), (4, True), (4, False)):
        for width in (8, 32):
            sim = bench.simulate([lengths] * epochs, width, "async", overlap=overlap)
            est = pool_calls(epochs * 128, mean, lengths, width, 1 if overlap else epochs)
            simulated = epochs * sum(lengths) / width / sim  # the simulated pool's calls in series
            assert est == pytest.approx(simulated, rel=0.06), (epochs, overlap, width)
    assert pool_calls(10, 3.0, [], 2, 1) == 15  # no sample: the work over the slots


def _sum(records: list[dict]) -> dict[str, int]:
    return {"calls": sum(r["llm_calls"] for r in records),
            "prompt": sum(r["tokens"]["prompt"] for r in records),
            "completion": sum(r["tokens"]["completion"] for r in records)}


@pytest.mark.slow
@pytest.mark.skipif(not ALFWORLD.is_dir(), reason=f"ALFWorld data not at {ALFWORLD}")
def test_the_plan_matches_the_run_it_plans(tmp_path) -> None:
    env = dict(os.environ, ALFWORLD_DATA=str(ALFWORLD), MEMRL_CACHE_DIR=str(tmp_path / "cache"),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", LITELLM_LOCAL_MODEL_COST_MAP="True",
               **{KEY_ENV: "unused"})
    with FaultServer(FaultPlan()) as server:
        overrides = ["env=alfworld", "env.split=valid_seen", "memory=memrl", "embedder=hashing",
                     "llm=openai_compatible", "llm.model=openai/fault", f"llm.api_base={server.api_base}",
                     f"llm.api_key_env={KEY_ENV}", "env.max_tasks=8", "env.max_steps=8",
                     "runner.epochs=3", "runner.batch_size=2"]
        plan = subprocess.run([sys.executable, "-m", "memrl.cli", "plan", "--yes", "--pilot-tasks", "3",
                               "--pilot-dir", str(tmp_path / "pilots"), "--json", str(tmp_path / "plan.json"),
                               *overrides], env=env, capture_output=True, text=True, timeout=600)
        assert plan.returncode == 0, plan.stderr[-3000:]
        pilot_calls = server.counts()["requests"]
        run = subprocess.run([sys.executable, "-m", "memrl.cli", "run", *overrides, "runner.progress=false",
                              f"hydra.run.dir={tmp_path / 'run'}"], env=env, capture_output=True, text=True,
                             timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]
    (planned,) = json.loads((tmp_path / "plan.json").read_text())
    assert planned["tasks"] == 8 and planned["epochs"] == 3
    records = list(iter_jsonl(RunDir(tmp_path / "run").episodes))
    actual = _sum(records)
    print(f"\nplanned: {planned['requests']} calls, {planned['prompt_tokens']} prompt, "
          f"{planned['completion_tokens']} completion tokens; actual: {actual}")
    for got, want in ((planned["requests"], actual["calls"]), (planned["prompt_tokens"], actual["prompt"]),
                      (planned["completion_tokens"], actual["completion"])):
        assert abs(got - want) <= 0.25 * want
    # the pilot's answers (its first epoch = the run's first 3 episodes) come from the cache
    card = json.loads(RunDir(tmp_path / "run").card.read_text())
    first = [r for r in records if r["epoch"] == 1][:3]
    assert all(r["cache_hits"] == r["llm_calls"] for r in first[:2])  # the empty-bank batch
    assert card["llm_totals"]["cache_hits"] >= sum(r["llm_calls"] for r in first[:2])
    assert pilot_calls > 0
