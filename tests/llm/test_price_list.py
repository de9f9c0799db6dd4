"""The project's own prices (memrl.llm.price_list): pinned against the provider's published
table typed here as a literal, and read by both the client (memrl.llm.profile, every tier)
and the provider emulation (memrl.testing.catalogue), so a reply's recorded cost is the
emulation's bill on both sides of the 200k-token tier."""

from __future__ import annotations

import pytest

from memrl.llm.litellm_backend import LiteLLMBackend
from memrl.llm.price_list import PRICE_LIST, table_for
from memrl.llm.profile import litellm_profile
from memrl.testing.catalogue import CATALOGUE
from memrl.testing.fault_server import FaultServer
from clients import make_client

# Google's published Gemini 3 Pro Preview prices, paid tier, standard (ai.google.dev/gemini-api/docs/pricing),
# USD per million tokens: (prompts up to, input, context-caching input, output incl. thinking)
GEMINI_3_PRO_PUBLISHED = [(200_000, 2.00, 0.20, 12.00), (None, 4.00, 0.40, 18.00)]


def test_the_price_list_is_the_published_table():
    table = table_for("gemini/gemini-3-pro-preview")
    assert table is PRICE_LIST["gemini-3-pro-preview"] is table_for("models/gemini-3-pro-preview")
    assert [(t.up_to, t.input, t.cached_input, t.output) for t in table.tiers] == GEMINI_3_PRO_PUBLISHED
    assert table.tier(200_000).input == 2.00 and table.tier(200_001).input == 4.00


def test_the_client_and_the_emulation_read_the_same_tiers():
    prices = litellm_profile({"model": "gemini/gemini-3-pro-preview"}).prices
    spec = CATALOGUE["gemini-3-pro-preview"]
    assert spec.table is PRICE_LIST["gemini-3-pro-preview"]
    for prompt in (1, 200_000, 200_001, 1_000_000):
        for cached, completion in ((0, 0), (prompt // 2, 5_000)):
            assert prices.cost(prompt, completion, cached) == pytest.approx(spec.usd(prompt, cached, completion),
                                                                            rel=1e-12)
    assert prices.per_mtok()["prompts_over_200000_tokens"]["per_mtok_out"] == 18.0
    # the plan's estimate over many calls takes the tier of the mean prompt, not of the sum
    assert prices.cost(300_000, 0, 0, calls=3) == pytest.approx(300_000 * 2.00 / 1e6)
    # a price in the llm config overrides the list (one tier)
    flat = litellm_profile({"model": "gemini/gemini-3-pro-preview", "price_per_mtok_in": 1.0,
                            "price_per_mtok_out": 1.0}).prices
    assert flat.source == "llm config" and flat.above is None


def test_a_reply_over_200k_tokens_is_recorded_at_what_the_emulation_billed(monkeypatch):
    monkeypatch.setenv("MEMRL_PRICE_TEST_KEY", "k")
    with FaultServer(provider=True, api_key="k") as server:
        backend = LiteLLMBackend("gemini/gemini-3-pro-preview", api_base=server.gemini_base,
                                 api_key_env="MEMRL_PRICE_TEST_KEY", profile={"max_output_tokens": 65536})
        client = make_client(backend, max_retries=0)
        for words in (10, 210_000):  # a short prompt, and one past 200k tokens (4 characters a token here)
            client.complete(client.request((("user", "word " * words),), purpose="answer", max_tokens=100))
        billed = server.counts()["billed"]
        assert billed["replies"] == 2 and billed["by_model"]["gemini-3-pro-preview"]["prompt_tokens"] > 250_000
        assert client.totals()["cost_usd"] == pytest.approx(billed["usd"], rel=1e-9)
