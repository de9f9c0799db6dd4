"""The preflight sends what the run will send (memrl.control.preflight): one call per purpose with its
real prompt shape, budget and stop; an empty or cut reply refuses the run; a missing key of
any model (the embedder included) is `memrl: ...`, exit 2, with nothing called. And ALFWorld's
replies are read as its format allows (memrl_envs/alfworld/prompts.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from alfworld_helpers import ALFWORLD, FakeLLM, make_env, needs_data

from memrl.control.preflight import PreflightError, check_keys, preflight, table
from memrl.llm.base import LLMResponse, ModelProbe
from clients import make_client

from memrl.llm.embed import CachedEmbedder, LiteLLMEmbedder
from memrl.llm.profile import ModelProfile
from memrl.testing.fault_server import FaultServer
from memrl_envs.alfworld.prompts import build_prompt, instruction_for, parse_action

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------ ALFWorld replies
@pytest.mark.parametrize("reply, action", [
    (" go to cabinet 1", "go to cabinet 1"),
    ("Thought: the mug is likely in a cabinet.\nAction: go to cabinet 1", "go to cabinet 1"),
    ("**Thought:** look first\n**Action:** `open drawer 2`", "open drawer 2"),
    ("think: I should look around", "think: I should look around"),  # ReAct's think step
    ("Thought: I only thought", "think: I only thought"),  # never played as a command
    ("> take mug 1 from cabinet 1", "take mug 1 from cabinet 1"),
    ("go to desk 1\nOn the desk 1, you see a pen.\n> take pen 1 from desk 1", "go to desk 1"),
    ("Action:\n> look", "look"),
    ("", ""),
    ("Action: ", ""),
])
def test_a_reply_is_read_as_the_format_allows(reply, action):
    assert parse_action(reply) == action


def test_the_thought_action_format_asks_for_two_lines_and_ends_without_a_prompt_mark():
    line = build_prompt([], [], "Your task is to: put a mug in the sink.", [],
                        instruction=instruction_for("react"))
    two = build_prompt([], [], "Your task is to: put a mug in the sink.", [],
                       instruction=instruction_for("react", "thought_action"), reply_format="thought_action")
    assert line.endswith("\n>") and "write exactly one command on a single line" in line
    assert "'Thought: <" in two and "'Action: <one command>'" in two
    assert "exactly one command on a single line" not in two and not two.endswith(">")
    with pytest.raises(ValueError, match="reply_format"):
        instruction_for("react", "json")


@needs_data
def test_alfworld_sends_its_stop_only_to_a_provider_that_takes_it_and_probes_its_first_step(tmp_path):
    env = make_env(tmp_path, agent="react", max_tasks=1, max_tokens=64)
    task = env.tasks()[0]
    honours = FakeLLM(lambda p, i: "look")
    [probe] = env.model_probes(task, honours)
    assert probe.role == "llm" and probe.purpose == "act" and probe.answer_tokens == 64
    assert probe.budget_key == "env.max_tokens" and probe.stop == ("\n",)
    assert probe.prompt.endswith(f"{task.payload['task']}\n>") and "Here is an example" in probe.prompt
    drops = FakeLLM(lambda p, i: "look")
    drops.honors_stop = False
    assert env.model_probes(task, drops)[0].stop == ()
    two = make_env(tmp_path, agent="react", max_tasks=1, reply_format="thought_action")
    assert two.model_probes(task, honours)[0].stop == ()  # a two-line reply is never cut
    assert make_env(tmp_path, agent="expert", max_tasks=1).model_probes(task, honours) == []


# ------------------------------------------------------------------------ the preflight
class Budgeted:
    """A reasoning model that spends `reasoning` tokens first: a budget below reasoning +
    answer returns nothing, finish_reason length (as OpenAI's reasoning models do)."""

    model_id = "budgeted"
    empty_reply_is_fault = True

    def __init__(self, reasoning: int, answer: str = "ok", headroom: int | None = None) -> None:
        self.reasoning, self.answer, self.seen = reasoning, answer, []
        self.profile = ModelProfile(model="budgeted", reasoning=True, default_effort="medium",
                                    headroom_tokens=headroom, honors_stop=False, prices=None)

    def generate(self, request):
        self.seen.append(request)
        need = self.reasoning + len(self.answer.split())
        if need > request.max_tokens:
            return LLMResponse(text="", prompt_tokens=10, completion_tokens=request.max_tokens,
                               reasoning_tokens=request.max_tokens, finish_reason="length", priced=False)
        return LLMResponse(text=self.answer, prompt_tokens=10, completion_tokens=need,
                           reasoning_tokens=self.reasoning, finish_reason="stop", priced=False)


PROBES = [ModelProbe(role="llm", purpose="act", prompt="the first step", answer_tokens=64,
                     budget_key="env.max_tokens", stop=("\n",)),
          ModelProbe(role="llm", purpose="write-reflection", prompt="Reflection:", answer_tokens=160,
                     budget_key="memory.writer.max_tokens", stop=("\n\n",))]


def test_each_purpose_is_probed_with_its_own_budget_and_the_headroom():
    backend = Budgeted(reasoning=900)
    client = make_client(backend, max_retries=0)
    result = preflight({"llm": client}, PROBES)
    assert [(r.purpose, r.budget, r.answer_tokens) for r in result.results] == [
        ("act", 64 + 8192, 64), ("write-reflection", 160 + 8192, 160)]
    assert [tuple(r.stop) for r in backend.seen] == [("\n",), ("\n\n",)]
    assert all(r.reasoning_tokens == 900 and r.finish_reason == "stop" and not r.priced for r in result.results)
    text = table(result)
    assert "64+8192" in text and "unpriced" in text and "write-reflection" in text
    assert client.totals()["probes"] == 2 and client.totals()["billed_replies"] == 2


def test_an_embedded_models_probe_answer_is_capped_and_the_row_keeps_the_runs_budget():
    """A backend that declares `probe_answer_tokens` (the embedded model) gets each purpose's
    real prompt, stop and format with the answer capped; the row and the table keep the run's
    budget and say the cap; a budget already under the cap is sent as it is."""
    class Embedded:
        model_id, probe_answer_tokens = "embedded", 4

        def __init__(self):
            self.seen = []

        def generate(self, request):
            self.seen.append(request)
            return LLMResponse(text="go", prompt_tokens=12, completion_tokens=1)

    backend = Embedded()
    probes = [*PROBES, ModelProbe(role="llm", purpose="tiny", prompt="x", answer_tokens=2, budget_key="b")]
    result = preflight({"llm": make_client(backend, max_retries=0)}, probes)
    assert [(r.max_tokens, r.stop, r.messages[-1][1]) for r in backend.seen] == [
        (4, ("\n",), "the first step"), (4, ("\n\n",), "Reflection:"), (2, (), "x")]
    assert [(r.budget, r.probe_cap) for r in result.results] == [(64, 4), (160, 4), (2, None)]
    assert "64 (probe 4)" in table(result) and "160 (probe 4)" in table(result)
    backend.seen.clear()  # a backend without the attribute: the full budget, as before
    del Embedded.probe_answer_tokens
    preflight({"llm": make_client(backend, max_retries=0)}, PROBES)
    assert [r.max_tokens for r in backend.seen] == [64, 160]


def test_a_budget_the_reasoning_spends_refuses_the_run_naming_purpose_budget_and_key():
    client = make_client(Budgeted(reasoning=900, headroom=0), max_retries=6)
    with pytest.raises(PreflightError) as info:
        preflight({"llm": client}, PROBES)
    message = str(info.value)
    assert "the preflight's act call" in message and "64 tokens (64 for the answer + 0 reasoning headroom)" in message
    assert "raise env.max_tokens or llm.reasoning_headroom" in message
    assert "write-reflection" in message and "memory.writer.max_tokens" in message
    assert client.totals()["billed_replies"] == 2  # one try each: never retried
    report = preflight({"llm": client}, PROBES, refuse=False)  # memrl check: the table says it
    assert [r.finish_reason for r in report.results] == ["length", "length"]


def test_a_reply_cut_at_its_budget_refuses_the_run_too():
    class Cut(Budgeted):
        def generate(self, request):
            return LLMResponse(text="go to", prompt_tokens=5, completion_tokens=request.max_tokens,
                               finish_reason="length")

    with pytest.raises(PreflightError, match=r"the reply was cut at its budget of 8256 tokens"):
        preflight({"llm": make_client(Cut(0), max_retries=0)}, PROBES[:1])


def test_a_missing_key_of_the_embedder_is_named_before_any_call():
    embedder = CachedEmbedder(LiteLLMEmbedder("openai/text-embedding-3-large", api_key_env="MEMRL_NO_SUCH_KEY"),
                              Path(os.environ.get("TMPDIR", "/tmp")) / "memrl-preflight-embed.sqlite")
    with pytest.raises(PreflightError, match=r"embedder \(openai/text-embedding-3-large\): environment "
                                             r"variable MEMRL_NO_SUCH_KEY"):
        check_keys({}, embedder)


def test_the_embedder_is_probed_past_its_cache_and_its_spend_counted():
    with FaultServer(provider=True, api_key="k") as server:  # the emulation checks every key
        inner = LiteLLMEmbedder("openai/text-embedding-3-large", api_base=server.api_base, api_key_env="MEMRL_EMB_KEY")
        os.environ["MEMRL_EMB_KEY"] = "k"
        try:
            result = preflight({}, [], inner)
        finally:
            del os.environ["MEMRL_EMB_KEY"]
        [row] = result.results
        assert row.role == "embedder" and row.prompt_tokens > 0 and row.cost_usd > 0
        billed = server.counts()["billed"]
        assert billed["requests"] == 1 and inner.totals()["cost_usd"] == pytest.approx(billed["usd"])


@needs_data
def test_the_paper_preset_without_a_key_says_so_in_one_line_and_exits_2(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY",)}
    env.update(MEMRL_CACHE_DIR=str(tmp_path / "cache"), ALFWORLD_DATA=str(ALFWORLD), HF_HUB_OFFLINE="1",
               LITELLM_LOCAL_MODEL_COST_MAP="True")
    out = subprocess.run([sys.executable, "-m", "memrl.cli", "run", "experiment=alfworld_paper", "env.split=valid_seen",
                          "env.max_tasks=2", f"hydra.run.dir={tmp_path / 'run'}"], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.startswith("memrl: the API key of a model is missing: llm (openai/gpt-5-mini)")
    assert "embedder (openai/text-embedding-3-large): environment variable OPENAI_API_KEY" in out.stderr
    check = subprocess.run([sys.executable, "-m", "memrl.cli", "check", "experiment=alfworld_paper",
                            "env.split=valid_seen", "env.max_tasks=2"], env=env, cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
    assert check.returncode == 2 and check.stderr.startswith("memrl: the API key of a model is missing")


@needs_data
def test_memrl_check_prints_the_table_for_the_paper_preset(tmp_path):
    with FaultServer(provider=True, api_key="k") as server:  # the emulation checks every key
        env = dict(os.environ, MEMRL_CACHE_DIR=str(tmp_path / "cache"), ALFWORLD_DATA=str(ALFWORLD),
                   HF_HUB_OFFLINE="1", LITELLM_LOCAL_MODEL_COST_MAP="True", OPENAI_API_KEY="k",
                   NO_PROXY="127.0.0.1,localhost")
        out = subprocess.run([sys.executable, "-m", "memrl.cli", "check", "experiment=alfworld_paper",
                              "env.split=valid_seen", "env.max_tasks=2", f"llm.api_base={server.api_base}",
                              f"embedder.api_base={server.api_base}"], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        lines = out.stdout.splitlines()
        head = next(i for i, line in enumerate(lines) if line.startswith("role"))
        assert lines[head].split()[:7] == ["role", "purpose", "model", "budget", "reasoning", "finish", "price/call"]
        rows = {line.split()[1]: line.split() for line in lines[head + 1:]
                if line.split()[:1] in (["llm"], ["embedder"])}
        assert rows["act"][3] == "64+8192" and rows["write-reflection"][3] == "160+8192"
        assert int(rows["act"][4]) > 0 and rows["act"][5] == "stop" and rows["act"][6].startswith("$")
        assert rows["embed"][2] == "openai/text-embedding-3-large"
        assert '"reasoning": true' in out.stdout and '"effort": "medium"' in out.stdout
        assert not (tmp_path / "runs").exists()  # nothing was written where a run would go
