"""What the provider emulation refuses, in each provider's status, error type and message shape
(memrl.testing.provider_rules): a missing or wrong key on every route, a model it does not
serve on every route, the parameters OpenAI's reasoning models and Gemini 3 Pro refuse, and a
prompt past the model's context window; each also as litellm 1.106.12 maps it, so the client
meets the exception class it would meet at the provider. Also: `n` choices and Gemini's
candidates are each billed, and the long-prompt price tier."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from memrl.llm.litellm_backend import import_litellm
from memrl.testing.fault_server import FaultServer
from memrl.testing.provider import CATALOGUE, EMULATED_KEYS

KEY = "k"
litellm = import_litellm()
GENERATE = "/models/gemini-3-pro-preview:generateContent"


def post(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def get(url: str, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


BEARER = {"Authorization": f"Bearer {KEY}"}
GOOG = {"x-goog-api-key": KEY}


def chat_body(model: str, text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], **extra}


def gemini_body(text: str = "hi", **config: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"contents": [{"role": "user", "parts": [{"text": text}]}]}
    if config:
        body["generationConfig"] = config
    return body


def text_of_tokens(n: int) -> str:
    """A one-message prompt the emulation counts as exactly n tokens ("<|user|>\\n" + text +
    "\\n" at 4 characters a token)."""
    return "a" * (4 * n - len("<|user|>\n\n"))


@pytest.fixture
def server():
    with FaultServer(provider=True, api_key=KEY) as s:
        yield s


# ------------------------------------------------------------------------------ keys
def test_every_route_refuses_a_missing_or_wrong_key_as_its_provider_does(server):
    openai_routes = [(server.api_base + "/chat/completions", chat_body("gpt-4o")),
                     (server.api_base + "/embeddings", {"model": "text-embedding-3-large", "input": "x"})]
    for url, body in openai_routes:
        status, err = post(url, body)
        assert status == 401 and err["error"]["code"] is None
        assert err["error"]["type"] == "invalid_request_error"
        assert err["error"]["message"].startswith("You didn't provide an API key.")
        status, err = post(url, body, {"Authorization": "Bearer sk-not-the-right-one"})
        assert status == 401 and err["error"]["code"] == "invalid_api_key"
        assert err["error"]["message"].startswith("Incorrect API key provided: sk-")
        assert "sk-not-the-right-one" not in err["error"]["message"]  # shown masked
        assert post(url, body, BEARER)[0] == 200
    assert get(server.api_base + "/models", {})[0] == 401 and get(server.api_base + "/models", BEARER)[0] == 200
    url = server.gemini_base + GENERATE
    status, err = post(url, gemini_body())
    assert status == 403 and err["error"]["status"] == "PERMISSION_DENIED"
    status, err = post(url, gemini_body(), {"x-goog-api-key": "wrong"})
    assert (status, err["error"]["status"]) == (400, "INVALID_ARGUMENT")
    assert err["error"]["message"] == "API key not valid. Please pass a valid API key."
    assert err["error"]["details"][0]["reason"] == "API_KEY_INVALID"
    assert get(server.gemini_base + "/models", {})[0] == 403 and get(server.gemini_base + "/models", GOOG)[0] == 200
    billed = server.counts()["billed"]
    assert billed["usd"] == pytest.approx(sum(r["usd"] for r in billed["by_model"].values()))
    assert billed["refused"] == 6 and billed["replies"] == 2
    # through litellm, both providers' refusals are authentication errors (never retried)
    for model, base in (("openai/gpt-4o", server.api_base), ("gemini/gemini-3-pro-preview", server.gemini_base)):
        with pytest.raises(litellm.AuthenticationError):
            litellm.completion(model=model, messages=[{"role": "user", "content": "hi"}], api_base=base,
                               api_key="wrong", num_retries=0)


def test_the_emulation_checks_keys_even_when_given_none():
    with FaultServer(provider=True) as s:  # takes EMULATED_KEYS, one per provider
        assert post(s.api_base + "/chat/completions", chat_body("gpt-4o"), BEARER)[0] == 401
        ok = {"Authorization": f"Bearer {EMULATED_KEYS['openai']}"}
        assert post(s.api_base + "/chat/completions", chat_body("gpt-4o"), ok)[0] == 200
        url = s.gemini_base + GENERATE
        assert post(url, gemini_body(), {"x-goog-api-key": EMULATED_KEYS["openai"]})[0] == 400
        assert post(url, gemini_body(), {"x-goog-api-key": EMULATED_KEYS["google"]})[0] == 200
        assert post(url + f"?key={EMULATED_KEYS['google']}", gemini_body())[0] == 200


# ------------------------------------------------------------------------------ models
def test_a_model_it_does_not_serve_is_refused_on_every_route(server):
    for model in ("gpt-4x", "fault", "text-embedding-3-large", "gemini-3-pro-preview"):  # the last two: other routes
        status, err = post(server.api_base + "/chat/completions", chat_body(model), BEARER)
        assert status == 404 and err["error"]["code"] == "model_not_found", model
        assert err["error"]["message"] == f"The model `{model}` does not exist or you do not have access to it."
    status, err = post(server.api_base + "/embeddings", {"model": "gpt-4o", "input": "x"}, BEARER)
    assert status == 404 and err["error"]["code"] == "model_not_found"
    status, err = post(server.gemini_base + "/models/gemini-3-pro:generateContent", gemini_body(), GOOG)
    assert status == 404 and err["error"]["status"] == "NOT_FOUND"
    assert server.counts()["billed"]["by_model"]["gpt-4x"]["refused"] == 1
    # a misspelled model fails through litellm as at the provider: NotFoundError, no retry cures it
    for model, base in (("openai/gpt-4x", server.api_base), ("gemini/gemini-3-pro", server.gemini_base)):
        with pytest.raises(litellm.NotFoundError):
            litellm.completion(model=model, messages=[{"role": "user", "content": "hi"}], api_base=base,
                               api_key=KEY, num_retries=0)
    # the key is checked before the model, as a provider does
    assert post(server.api_base + "/chat/completions", chat_body("gpt-4x"))[0] == 401
    # without the emulation, the fault server answers any name (a self-hosted server's way)
    with FaultServer() as plain:
        assert post(plain.api_base + "/chat/completions", chat_body("gpt-4x"))[0] == 200


# ------------------------------------------------------------------------------ parameters
@pytest.mark.parametrize("model", ["gpt-5-mini", "o3-mini"])
@pytest.mark.parametrize("param, value", [("presence_penalty", 0.5), ("frequency_penalty", 0.5), ("logprobs", True),
                                          ("top_logprobs", 2), ("logit_bias", {"1": 5}), ("top_p", 0.9)])
def test_openai_reasoning_models_refuse_what_their_guide_lists(server, model, param, value):
    status, err = post(server.api_base + "/chat/completions", chat_body(model, **{param: value}), BEARER)
    assert status == 400
    assert err["error"] == {"message": f"Unsupported parameter: '{param}' is not supported with this model.",
                            "type": "invalid_request_error", "param": param, "code": "unsupported_parameter"}
    ok = post(server.api_base + "/chat/completions", chat_body("gpt-4o", **{param: value}), BEARER)
    assert ok[0] == 200  # a chat model takes it
    assert server.counts()["billed"]["by_model"][model]["refused"] == 1


def test_each_model_refuses_a_temperature_in_its_own_words(server):
    url = server.api_base + "/chat/completions"
    err = post(url, chat_body("o3-mini", temperature=0.2), BEARER)[1]["error"]
    assert (err["code"], err["message"]) == ("unsupported_parameter",
                                             "Unsupported parameter: 'temperature' is not supported with this model.")
    err = post(url, chat_body("gpt-5-mini", temperature=0.2), BEARER)[1]["error"]
    assert err["code"] == "unsupported_value" and "Only the default (1) value is supported." in err["message"]
    assert post(url, chat_body("o3-mini", temperature=1), BEARER)[0] == 200


def test_litellm_drops_some_refused_parameters_and_sends_others(server):
    """What reaches the provider is litellm's mapping: for gpt-5-mini it drops penalties and
    logprobs (the call goes through), for o3-mini it sends logit_bias (refused)."""
    def call(model: str, **kw: Any) -> Any:
        return litellm.completion(model=f"openai/{model}", messages=[{"role": "user", "content": "hi"}],
                                  api_base=server.api_base, api_key=KEY, drop_params=True, num_retries=0,
                                  max_tokens=20000, **kw)
    assert call("gpt-5-mini", presence_penalty=0.5, logprobs=True, logit_bias={"1": 5}).choices[0].message.content
    with pytest.raises(litellm.BadRequestError, match="logit_bias"):
        call("o3-mini", logit_bias={"1": 5})


def test_gemini_3_pro_refuses_logprobs(server):
    status, err = post(server.gemini_base + GENERATE, gemini_body(responseLogprobs=True), GOOG)
    assert (status, err["error"]["status"]) == (400, "INVALID_ARGUMENT")
    assert err["error"]["message"] == "Logprobs is not enabled for models/gemini-3-pro-preview"
    with pytest.raises(litellm.BadRequestError, match="Logprobs is not enabled"):
        litellm.completion(model="gemini/gemini-3-pro-preview", messages=[{"role": "user", "content": "hi"}],
                           api_base=server.gemini_base, api_key=KEY, logprobs=True, num_retries=0)


# ------------------------------------------------------------------------------ context windows
@pytest.mark.parametrize("model", ["gpt-4o", "gpt-4o-mini", "gpt-5-mini", "o3-mini"])
def test_a_prompt_past_the_input_limit_is_refused_as_context_length_exceeded(server, model):
    limit = CATALOGUE[model].max_input_tokens
    url = server.api_base + "/chat/completions"
    status, err = post(url, chat_body(model, text_of_tokens(limit + 1)), BEARER)
    assert status == 400 and (err["error"]["code"], err["error"]["param"]) == ("context_length_exceeded", "messages")
    assert err["error"]["message"].startswith(f"This model's maximum context length is "
                                              f"{CATALOGUE[model].context_window} tokens. However, your messages "
                                              f"resulted in {limit + 1} tokens.")
    budget = {"max_completion_tokens" if model in ("gpt-5-mini", "o3-mini") else "max_tokens": 1000}
    status, body = post(url, chat_body(model, text_of_tokens(limit), **budget), BEARER)
    if CATALOGUE[model].context_window == limit:  # the budget counts against the same window
        assert status == 400 and f"you requested {limit + 1000} tokens ({limit} in the messages, 1000 in the " \
                                 "completion)" in body["error"]["message"]
    else:
        assert status == 200 and body["usage"]["prompt_tokens"] == limit
    with pytest.raises(litellm.ContextWindowExceededError):  # litellm's class for it: never retried
        litellm.completion(model=f"openai/{model}", messages=[{"role": "user", "content": text_of_tokens(limit + 1)}],
                           api_base=server.api_base, api_key=KEY, num_retries=0)


def test_gemini_refuses_a_prompt_past_its_input_limit(server):
    limit = CATALOGUE["gemini-3-pro-preview"].max_input_tokens
    status, err = post(server.gemini_base + GENERATE, gemini_body(text_of_tokens(limit + 1)), GOOG)
    assert (status, err["error"]["status"]) == (400, "INVALID_ARGUMENT")
    assert err["error"]["message"] == (f"The input token count ({limit + 1}) exceeds the maximum number of "
                                       f"tokens allowed ({limit}).")
    with pytest.raises(litellm.ContextWindowExceededError):
        litellm.completion(model="gemini/gemini-3-pro-preview", api_base=server.gemini_base, api_key=KEY,
                           messages=[{"role": "user", "content": text_of_tokens(limit + 1)}], num_retries=0)
    assert server.counts()["billed"]["refused"] == 2 and server.counts()["billed"]["usd"] == 0


# ------------------------------------------------------------------------------ choices and tiers
def test_n_choices_and_candidates_are_each_drawn_and_billed(server):
    one = post(server.api_base + "/chat/completions", chat_body("gpt-5-mini", max_completion_tokens=20000), BEARER)[1]
    three = post(server.api_base + "/chat/completions", chat_body("gpt-5-mini", max_completion_tokens=20000, n=3),
                 BEARER)[1]
    assert [c["index"] for c in three["choices"]] == [0, 1, 2]
    spent = three["usage"]["completion_tokens_details"]["reasoning_tokens"]
    assert spent > one["usage"]["completion_tokens_details"]["reasoning_tokens"]  # three draws, the first the same
    assert three["usage"]["completion_tokens"] == spent + 3 * one["usage"]["completion_tokens"] \
        - 3 * one["usage"]["completion_tokens_details"]["reasoning_tokens"]
    gem = post(server.gemini_base + GENERATE, gemini_body(candidateCount=2), GOOG)[1]
    assert len(gem["candidates"]) == 2 and gem["usageMetadata"]["thoughtsTokenCount"] >= 2 * 4000
    status, err = post(server.gemini_base + GENERATE, gemini_body(candidateCount=9), GOOG)
    assert (status, err["error"]["status"]) == (400, "INVALID_ARGUMENT")
    billed = server.counts()["billed"]["by_model"]
    assert billed["gpt-5-mini"]["completion_tokens"] == one["usage"]["completion_tokens"] \
        + three["usage"]["completion_tokens"]
    meta = gem["usageMetadata"]
    assert billed["gemini-3-pro-preview"]["usd"] == pytest.approx(
        (meta["promptTokenCount"] * 2.00 + (meta["candidatesTokenCount"] + meta["thoughtsTokenCount"]) * 12.00) / 1e6)


def test_gemini_bills_a_prompt_over_200k_tokens_at_the_long_tier(server):
    status, body = post(server.gemini_base + GENERATE, gemini_body(text_of_tokens(200_001), maxOutputTokens=65536),
                        GOOG)
    assert status == 200
    meta = body["usageMetadata"]
    out = meta["candidatesTokenCount"] + meta["thoughtsTokenCount"]
    assert server.counts()["billed"]["usd"] == pytest.approx((200_001 * 4.00 + out * 18.00) / 1e6)
