"""Tries whose reply the client never read (issue 32, item 2): a 200 whose body was cut and a
request that hung past the client's timeout. The provider emulation bills both (the reply was
made) and marks them unseen; the client cannot know what they cost, so it counts them apart
from its spend with a bound (memrl.llm.bill, "Unseen tries"). Every reply it did read is in
its spend exactly. A cut Gemini body (litellm: a 422 BadRequestError) is retried like any cut
reply, never taken for a request the provider refuses."""

from __future__ import annotations

import socket

import pytest

from memrl.control.budget import Budget, describe
from memrl.llm.base import LLMError
from memrl.llm.bill import clients_spend
from memrl.llm.litellm_backend import LiteLLMBackend, import_litellm
from memrl.llm.retry import is_fatal, is_transient, unseen_kind
from memrl.testing.fault_server import FaultPlan, FaultServer
from clients import make_client

KEY_ENV = "MEMRL_UNSEEN_TEST_KEY"
litellm = import_litellm()


def client_for(server: FaultServer, model: str, timeout: float = 30, retries: int = 3):
    base = server.gemini_base if model.startswith("gemini/") else server.api_base
    backend = LiteLLMBackend(model, api_base=base, api_key_env=KEY_ENV, timeout=timeout,
                             profile={"max_output_tokens": 65536} if model.startswith("gemini/") else {})
    return make_client(backend, max_retries=retries, backoff_base=0.001, backoff_max=0.01)


@pytest.mark.parametrize("model", ["openai/gpt-4o", "openai/gpt-5-mini", "gemini/gemini-3-pro-preview"])
@pytest.mark.parametrize("fault", ["truncated_json", "hang"])
def test_an_unseen_reply_is_counted_apart_with_a_bound_that_covers_its_bill(monkeypatch, model, fault):
    monkeypatch.setenv(KEY_ENV, "k")
    plan = FaultPlan(rates={fault: 1.0}, cure_after=1, hang_s=3)
    with FaultServer(plan, provider=True, api_key="k") as server:
        client = client_for(server, model, timeout=1.0)
        resp = client.complete(client.request((("user", "Question: what is 2 + 2?"),), purpose="answer",
                                              max_tokens=64))
        assert resp.text and resp.attempts == 1  # the retry's reply; the unseen try bills nothing here
        billed, totals = server.counts()["billed"], client.totals()
    assert billed["replies"] == 2 and billed["unseen_replies"] == 1 and billed["unseen_usd"] > 0
    assert totals["unseen_tries"] == 1 and totals["unseen_unbounded"] == 0 and totals["retries"] == 1
    assert totals["cost_usd"] == pytest.approx(billed["usd"] - billed["unseen_usd"], rel=1e-9)
    assert billed["unseen_usd"] <= totals["unseen_bound_usd"]
    spend = clients_spend([client])
    assert spend.unseen_tries == 1 and spend.to_dict()["unseen_bound_usd"] == round(totals["unseen_bound_usd"], 6)
    assert "1 unseen tries, at most $" in describe(spend, Budget())


def test_a_cut_gemini_body_is_transient_not_fatal(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "k")
    with FaultServer(FaultPlan(rates={"truncated_json": 1.0}), provider=True, api_key="k") as server:
        try:
            litellm.completion(model="gemini/gemini-3-pro-preview", messages=[{"role": "user", "content": "hi"}],
                               api_base=server.gemini_base, api_key="k", num_retries=0)
        except Exception as exc:  # litellm calls it a 422 BadRequestError
            cut = exc
        assert isinstance(cut, litellm.BadRequestError)
        assert unseen_kind(cut) == "unreadable" and is_transient(cut) and not is_fatal(cut)
        client = client_for(server, "gemini/gemini-3-pro-preview", retries=2)
        with pytest.raises(LLMError):  # every try cut: the call fails, the run is not stopped for it
            client.complete(client.request((("user", "hi"),), purpose="answer", max_tokens=64))
        assert client.totals()["unseen_tries"] == 3 and server.counts()["billed"]["unseen_replies"] == 1 + 3


def test_a_request_that_never_reached_the_provider_is_not_unseen(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "k")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backend = LiteLLMBackend("openai/gpt-4o", api_base=f"http://127.0.0.1:{port}/v1", api_key_env=KEY_ENV, timeout=2)
    client = make_client(backend, max_retries=0)
    with pytest.raises(LLMError) as info:
        client.complete(client.request((("user", "hi"),), purpose="answer", max_tokens=8))
    assert unseen_kind(info.value.__cause__) is None and client.totals()["unseen_tries"] == 0


def test_the_api_embedder_counts_its_unseen_tries_with_their_bound(monkeypatch):
    from memrl.llm.embed import LiteLLMEmbedder

    monkeypatch.setenv(KEY_ENV, "k")
    with FaultServer(FaultPlan(rates={"truncated_json": 1.0}, cure_after=1), provider=True, api_key="k") as server:
        embedder = LiteLLMEmbedder("openai/text-embedding-3-large", api_base=server.api_base, api_key_env=KEY_ENV)
        assert embedder.embed(["put a mug in the cabinet", "heat an egg"]).shape == (2, 3072)
        billed, totals = server.counts()["billed"], embedder.totals()
    assert billed["replies"] == 2 and billed["unseen_replies"] == 1 and totals["unseen_tries"] == 1
    assert totals["cost_usd"] == pytest.approx(billed["usd"] - billed["unseen_usd"], rel=1e-9)
    assert 0 < billed["unseen_usd"] <= totals["unseen_bound_usd"]
    assert clients_spend([embedder]).unseen_tries == 1
