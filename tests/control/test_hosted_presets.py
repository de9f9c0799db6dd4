"""Every paper and official preset on the models it names, as those providers behave
(memrl.testing.provider: gpt-5-mini and o3-mini spend hidden reasoning from the completion
budget and refuse what they do not take, gpt-4o / gpt-4o-mini, Gemini 3 Pro thinking about
10k tokens a call, text-embedding-3-large; every request carries the provider's key), end to
end through `python -m memrl.cli run`: two tasks, one epoch, on each benchmark's real
environment, with provider faults injected on the first try of three requests in four
(`FAULTS`: 429s with and without Retry-After, 500, 503, a hang past the client's timeout, a
200 whose body is cut, an empty reply; every retry answered).

Each run must record every episode, none errored; no reply may be cut at its budget; the
empty replies the client read are the injected ones; an ALFWorld action is never a thought
line; and the run card's spend must be what the server billed for the replies the client
read, to the rounding of the card, with the unseen ones (cut, hung) counted apart and
within the card's bound (memrl.llm.bill, "Unseen tries"). A USD budget that runs out and a
completion budget that runs out stop the run with the spend still the bill."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_official_e2e import ALFWORLD, BCB, HLE, LIFELONG, ROOT, lifelong_os_rootfs

from memrl.core.rundir import RunDir
from memrl.testing.fault_server import FaultPlan, FaultServer

KEYS = {"OPENAI_API_KEY": "sk-test-openai-key", "GEMINI_API_KEY": "gm-test-gemini-key"}
SERVER_KEYS = {"openai": KEYS["OPENAI_API_KEY"], "google": KEYS["GEMINI_API_KEY"]}
# the first try of about three requests in four meets a fault; the embedder's route is spared
# (its unseen tries are counted the same way: tests/llm/test_unseen_tries.py covers the chat ones)
FAULTS = FaultPlan(rates={"rate_limit_retry_after": 0.1, "rate_limit": 0.1, "server_error": 0.1, "unavailable": 0.1,
                          "hang": 0.05, "truncated_json": 0.15, "empty_content": 0.15},
                   cure_after=1, retry_after_s=0, hang_s=4, routes=("chat", "gemini"))
# fast retries and a timeout the hang outlasts (none of these change a result)
RETRIES = ["llm.backoff_base=0.01", "llm.backoff_max=0.05", "llm.timeout=1.5", "llm.max_retries=4"]
JUDGE_RETRIES = [f"env.judge.{o.removeprefix('llm.')}" for o in RETRIES]

pytestmark = pytest.mark.slow


@pytest.fixture
def provider():
    with FaultServer(FAULTS, provider=True, api_key=SERVER_KEYS) as server:
        yield server


@pytest.fixture
def quiet():
    """The emulation without faults (the plan's token estimate is checked against it)."""
    with FaultServer(provider=True, api_key=SERVER_KEYS) as server:
        yield server


def run(server: FaultServer, args: list[str], tmp: Path, **env: str) -> tuple[subprocess.CompletedProcess, Path]:
    """One preset at 2 tasks x 1 epoch, every model pointed at the emulation."""
    run_dir = tmp / "run"
    environ = dict(os.environ, MEMRL_CACHE_DIR=str(tmp / "cache"), HF_HUB_OFFLINE="1",
                   TRANSFORMERS_OFFLINE="1", LITELLM_LOCAL_MODEL_COST_MAP="True",
                   NO_PROXY="127.0.0.1,localhost", **KEYS, **env)
    out = subprocess.run([sys.executable, "-m", "memrl.cli", "run", *args, *RETRIES, "runner.epochs=1",
                          "env.max_tasks=2", "runner.progress=false", f"embedder.api_base={server.api_base}",
                          f"hydra.run.dir={run_dir}"],
                         env=environ, capture_output=True, text=True, timeout=1200, cwd=ROOT)
    return out, run_dir


def spend_is_the_bill(server: FaultServer, card: dict) -> None:
    """The card's spend is what the server billed for the replies the client read; the unseen
    ones (a cut body, a hang) are counted apart, within the card's bound."""
    billed = server.counts()["billed"]
    read = billed["usd"] - billed["unseen_usd"]
    spend = card["spend"]
    assert read > 0 and "unpriced" not in card
    assert spend["usd"] == pytest.approx(read, abs=2e-6), (spend, billed)
    assert spend.get("unseen_tries", 0) == billed["unseen_replies"], (spend, billed)
    assert billed["unseen_usd"] <= spend.get("unseen_bound_usd", 0.0) + 1e-6, (spend, billed)
    assert not spend.get("unseen_unbounded")
    client_tokens = sum(int(m.get("prompt_tokens", 0)) + int(m.get("completion_tokens", 0))
                        for s in card["sessions"] for m in s["models"].values())
    assert client_tokens == billed["prompt_tokens"] + billed["completion_tokens"] - billed["unseen_tokens"]


def check(server: FaultServer, out: subprocess.CompletedProcess, run_dir: Path, models: set[str]) -> list[dict]:
    assert out.returncode == 0, out.stderr[-3000:]
    rd = RunDir(run_dir)
    card = json.loads(rd.card.read_text())
    assert card["status"] == "finished"
    records = [json.loads(x) for x in rd.episodes.read_text().splitlines()]
    assert len(records) == 2 and card["episodes"]["recorded"] == 2
    assert card["episodes"]["errored"] == 0 and not [r for r in records if r["errors"]]
    assert card["episodes"]["writer_failures"] == 0
    session = card["sessions"][-1]
    counts = server.counts()
    billed = counts["billed"]
    assert counts["faults"] > 0
    # the empty replies the client read are the injected ones; none was cut at its budget
    assert sum(int(m.get("empty_replies", 0)) for m in session["models"].values()) \
        == billed["empty_replies"] == counts["empty_content"]
    assert sum(int(m.get("truncated_replies", 0)) for m in session["models"].values()) == 0
    assert not [c for r in records for c in r["model_calls"] if c.get("finish") == "length" or c.get("failed")]
    assert {row["model"].split("/", 1)[-1] for row in session["preflight"]} == models
    assert all(row["problem"] is None and row["finish_reason"] == "stop" for row in session["preflight"])
    assert billed["cut_replies"] == 0 and billed["refused"] == counts["rate_limit"] + counts["rate_limit_retry_after"]
    spend_is_the_bill(server, card)
    return records


# ------------------------------------------------------------------------------ ALFWorld
@pytest.mark.skipif(not ALFWORLD.is_dir(), reason=f"ALFWorld data not at {ALFWORLD}")
@pytest.mark.parametrize("preset", ["alfworld_paper", "alfworld_official"])
def test_alfworld_presets_on_gpt5_mini(provider, tmp_path, preset):
    out, run_dir = run(provider, [f"experiment={preset}", "env.split=valid_seen",
                                  f"llm.api_base={provider.api_base}"], tmp_path, ALFWORLD_DATA=str(ALFWORLD))
    records = check(provider, out, run_dir, {"gpt-5-mini", "text-embedding-3-large"})
    actions = [s["action"] for r in records for s in r["transcript"]]
    assert len(actions) == 60  # the preset's 30 steps each: the emulated agent tours the room
    assert not [a for a in actions if a.lower().startswith(("thought", "action:")) or "\n" in a]
    card = json.loads(RunDir(run_dir).card.read_text())
    llm = card["sessions"][-1]["models"]["llm"]
    # the step prompts share their prefix: past 1,024 tokens the provider serves it cached
    assert llm["reasoning_tokens"] > 0 and llm["cached_prompt_tokens"] > 0
    preflight = {row["purpose"]: row for row in card["sessions"][-1]["preflight"]}
    if preset == "alfworld_paper":  # 64 for the action + 8,192 headroom at medium effort
        assert preflight["act"]["budget"] == 64 + 8192 and preflight["write-reflection"]["budget"] == 160 + 8192
        # the provider drops `stop`: the one-line format sends none and parses the reply
        assert llm["client_stops"] >= 1  # the writer's "\n\n" was applied by the client
    else:  # the official budgets are totals
        assert preflight["act"]["budget"] == 4096 and preflight["write-reflection"]["budget"] == 4096


# --------------------------------------------------------------------------- BigCodeBench
def _bcb_ready() -> str | None:
    from memrl_envs.sandbox import bwrap_available

    if not BCB.is_file():
        return f"BigCodeBench data not at {BCB}"
    if importlib.util.find_spec("bigcodebench") is None:
        return "bigcodebench (the checker) is not installed"
    return bwrap_available()


@pytest.mark.parametrize("preset", ["bcb_paper", "bcb_official"])
def test_bigcodebench_presets_on_gpt4o(provider, tmp_path, preset):
    why = _bcb_ready()
    if why:
        pytest.skip(why)
    out, run_dir = run(provider, [f"experiment={preset}", f"env.data_path={BCB}", "env.part=all",
                                  "env.task_ids=[BigCodeBench/19,BigCodeBench/854]", "env.time_limit_s=20",
                                  f"llm.api_base={provider.api_base}"], tmp_path)
    records = check(provider, out, run_dir, {"gpt-4o", "text-embedding-3-large"})
    assert all(r["outcome_detail"] in ("pass", "fail", "timeout", "syntax_error") for r in records)


# -------------------------------------------------------------------------------- Lifelong
@pytest.mark.parametrize("preset", ["llb_os_paper", "llb_os_official"])
def test_lifelong_os_presets_on_gpt4o_mini(provider, tmp_path, preset):
    rootfs = lifelong_os_rootfs()
    # ../shared/data has the train files only (the official preset merges the val file beside them)
    out, run_dir = run(provider, [f"experiment={preset}", "env.max_steps=3", "env.val_path=null",
                                  f"llm.api_base={provider.api_base}"],
                       tmp_path, LIFELONG_DATA=str(LIFELONG), MEMRL_ROOTFS_DIR=str(rootfs.parent))
    check(provider, out, run_dir, {"gpt-4o-mini", "text-embedding-3-large"})


@pytest.mark.parametrize("preset", ["llb_db_paper", "llb_db_official"])
def test_lifelong_db_presets_on_gpt4o_mini(provider, tmp_path, preset):
    from memrl_envs.lifelong_db.server import MariaDBServer, find_binary

    if not (LIFELONG / "db_train.json").is_file():
        pytest.skip(f"no Lifelong DB data at {LIFELONG}")
    if find_binary("mariadbd", "mysqld") is None:
        pytest.skip("no MariaDB server binary (apt-get install -y mariadb-server)")
    with MariaDBServer(tmp_path / "mariadb") as server:
        out, run_dir = run(provider, [f"experiment={preset}", "env.max_steps=3", "env.prompt_rows=2",
                                      "env.val_path=null", f"env.server_dir={server.base_dir}",
                                      f"llm.api_base={provider.api_base}"],
                           tmp_path, LIFELONG_DATA=str(LIFELONG))
        check(provider, out, run_dir, {"gpt-4o-mini", "text-embedding-3-large"})


# -------------------------------------------------------------------------------------- HLE
@pytest.mark.skipif(not HLE.is_file(), reason=f"no HLE fixture at {HLE}")
@pytest.mark.parametrize("preset", ["hle_paper", "hle_official"])
def test_hle_presets_on_gemini_3_pro_with_their_judges(provider, tmp_path, preset):
    out, run_dir = run(provider, [f"experiment={preset}", f"env.data_path={HLE}", "env.modality=text",
                                  f"llm.api_base={provider.gemini_base}",
                                  f"env.judge.api_base={provider.api_base}", *JUDGE_RETRIES], tmp_path)
    judge = "o3-mini" if preset == "hle_paper" else "gpt-4o-2024-08-06"  # the official judge
    records = check(provider, out, run_dir, {"gemini-3-pro-preview", judge, "text-embedding-3-large"})
    card = json.loads(RunDir(run_dir).card.read_text())
    llm = card["sessions"][-1]["models"]["llm"]
    # Gemini thinks about 10k tokens a call, billed as output at the configured price
    assert llm["reasoning_tokens"] >= 4000 * llm["billed_replies"] and llm["unpriced_calls"] == 0
    assert all(r["info"]["judge"]["calls"] == 1 for r in records)


# ------------------------------------------------------------------------------ budgets that run out
@pytest.mark.skipif(not HLE.is_file(), reason=f"no HLE fixture at {HLE}")
def test_a_usd_budget_that_runs_out_stops_the_run_with_the_spend_still_the_bill(provider, tmp_path):
    """One question per batch and a budget below two: the run stops (exit 3, status budget)
    before the second batch, under the same faults, its spend what the server billed."""
    out, run_dir = run(provider, ["experiment=hle_paper", f"env.data_path={HLE}", "env.modality=text",
                                  f"llm.api_base={provider.gemini_base}", f"env.judge.api_base={provider.api_base}",
                                  *JUDGE_RETRIES, "runner.batch_size=1", "llm.budget_usd=0.7"], tmp_path)
    assert out.returncode == 3, out.stderr[-3000:]
    card = json.loads(RunDir(run_dir).card.read_text())
    assert card["status"] == "budget" and card["episodes"]["recorded"] == 1
    assert card["spend"]["usd"] <= 0.7
    spend_is_the_bill(provider, card)


@pytest.mark.skipif(not ALFWORLD.is_dir(), reason=f"ALFWorld data not at {ALFWORLD}")
def test_a_completion_budget_that_runs_out_is_billed_and_recorded(provider, tmp_path):
    """No reasoning headroom: gpt-5-mini spends the action's 64 tokens on reasoning and writes
    nothing; the preflight refuses the run (exit 2), and what those empty replies cost is the
    card's spend."""
    out, run_dir = run(provider, ["experiment=alfworld_paper", "env.split=valid_seen", "llm.reasoning_headroom=0",
                                  f"llm.api_base={provider.api_base}"], tmp_path, ALFWORLD_DATA=str(ALFWORLD))
    assert out.returncode == 2 and "reasoning_headroom" in out.stderr, out.stderr[-3000:]
    card = json.loads(RunDir(run_dir).card.read_text())
    assert card["status"] == "failed"
    billed = provider.counts()["billed"]
    assert billed["cut_replies"] >= 1 and billed["by_model"]["gpt-5-mini"]["reasoning_tokens"] >= 64
    spend_is_the_bill(provider, card)


# ------------------------------------------------------------------------------- the plan
@pytest.mark.skipif(not ALFWORLD.is_dir(), reason=f"ALFWorld data not at {ALFWORLD}")
def test_the_plan_of_alfworld_paper_runs_and_its_tokens_are_within_25_percent_of_the_run(quiet, tmp_path):
    """`make reproduce-alfworld` starts with the plan: its pilot (2 tasks) must run on
    gpt-5-mini, and its token estimate for the run (4 tasks) must hold."""
    args = ["experiment=alfworld_paper", "env.split=valid_seen", "env.max_tasks=4", "runner.epochs=1",
            "runner.progress=false", f"llm.api_base={quiet.api_base}", f"embedder.api_base={quiet.api_base}"]
    environ = dict(os.environ, MEMRL_CACHE_DIR=str(tmp_path / "cache"), HF_HUB_OFFLINE="1",
                   TRANSFORMERS_OFFLINE="1", LITELLM_LOCAL_MODEL_COST_MAP="True", NO_PROXY="127.0.0.1,localhost",
                   ALFWORLD_DATA=str(ALFWORLD), **KEYS)
    plan_file = tmp_path / "plan.json"
    planned = subprocess.run([sys.executable, "-m", "memrl.cli", "plan", "--yes", "--pilot-tasks", "2", "--pilot-dir",
                              str(tmp_path / "pilots"), "--json", str(plan_file), *args],
                             env=environ, capture_output=True, text=True, timeout=1200, cwd=ROOT)
    assert planned.returncode == 0, planned.stderr[-3000:]
    plan = json.loads(plan_file.read_text())[0]
    assert plan["tasks"] == 4 and plan["reasoning_tokens"] > 0 and not plan["unpriced"]
    assert plan["cost_usd"] < plan["cost_usd_no_cache"]  # the pilot saw prompt caching
    assert "with the pilot's prompt caching" in planned.stdout
    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "memrl.cli", "run", *args, f"hydra.run.dir={run_dir}"], env=environ,
                          capture_output=True, text=True, timeout=1200, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(x) for x in RunDir(run_dir).episodes.read_text().splitlines()]
    actual = sum(r["tokens"]["prompt"] + r["tokens"]["completion"] for r in records)
    estimate = plan["prompt_tokens"] + plan["completion_tokens"]
    assert abs(estimate - actual) <= 0.25 * actual, (estimate, actual)
