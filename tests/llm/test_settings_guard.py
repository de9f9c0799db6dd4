"""No guard turns itself off (issue 32, item 10): the profile's settings guard (which settings
litellm actually sends a model: memrl.llm.profile `_sent_params`) catches only what litellm
raises for a model it does not know, says then that it could not apply and why, and keeps the
stop sequences holding by applying them in the client; any other error of litellm propagates."""

from __future__ import annotations

import pytest

from memrl.llm.base import LLMResponse
from memrl.llm.profile import litellm_profile
from clients import make_client


def test_a_model_litellm_knows_has_its_guard_applied():
    for model in ("openai/gpt-5-mini", "openai/gpt-4o", "gemini/gemini-3-pro-preview", "openai/my-served-model"):
        p = litellm_profile({"model": model})
        assert p.guard_off is None and p.describe()["settings_guard"] == "applied", model
    assert not litellm_profile({"model": "openai/gpt-5-mini"}).honors_stop  # the guard's finding


@pytest.mark.parametrize("model, why", [("my-served-model", "litellm names no provider for 'my-served-model'"),
                                        ("nosuch/model-x", "litellm names no provider for 'nosuch/model-x'")])
def test_a_model_whose_provider_litellm_does_not_know_says_the_guard_could_not_apply(model, why):
    p = litellm_profile({"model": model, "temperature": 0.3})
    assert p.guard_off is not None and why in p.guard_off
    assert p.describe()["settings_guard"] == p.guard_off and p.describe()["stop"] == "provider and client"
    assert p.conflicts(0.3, 0.5) == []  # nothing is known to refuse
    assert p.client_stops and any("does not know" in n for n in p.notes)


def test_stops_hold_when_the_guard_could_not_apply():
    class Backend:
        model_id = "served"
        profile = litellm_profile({"model": "my-served-model"})

        def generate(self, request):  # a server that ignored the stop sequence
            return LLMResponse(text="go to desk 1\nthen more", prompt_tokens=3, completion_tokens=5)

    client = make_client(Backend(), max_retries=0)
    resp = client.complete(client.request((("user", "p"),), purpose="act", stop=("\n",)))
    assert resp.text == "go to desk 1" and resp.stop_applied and client.totals()["client_stops"] == 1


def test_any_other_error_of_litellm_propagates(monkeypatch):
    import litellm.utils

    def broken(**kwargs):
        raise TypeError("get_optional_params() got an unexpected keyword argument")

    monkeypatch.setattr(litellm.utils, "get_optional_params", broken)
    with pytest.raises(TypeError, match="unexpected keyword"):
        litellm_profile({"model": "openai/gpt-5-mini"})


def test_what_litellm_raises_for_an_unmappable_model_turns_the_guard_off_with_its_reason(monkeypatch):
    import litellm.utils
    from litellm.exceptions import UnsupportedParamsError

    def refuses(**kwargs):
        raise UnsupportedParamsError(status_code=400, message="no mapping for this model")

    monkeypatch.setattr(litellm.utils, "get_optional_params", refuses)
    p = litellm_profile({"model": "openai/gpt-5-mini"})
    assert "UnsupportedParamsError: " in p.guard_off and "no mapping for this model" in p.guard_off
