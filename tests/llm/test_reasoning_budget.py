"""What a model is and what a call costs: the profile (memrl.llm.profile), the one budget rule,
a budget that ran out, billed retries, client-side stop sequences, unpriced models."""

from __future__ import annotations

import threading

import pytest

from memrl.config.sections import LLMSettings
from memrl.core.stops import Tripwire
from memrl.llm.base import BudgetExhaustedError, LLMError, LLMRequest, LLMResponse
from clients import make_client

from memrl.llm.client import LLMClient
from memrl.control.wiring import build_client
from memrl.llm.profile import REASONING_HEADROOM, ModelProfile, Prices, litellm_profile, plain_profile
from memrl.llm.response_cache import ResponseCache


# ------------------------------------------------------------------ profiles from litellm
def test_litellm_knows_gpt5_mini_as_a_reasoning_model_that_takes_no_stop_or_top_p() -> None:
    p = litellm_profile({"model": "openai/gpt-5-mini"})
    assert p.reasoning and p.provider == "openai"
    assert p.effective_effort == "medium" and p.effort is None  # the provider's default, not sent
    assert not p.honors_stop and not p.takes_top_p and p.fixed_temperature == 1.0
    assert p.max_output_tokens == 128000
    assert p.prices is not None and p.prices.source == "litellm's price list"
    assert p.prices.prompt == pytest.approx(0.25e-6) and p.prices.cached_prompt == pytest.approx(0.025e-6)
    assert p.prices.completion == pytest.approx(2e-6)


def test_a_plain_chat_model_takes_every_setting_and_keeps_its_budget() -> None:
    p = litellm_profile({"model": "openai/gpt-4o-mini"})
    assert not p.reasoning and p.honors_stop and p.takes_top_p and p.fixed_temperature is None
    assert p.budget(64) == 64 and p.headroom == 0
    assert p.conflicts(0.0, 0.9) == []


def test_gemini_3_is_a_reasoning_model_litellm_cannot_price() -> None:
    import litellm

    assert float(litellm.get_model_info("gemini/gemini-3-pro-preview").get("input_cost_per_token") or 0) == 0
    p = litellm_profile({"model": "gemini/gemini-3-pro-preview"})
    assert p.reasoning and p.effective_effort == "high" and p.honors_stop
    # priced from the project's price list (memrl.llm.price_list; tests/llm/test_price_list.py)
    assert p.priced and p.prices.source.startswith("memrl price list")
    priced = litellm_profile({"model": "gemini/gemini-3-pro-preview", "price_per_mtok_in": 2.0,
                              "price_per_mtok_out": 12.0, "price_per_mtok_cached_in": 0.2,
                              "max_output_tokens": 65536})
    assert priced.priced and priced.prices.source == "llm config"
    # 1,000 prompt tokens of which 400 cached, 100 completion: 600*2 + 400*0.2 + 100*12 per 1e6
    assert priced.prices.cost(1000, 100, 400) == pytest.approx((1200 + 80 + 1200) / 1e6)
    # the budget rule caps at the model's output limit
    assert priced.budget(65536) == 65536 and priced.budget(64) == 64 + REASONING_HEADROOM["high"]


def test_the_budget_rule_adds_headroom_by_effort_or_as_configured() -> None:
    base = {"model": "openai/gpt-5-mini"}
    assert litellm_profile(base).budget(64) == 64 + REASONING_HEADROOM["medium"]
    assert litellm_profile({**base, "reasoning_effort": "low"}).budget(64) == 64 + REASONING_HEADROOM["low"]
    assert litellm_profile({**base, "reasoning_headroom": 0}).budget(4096) == 4096
    assert litellm_profile({**base, "reasoning_headroom": 100}).budget(4) == 104
    # the config can call a model litellm does not know a reasoning one
    assert litellm_profile({"model": "openai/some-server-model", "reasoning": True}).budget(10) > 10


def test_a_temperature_or_top_p_the_model_would_never_see_is_refused_naming_the_key() -> None:
    with pytest.raises(ValueError, match=r"llm\.temperature: openai/gpt-5-mini takes only temperature 1"):
        build_client(LLMSettings(name="m", backend="litellm", model="openai/gpt-5-mini", temperature=0.0,
                                 cache=False, api_key_env=None))
    with pytest.raises(ValueError, match=r"env\.judge\.top_p: .* does not take top_p"):
        build_client(LLMSettings(name="m", backend="litellm", model="openai/gpt-5-mini", temperature=1.0,
                                 top_p=0.9, cache=False), section="env.judge")
    ok = build_client(LLMSettings(name="m", backend="litellm", model="openai/gpt-5-mini", temperature=1.0,
                                  top_p=1.0, cache=False))
    assert ok.profile.reasoning


