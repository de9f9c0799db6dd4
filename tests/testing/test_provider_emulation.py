"""The fault server's hosted-provider emulation (memrl.testing.provider), driven through the
project's real client stack (litellm, as memrl.llm.litellm_backend imports it) and through
raw HTTP for the requests litellm would never send: hidden reasoning that spends the output
budget, prompt caching, Gemini's thinking and MAX_TOKENS exhaustion, embeddings, and the
billing ledger; plus the replies each benchmark's parser must read. What the emulation
refuses (keys, models, parameters, context windows) is tests/testing/test_provider_refusals.py."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any

import pytest

from memrl.llm.litellm_backend import import_litellm
from memrl.testing.fault_server import FaultPlan, FaultServer
from memrl.testing.replies import reply_for
from memrl.testing.provider import CATALOGUE, ProviderPlan, output_tokens, prompt_tokens, serialize

KEY = "k"
litellm = import_litellm()


def chat(server: FaultServer, model: str, content: Any, **kw: Any) -> Any:
    messages = content if isinstance(content, list) else [{"role": "user", "content": content}]
    return litellm.completion(model=f"openai/{model}", messages=messages, api_base=server.api_base,
                              api_key=KEY, drop_params=True, num_retries=0, **kw)


def gemini(server: FaultServer, content: str, **kw: Any) -> Any:
    return litellm.completion(model="gemini/gemini-3-pro-preview", messages=[{"role": "user", "content": content}],
                              api_base=server.gemini_base, api_key=kw.pop("api_key", KEY), drop_params=True,
                              num_retries=0, **kw)


def post(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}",
                                          **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def get(url: str) -> dict[str, Any]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {KEY}", "x-goog-api-key": KEY})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def usd(model: str, prompt: int, cached: int, completion: int) -> float:
    """The price table of the brief, written out independently of the catalogue."""
    table = {"gpt-5-mini": (0.25, 0.025, 2.00), "o3-mini": (1.10, 0.55, 4.40), "gpt-4o": (2.50, 1.25, 10.00),
             "gpt-4o-mini": (0.15, 0.075, 0.60), "gemini-3-pro-preview": (2.00, 0.20, 12.00),
             "text-embedding-3-large": (0.13, 0.13, 0.0)}
    inp, cache, out = (4.00, 0.40, 18.00) if model.startswith("gemini") and prompt > 200_000 else table[model]
    return ((prompt - cached) * inp + cached * cache + completion * out) / 1e6


@pytest.fixture
def server():
    with FaultServer(provider=True, api_key=KEY) as s:
        yield s


def test_the_catalogue_holds_the_price_table():
    rows = {name: (s.kind, s.input_per_m, s.cached_per_m, s.output_per_m, s.max_output_tokens)
            for name, s in CATALOGUE.items()}
    assert rows == {"gpt-5-mini": ("openai_reasoning", 0.25, 0.025, 2.00, 128000),
                    "o3-mini": ("openai_reasoning", 1.10, 0.55, 4.40, 100000),
                    "gpt-4o": ("openai_chat", 2.50, 1.25, 10.00, 16384),
                    "gpt-4o-mini": ("openai_chat", 0.15, 0.075, 0.60, 16384),
                    "gemini-3-pro-preview": ("gemini", 2.00, 0.20, 12.00, 65536),
                    "text-embedding-3-large": ("embedding", 0.13, None, None, None)}
    assert CATALOGUE["gemini-3-pro-preview"].rates(200_001) == (4.00, 0.40, 18.00)
    assert CATALOGUE["text-embedding-3-large"].dimensions == 3072


# ------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize("model, extra, param, code, message", [
    ("gpt-5-mini", {"max_tokens": 10}, "max_tokens", "unsupported_parameter",
     "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."),
    ("gpt-5-mini", {"top_p": 0.9}, "top_p", "unsupported_parameter", None),
    ("gpt-5-mini", {"stop": ["\n"]}, "stop", "unsupported_parameter", None),
    ("gpt-5-mini", {"temperature": 0}, "temperature", "unsupported_value",
     "Unsupported value: 'temperature' does not support 0 with this model. Only the default (1) value is supported."),
    ("gpt-5-mini", {"reasoning_effort": "extreme"}, "reasoning_effort", "unsupported_value", None),
    ("gpt-5-mini", {"max_completion_tokens": 128001}, "max_completion_tokens", "invalid_value", None),
    ("o3-mini", {"reasoning_effort": "minimal"}, "reasoning_effort", "unsupported_value", None),
    ("o3-mini", {"top_p": 1}, "top_p", "unsupported_parameter", None),
    ("o3-mini", {"max_completion_tokens": 100001}, "max_completion_tokens", "invalid_value", None),
    ("gpt-4o", {"reasoning_effort": "low"}, "reasoning_effort", "unsupported_parameter", None),
    ("gpt-4o-mini", {"max_tokens": 16385}, "max_tokens", "invalid_value", None),
])
def test_openai_refuses_what_the_model_does_not_take(server, model, extra, param, code, message):
    status, body = post(server.api_base + "/chat/completions",
                        {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra})
    assert status == 400
    err = body["error"]
    assert (err["type"], err["param"], err["code"]) == ("invalid_request_error", param, code)
    if message:
        assert err["message"] == message
    billed = server.counts()["billed"]
    assert billed["refused"] == 1 and billed["replies"] == 0 and billed["usd"] == 0


def test_what_each_model_accepts(server):
    msgs = [{"role": "user", "content": "hi"}]
    accepted = [("gpt-5-mini", {"temperature": 1, "reasoning_effort": "minimal", "max_completion_tokens": 128000}),
                ("o3-mini", {"stop": ["K"], "reasoning_effort": "high", "seed": 3}),
                ("gpt-4o", {"max_tokens": 16384, "stop": ["K"], "temperature": 0, "top_p": 0.5, "seed": 1})]
    for model, extra in accepted:
        status, body = post(server.api_base + "/chat/completions", {"model": model, "messages": msgs, **extra})
        assert status == 200, body
        if "stop" in extra:  # "OK." cut at "K"
            assert body["choices"][0]["message"]["content"] == "O"
    # through litellm, which maps max_tokens to max_completion_tokens and drops what gpt-5-mini refuses
    r = chat(server, "gpt-5-mini", "hi", max_tokens=20000, stop=["\n"], temperature=0, top_p=0.5)
    assert r.choices[0].finish_reason == "stop" and r.choices[0].message.content == "OK."
    assert server.counts()["billed"]["refused"] == 0


# ------------------------------------------------------------------------------ hidden reasoning
def test_a_small_budget_is_spent_on_reasoning_and_billed_whole(server):
    r = chat(server, "gpt-5-mini", "Say hello.", max_tokens=100)
    assert r.choices[0].finish_reason == "length"
    assert not r.choices[0].message.content
    u = r.usage
    assert u.completion_tokens == u.completion_tokens_details.reasoning_tokens == 100
    billed = server.counts()["billed"]["by_model"]["gpt-5-mini"]
    assert billed["empty_replies"] == billed["cut_replies"] == 1 and billed["completion_tokens"] == 100


def test_a_large_budget_answers_and_bills_reasoning_plus_output(server):
    r = chat(server, "gpt-5-mini", "Say hello.", max_tokens=20000)
    text, u = r.choices[0].message.content, r.usage
    assert r.choices[0].finish_reason == "stop" and text == "OK."
    reasoning = u.completion_tokens_details.reasoning_tokens
    assert 192 <= reasoning <= 2560  # medium, the default effort
    assert u.completion_tokens == reasoning + math.ceil(len(text) / 4)
    assert u.prompt_tokens_details.cached_tokens == 0
    again = chat(server, "gpt-5-mini", "Say hello.", max_tokens=20000)  # by content, not by call order
    assert again.usage.completion_tokens_details.reasoning_tokens == reasoning


def test_effort_changes_the_spend(server):
    spent = {e: chat(server, "gpt-5-mini", "Plan a trip.", max_tokens=50000, reasoning_effort=e)
             .usage.completion_tokens_details.reasoning_tokens for e in ("minimal", "low", "high")}
    assert spent["minimal"] <= 64 and 64 <= spent["low"] <= 768 and 1024 <= spent["high"] <= 12288
    assert spent["high"] > spent["low"] > spent["minimal"]
    with FaultServer(provider=ProviderPlan(reasoning_scale=100.0), api_key=KEY) as heavy:  # low: >= 6400
        r = chat(heavy, "o3-mini", "Plan a trip.", max_tokens=5000, reasoning_effort="low")
        assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 5000


def test_chat_models_cut_at_max_tokens_and_report_no_reasoning(server):
    prompt = "Here is your task.\nYou are in a kitchen. Looking quickly around you, you see a cabinet 1.\n>"
    r = chat(server, "gpt-4o", prompt, max_tokens=1)
    assert r.choices[0].finish_reason == "length"
    assert r.choices[0].message.content == " loo"  # " look" cut at 1 token (4 characters)
    assert r.usage.completion_tokens == 1 and r.usage.completion_tokens_details.reasoning_tokens == 0


# ------------------------------------------------------------------------------ caching and billing
def test_prompt_caching_reports_the_shared_prefix_in_128_token_blocks(server):
    shared = "Instructions that every step repeats. " * 200  # 7600 characters: 1900 tokens
    first = chat(server, "gpt-4o-mini", shared + "Step one.", max_tokens=50)
    second = chat(server, "gpt-4o-mini", shared + "Step two, a longer tail.", max_tokens=50)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    cached = second.usage.prompt_tokens_details.cached_tokens
    prefix_tokens = (len("<|user|>\n") + len(shared)) // 4
    assert cached % 128 == 0 and 1024 <= cached <= prefix_tokens and cached > prefix_tokens - 128
    other = chat(server, "gpt-4o", shared + "Step two, a longer tail.", max_tokens=50)
    assert other.usage.prompt_tokens_details.cached_tokens == 0  # the cache is per model
    short = "Short shared prefix. " * 40  # under 1024 tokens: never cached
    chat(server, "gpt-4o-mini", short + "a", max_tokens=50)
    assert chat(server, "gpt-4o-mini", short + "b", max_tokens=50).usage.prompt_tokens_details.cached_tokens == 0
    server.reset()
    fresh = chat(server, "gpt-4o-mini", shared + "Step two.", max_tokens=50)
    assert fresh.usage.prompt_tokens_details.cached_tokens == 0


@pytest.mark.parametrize("model", ["gpt-5-mini", "o3-mini", "gpt-4o", "gpt-4o-mini"])
def test_the_ledger_bills_the_table_and_litellm_agrees(server, model):
    long = "A long system prompt about the household tasks. " * 120
    total, costs = 0.0, []
    for tail in ("first question", "second question"):
        r = chat(server, model, [{"role": "system", "content": long}, {"role": "user", "content": tail}],
                 max_tokens=8000)
        u = r.usage
        cached = u.prompt_tokens_details.cached_tokens
        expected = usd(model, u.prompt_tokens, cached, u.completion_tokens)
        total += expected
        costs.append((litellm.completion_cost(completion_response=r), expected))
    assert cached > 0  # the second request read the cache
    billed = server.counts()["billed"]
    assert billed["usd"] == pytest.approx(total, rel=1e-9)
    assert billed["by_model"][model]["usd"] == pytest.approx(total, rel=1e-9)
    assert billed["replies"] == 2 and billed["cached_tokens"] == cached
    for theirs, ours in costs:
        assert theirs == pytest.approx(ours, rel=0.01)
    assert get(server.api_base.removesuffix("/v1") + "/stats")["billed"]["usd"] == pytest.approx(total)


def test_injected_faults_are_not_billed_and_an_injected_200_is():
    plan = FaultPlan(rates={"server_error": 1.0}, cure_after=1)
    with FaultServer(plan, provider=True, api_key=KEY) as s:
        request = {"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]}
        assert post(s.api_base + "/chat/completions", request)[0] == 500
        status, body = post(s.api_base + "/chat/completions", request)
        assert status == 200 and body["model"] == "gpt-4o-2024-08-06"
        billed = s.counts()["billed"]
        assert (billed["requests"], billed["errors"], billed["replies"]) == (2, 1, 1)
        assert billed["usd"] == pytest.approx(usd("gpt-4o", body["usage"]["prompt_tokens"], 0,
                                                  body["usage"]["completion_tokens"]))
    with FaultServer(FaultPlan(rates={"empty_content": 1.0}), provider=True, api_key=KEY) as s:
        status, body = post(s.api_base + "/chat/completions",
                            {"model": "gpt-5-mini", "messages": [{"role": "user", "content": "x"}]})
        assert status == 200 and body["choices"][0]["message"]["content"] == ""
        assert body["usage"]["completion_tokens"] == body["usage"]["completion_tokens_details"]["reasoning_tokens"] > 0
        assert s.counts()["billed"]["empty_replies"] == 1 and s.counts()["empty_content"] == 1
    with FaultServer(FaultPlan(rates={"rate_limit": 1.0}), provider=True, api_key=KEY) as s:
        status, body = post(s.gemini_base + "/models/gemini-3-pro-preview:generateContent",
                            {"contents": [{"role": "user", "parts": [{"text": "x"}]}]}, {"x-goog-api-key": KEY})
        assert status == 429 and body["error"]["status"] == "RESOURCE_EXHAUSTED"
        assert s.counts()["billed"]["refused"] == 1 and s.counts()["billed"]["usd"] == 0


# ------------------------------------------------------------------------------ Gemini
def test_gemini_thinks_about_10k_tokens_by_default(server):
    spent = []
    for i in range(40):
        r = gemini(server, f"Question number {i}: what is {i} squared?")
        assert r.choices[0].finish_reason == "stop" and r.choices[0].message.content == "OK."
        reasoning = r.usage.completion_tokens_details.reasoning_tokens
        assert 4000 <= reasoning <= 16000
        assert r.usage.completion_tokens == reasoning + 1  # litellm adds the thoughts to the output
        spent.append(reasoning)
    assert 8500 <= sum(spent) / len(spent) <= 11500
    low = gemini(server, "Question number 1: what is 1 squared?", reasoning_effort="low")
    assert 500 <= low.usage.completion_tokens_details.reasoning_tokens <= 3000
    billed = server.counts()["billed"]["by_model"]["gemini-3-pro-preview"]
    assert billed["reasoning_tokens"] == sum(spent) + low.usage.completion_tokens_details.reasoning_tokens


def test_gemini_max_tokens_comes_back_empty_with_finish_reason_length(server):
    r = gemini(server, "Explain the rules of chess.", max_tokens=2000)
    assert r.choices[0].finish_reason == "length"
    assert not r.choices[0].message.content  # litellm gives None: no exception
    assert r.usage.completion_tokens == r.usage.completion_tokens_details.reasoning_tokens == 2000
    status, body = post(server.gemini_base + "/models/gemini-3-pro-preview:generateContent",
                        {"contents": [{"role": "user", "parts": [{"text": "Explain chess."}]}],
                         "generationConfig": {"maxOutputTokens": 100}}, {"x-goog-api-key": KEY})
    cand, meta = body["candidates"][0], body["usageMetadata"]
    assert status == 200 and cand["finishReason"] == "MAX_TOKENS" and "parts" not in cand["content"]
    assert meta["thoughtsTokenCount"] == 100 and meta["candidatesTokenCount"] == 0
    assert meta["totalTokenCount"] == meta["promptTokenCount"] + 100
    billed = server.counts()["billed"]
    assert billed["cut_replies"] == billed["empty_replies"] == 2


def test_gemini_refusals_keys_and_billing(server):
    url = server.gemini_base + "/models/gemini-3-pro-preview:generateContent"
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    for config in ({"maxOutputTokens": 65537}, {"thinkingConfig": {"thinkingLevel": "medium"}},
                   {"max_output_tokens": 0}):
        status, err = post(url, {**body, "generationConfig": config}, {"x-goog-api-key": KEY})
        assert status == 400 and err["error"]["status"] == "INVALID_ARGUMENT" and err["error"]["code"] == 400
    status, err = post(url, body)  # no key at all
    assert status == 403 and err["error"]["status"] == "PERMISSION_DENIED"
    status, err = post(url, body, {"x-goog-api-key": "wrong"})  # Google's answer to a wrong key: 400
    assert status == 400 and err["error"]["status"] == "INVALID_ARGUMENT"
    with pytest.raises(litellm.AuthenticationError):
        gemini(server, "hi", api_key="wrong")
    status, ok = post(url + f"?key={KEY}", body)
    assert status == 200
    long = "A shared preamble for the implicit cache. " * 500  # 5250 tokens, over Gemini's 4096
    first, second = gemini(server, long + "one"), gemini(server, long + "two")
    assert not first.usage.prompt_tokens_details.cached_tokens
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= 4096 and cached % 128 == 0
    expected = sum(usd("gemini-3-pro-preview", r.usage.prompt_tokens, r.usage.prompt_tokens_details.cached_tokens or 0,
                       r.usage.completion_tokens) for r in (first, second))
    meta = ok["usageMetadata"]
    expected += usd("gemini-3-pro-preview", meta["promptTokenCount"], 0,
                    meta["candidatesTokenCount"] + meta["thoughtsTokenCount"])
    billed = server.counts()["billed"]["by_model"]["gemini-3-pro-preview"]
    assert billed["usd"] == pytest.approx(expected, rel=1e-9) and billed["refused"] == 6
    assert get(server.gemini_base + "/models")["models"][0]["name"] == "models/gemini-3-pro-preview"


# ------------------------------------------------------------------------------ embeddings
def test_embeddings_are_unit_vectors_that_keep_shared_words_close(server):
    texts = ["put a clean mug in the cabinet", "put a clean cup in the cabinet", "heat some egg"]
    e = litellm.embedding(model="openai/text-embedding-3-large", input=texts, api_base=server.api_base, api_key=KEY)
    vecs = [d["embedding"] for d in e.data]
    assert [len(v) for v in vecs] == [3072] * 3
    assert all(abs(sum(x * x for x in v) - 1) < 1e-9 for v in vecs)
    cos = [sum(a * b for a, b in zip(vecs[0], v)) for v in vecs[1:]]
    assert cos[0] > 0.6 > cos[1]
    n = sum(prompt_tokens(t) for t in texts)
    assert e.usage.prompt_tokens == n
    small = litellm.embedding(model="openai/text-embedding-3-large", input=texts[0], dimensions=256,
                              api_base=server.api_base, api_key=KEY)
    assert len(small.data[0]["embedding"]) == 256
    billed = server.counts()["billed"]["by_model"]["text-embedding-3-large"]
    assert billed["replies"] == 2
    assert billed["usd"] == pytest.approx((n + prompt_tokens(texts[0])) * 0.13 / 1e6)
    status, _ = post(server.api_base + "/embeddings", {"model": "text-embedding-3-large", "input": "x",
                                                       "dimensions": 4000})
    assert status == 400


# ------------------------------------------------------------------------------ listing, CLI
def test_the_cli_serves_the_emulation():
    proc = subprocess.Popen([sys.executable, "-m", "memrl.testing.fault_server", "--provider", "--port", "0",
                             "--reasoning-scale", "2", "--api-key", KEY], stdout=subprocess.PIPE, text=True)
    try:
        info = json.loads(proc.stdout.readline())
        assert info["provider"]["reasoning_scale"] == 2 and info["gemini_base"].endswith("/v1beta")
        status, _ = post(info["api_base"] + "/chat/completions",
                         {"model": "gpt-5-mini", "messages": [{"role": "user", "content": "x"}], "max_tokens": 5})
        assert status == 400
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# ------------------------------------------------------------------------------ replies
ROOM = ("You are in the middle of a room. Looking quickly around you, you see a cabinet 1, "
        "a drawer 1, and a countertop 1.")


def test_replies_read_through_each_benchmark_parser(tmp_path):
    from pathlib import Path

    from memrl.core.records import Step
    from memrl_envs.alfworld import prompts as alf
    from memrl_envs.bigcodebench.data import read_jsonl
    from memrl_envs.bigcodebench.extract import extract_code
    from memrl_envs.bigcodebench.prompts import build_prompt as bcb_prompt
    from memrl_envs.bigcodebench.prompts import completion_prefix
    from memrl_envs.hle import judge
    from memrl_envs.hle import prompts as hle
    from memrl_envs.hle.data import HLEQuestion
    from memrl_envs.lifelong_db import prompts as db
    from memrl_envs.lifelong_db.data import DbTask
    from memrl_envs.lifelong_os import prompts as osp

    def ask(prompt: str) -> str:
        return reply_for([{"role": "user", "content": prompt}])

    start = alf.format_task_start(ROOM, "put a mug in the cabinet.")
    assert alf.parse_action(ask(alf.build_prompt([], [], start, []))) == "look"
    assert alf.parse_action(ask(alf.build_prompt([], [], start, [Step("look", "x")] * 3))) == "go to cabinet 1"

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "bigcodebench" / "tiny.jsonl"
    for problem in read_jsonl(fixture).problems[:2]:
        for split in ("instruct", "complete"):
            code = extract_code(ask(bcb_prompt(problem, split, [])), problem.entry_point,
                                completion_prefix(problem, split))
            assert code.ok and "def task_func(" in code.code, code

    assert osp.parse_action(ask(osp.build_prompt("List the files.", [], []))) == osp.Action("bash", "ls /")
    assert osp.parse_action(ask(osp.build_prompt("List the files.", [], [Step("ls /", "bin etc")]))).kind == "finish"

    task = DbTask.from_row("1", {"instruction": "How many rows have a > 1?",
                                 "answer_info": {"direct": [[2]], "md5": None, "sql": "SELECT 1;"},
                                 "table_info": {"name": "t", "column_info_list": [{"name": "a", "type": "INT"}],
                                                "row_list": [[1], [2], [3]]}, "skill_list": ["select"]})
    first = db.parse_action(ask(db.build_prompt(task, [], [])))
    assert first == db.Action("sql", "SELECT * FROM `t` LIMIT 5;")
    turn = db.Turn(first, "", "[(1,), (2,), (3,)]")
    assert db.parse_action(ask(db.build_prompt(task, [], [turn]))) == db.Action("answer", "[(1,), (2,), (3,)]")

    for answer_type in ("exactMatch", "multipleChoice"):
        q = HLEQuestion(id="q", question="What is 6 times 7?", answer="42", answer_type=answer_type, category="Math")
        msgs = [{"role": r, "content": c} for r, c in hle.build_messages(q, [])]
        out = reply_for(msgs)
        assert hle.parse_answer(out) and hle.parse_confidence(out) == 50.0
        if answer_type == "multipleChoice":
            assert hle.parse_answer(out) in "ABCDE"
    response = "Explanation: x\nExact Answer: 42\nConfidence: 80%"
    right = judge.parse_verdict(ask(judge.build_prompt("6 times 7?", response, "42")))
    wrong = judge.parse_verdict(ask(judge.build_prompt("6 times 7?", response, "41")))
    assert (right.correct, wrong.correct, right.extracted_final_answer) == (True, False, "42")
    assert json.loads(ask(judge.build_prompt("q", response, "41")))["confidence"] == 80
    assert ask("Task: x\nAttempt:\n> look\n\nWrite a plan.\nPlan:\n1.").startswith(" Go to")
    assert ask("How are you?") == "OK."


def _alfworld(i: int, instruction: str = "After each '>' write exactly one command.") -> str:
    return f"{instruction}\n\nHere is your task.\n{ROOM}\nYour task is to: put mug {i} in the cabinet.\n>"


def test_reasoning_models_sometimes_answer_alfworld_with_thought_and_action(server):
    replies = [chat(server, "gpt-5-mini", _alfworld(i), max_tokens=20000).choices[0].message.content
               for i in range(40)]
    react = [r for r in replies if r.startswith("Thought: ")]
    assert 0.15 <= len(react) / len(replies) <= 0.45
    assert all(r.split("\n")[1] == "Action: look" for r in react)
    assert all(r == " look" for r in replies if r not in react)
    chats = [chat(server, "gpt-4o", _alfworld(i)).choices[0].message.content for i in range(20)]
    assert set(chats) == {" look"}  # a chat model keeps to the format
    cut = [chat(server, "o3-mini", _alfworld(i), max_tokens=20000, stop=["\n"]).choices[0].message.content
           for i in range(40)]
    assert {c for c in cut if c.startswith("Thought: ")} and all("\n" not in c for c in cut)
    with FaultServer(provider=ProviderPlan(react_rate=0.0), api_key=KEY) as plain:
        assert {chat(plain, "gpt-5-mini", _alfworld(i), max_tokens=20000).choices[0].message.content
                for i in range(20)} == {" look"}
    asked = "Answer with two lines: 'Thought: <your reasoning>', then 'Action: <one command>'."
    with FaultServer() as no_emulation:  # any model name, as a self-hosted server answers
        for srv, model in ((server, "gpt-4o"), (no_emulation, "fault")):
            outs = {chat(srv, model, _alfworld(i, asked)).choices[0].message.content for i in range(10)}
            assert all(o.startswith("Thought: ") and o.endswith("\nAction: look") for o in outs), outs
    in_system = [{"role": "system", "content": asked}, {"role": "user", "content": _alfworld(0, "")}]
    assert reply_for(in_system).endswith("\nAction: look") and reply_for(in_system[1:]) == " look"


def test_prompt_tokens_serialize_role_and_content():
    msgs = [{"role": "system", "content": "abc"}, {"role": "user", "content": [{"type": "text", "text": "de"}]}]
    assert serialize(msgs) == "<|system|>\nabc\n<|user|>\nde\n"
    assert prompt_tokens("") == 1 and prompt_tokens("abcde") == 2 and output_tokens("") == 0