def test_prices_by_hand_need_both_rates() -> None:
    with pytest.raises(ValueError, match="give both"):
        litellm_profile({"model": "openai/x", "price_per_mtok_in": 1.0})


# ------------------------------------------------------------------ the client
class Provider:
    """A backend playing a hosted model: each reply in `replies` is (text, finish, reasoning)."""

    model_id = "provider"
    empty_reply_is_fault = True

    def __init__(self, replies, profile: ModelProfile, prompt_tokens: int = 100) -> None:
        self.replies = list(replies)
        self.profile = profile
        self.prompt_tokens = prompt_tokens
        self.requests: list[LLMRequest] = []
        self.lock = threading.Lock()

    def generate(self, request: LLMRequest) -> LLMResponse:
        with self.lock:
            self.requests.append(request)
            text, finish, reasoning = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        completion = reasoning + len(text.split())
        return LLMResponse(text=text, prompt_tokens=self.prompt_tokens, completion_tokens=completion,
                           reasoning_tokens=reasoning, cached_prompt_tokens=self.prompt_tokens // 2,
                           finish_reason=finish, cost_usd=completion * 1e-6, model=self.model_id,
                           priced=self.profile.priced)


REASONER = ModelProfile(model="provider", reasoning=True, default_effort="medium", honors_stop=False,
                        prices=Prices(prompt=1e-7, completion=1e-6))


def client_for(backend, **kw) -> LLMClient:
    return make_client(backend, backoff_base=0.001, backoff_max=0.01, **kw)


def test_a_budget_that_runs_out_is_named_on_its_first_occurrence_and_not_retried() -> None:
    backend = Provider([("", "length", 8256)], REASONER)
    wire = Tripwire()
    client = client_for(backend, max_retries=6, tripwire=wire)
    ep = client.episode("s0/e1/t1", seed=1)
    with pytest.raises(LLMError) as info:
        ep.complete("the prompt", purpose="act", max_tokens=64, budget_key="env.max_tokens")
    assert isinstance(info.value, BudgetExhaustedError)
    assert len(backend.requests) == 1  # never retried with the same budget
    sent = backend.requests[0]
    assert sent.max_tokens == 64 + REASONING_HEADROOM["medium"] and sent.answer_tokens == 64
    message = str(info.value)
    for part in ("act call", "8256 tokens (64 for the answer + 8192 reasoning headroom)",
                 "8256 of its 8256 completion tokens on reasoning", "env.max_tokens",
                 "llm.reasoning_headroom", "llm.reasoning_effort"):
        assert part in message, (part, message)
    assert wire.tripped is not None and "env.max_tokens" in wire.tripped.message
    # billed, and counted: in the client's totals and in the episode's meter
    t = client.totals()
    assert t["billed_replies"] == 1 and t["empty_replies"] == 1 and t["truncated_replies"] == 1
    assert t["completion_tokens"] == 8256 and t["reasoning_tokens"] == 8256
    assert t["cost_usd"] == pytest.approx(8256e-6)
    m = ep.meter
    assert m.completion_tokens == 8256 and m.reasoning_tokens == 8256 and m.cost_usd == pytest.approx(8256e-6)
    assert m.model_calls == [{"purpose": "act", "key": client.key(sent), "failed": True,
                              "finish": "length", "reasoning": 8256}]


def test_empty_replies_that_are_retried_are_all_billed_to_the_answer(tmp_path) -> None:
    backend = Provider([("", "stop", 50), ("", "stop", 60), ("go to desk 1", "stop", 70)], REASONER)
    cache = ResponseCache(tmp_path / "c.sqlite")
    client = client_for(backend, max_retries=4, cache=cache)
    ep = client.episode("s0/e1/t1", seed=1)
    assert ep.complete("p", purpose="act", max_tokens=64) == "go to desk 1"
    assert len(backend.requests) == 3
    # the three tries: 3 x 100 prompt tokens, 50 + 60 + (70 + 4) completion tokens
    assert ep.meter.prompt_tokens == 300 and ep.meter.completion_tokens == 184
    assert ep.meter.reasoning_tokens == 180 and ep.meter.cached_prompt_tokens == 150
    assert ep.meter.cost_usd == pytest.approx(184e-6)
    assert ep.meter.model_calls[0]["attempts"] == 3 and ep.meter.model_calls[0]["reasoning"] == 180
    t = client.totals()
    assert t["billed_replies"] == 3 and t["empty_replies"] == 2 and t["prompt_tokens"] == 300
    assert t["retries"] == 2 and t["calls"] == 1
    # a replay from the cache reads the same meter, and costs nothing now
    again = client_for(Provider([("never asked", "stop", 0)], REASONER), cache=cache)
    ep2 = again.episode("s0/e1/t1", seed=1)
    assert ep2.complete("p", purpose="act", max_tokens=64) == "go to desk 1"
    assert ep2.meter.completion_tokens == 184 and ep2.meter.reasoning_tokens == 180
    assert again.totals()["billed_replies"] == 0 and again.totals()["cache_hits"] == 1


def test_a_failed_call_still_counts_what_its_tries_were_billed() -> None:
    backend = Provider([("", "stop", 40)], REASONER)
    client = client_for(backend, max_retries=2)
    ep = client.episode("s0/e1/t1", seed=None)
    with pytest.raises(LLMError):
        ep.complete("p", purpose="write-reflection", max_tokens=160)
    assert len(backend.requests) == 3
    assert ep.meter.completion_tokens == 120 and ep.meter.prompt_tokens == 300
    assert client.totals()["billed_replies"] == 3 and client.totals()["failures"] == 1


def test_stop_sequences_a_provider_drops_are_applied_by_the_client_and_recorded() -> None:
    backend = Provider([("Thought: look first\nAction: look", "stop", 20)], REASONER)
    client = client_for(backend)
    ep = client.episode("s0/e1/t1", seed=None)
    assert ep.honors_stop is False
    assert ep.complete("p", purpose="act", max_tokens=64, stop=("\n",)) == "Thought: look first"
    assert ep.meter.model_calls[0]["stop"] == "client" and client.totals()["client_stops"] == 1
    # where the provider takes stops, the client leaves the reply alone
    plain = Provider([("a\nb", "stop", 0)], plain_profile("plain"))
    ep = client_for(plain).episode("x", seed=None)
    assert ep.honors_stop and ep.complete("p", purpose="act", stop=("\n",)) == "a\nb"


def test_a_plain_model_keeps_its_budget_and_its_cache_keys() -> None:
    backend = Provider([("ok", "stop", 0)], plain_profile("plain"))
    client = client_for(backend, defaults={"max_tokens": 48})
    ep = client.episode("x", seed=None)
    ep.complete("p", purpose="act")
    ep.complete("p", purpose="act", max_tokens=64)
    assert [r.max_tokens for r in backend.requests] == [48, 64]
    # what the call is for never enters the key
    a = LLMRequest(messages=(("user", "p"),), max_tokens=64)
    b = LLMRequest(messages=(("user", "p"),), max_tokens=64, purpose="act", answer_tokens=64, budget_key="k")
    assert client.key(a) == client.key(b)


def test_an_unpriced_model_is_flagged_never_counted_as_free() -> None:
    profile = ModelProfile(model="provider", prices=None)
    backend = Provider([("answer", "stop", 0)], profile)
    client = client_for(backend)
    ep = client.episode("x", seed=None)
    ep.complete("p", purpose="answer")
    assert ep.meter.unpriced_calls == 1 and ep.meter.model_calls[0]["unpriced"] is True
    assert client.totals()["unpriced_calls"] == 1
    from memrl.control.budget import Budget, describe
    from memrl.llm.bill import clients_spend

    spend = clients_spend([client])
    assert spend.unpriced_calls == 1 and "unpriced" in describe(spend, Budget())


def test_a_scripted_model_can_play_a_reasoning_one_for_the_budget_rule() -> None:
    client = build_client(LLMSettings(name="s", backend="scripted", cache=False, reasoning=True,
                                      reasoning_headroom=500, max_output_tokens=600))
    req = client.request((("user", "x"),), purpose="act", max_tokens=64)
    assert req.max_tokens == 564 and req.answer_tokens == 64
    assert client.request((("user", "x"),), purpose="code", max_tokens=400).max_tokens == 600


def test_a_reply_the_content_filter_withheld_is_that_calls_failure_and_is_not_retried() -> None:
    backend = Provider([("", "content_filter", 0)], REASONER)
    wire = Tripwire()
    client = client_for(backend, max_retries=5, tripwire=wire)
    with pytest.raises(LLMError, match="content filter withheld the reply to this judge"):
        client.episode("x", seed=None).complete("p", purpose="judge")
    assert len(backend.requests) == 1 and wire.tripped is None  # one prompt's failure, not the run's


def test_no_temperature_means_the_models_own() -> None:
    fixed = ModelProfile(model="provider", fixed_temperature=1.0)
    client = client_for(Provider([("ok", "stop", 0)], fixed), defaults={"temperature": None})
    assert client.request((("user", "x"),), purpose="judge").temperature == 1.0
    plain = client_for(Provider([("ok", "stop", 0)], plain_profile("p")), defaults={"temperature": None})
    assert plain.request((("user", "x"),), purpose="judge").temperature == 0.0
    ok = build_client(LLMSettings(name="judge", backend="litellm", model="openai/o3-mini", temperature=None,
                                  cache=False), section="env.judge")
    assert ok.request((("user", "x"),), purpose="judge").temperature == 1.0
