"""Response cache: what the key covers, round-trips, sharing between connections."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from memrl.llm.base import LLMRequest, LLMResponse
from memrl.llm.response_cache import ResponseCache, request_key

BASE = LLMRequest(
    messages=(("system", "be brief"), ("user", "hi")),
    max_tokens=32,
    temperature=0.0,
    top_p=1.0,
    stop=("\n",),
    sample_id="s0/e1/t1/act/0",
    seed=7,
)


def test_key_is_stable_hex() -> None:
    k = request_key("m", BASE)
    assert k == request_key("m", dataclasses.replace(BASE))
    assert len(k) == 64 and all(c in "0123456789abcdef" for c in k)


def test_temperature_zero_ignores_sample_id() -> None:
    other = dataclasses.replace(BASE, sample_id="s1/e9/t2/act/5")
    assert request_key("m", BASE) == request_key("m", other)


def test_positive_temperature_distinguishes_sample_id() -> None:
    a = dataclasses.replace(BASE, temperature=0.7)
    b = dataclasses.replace(a, sample_id="s0/e1/t1/act/1")
    assert request_key("m", a) != request_key("m", b)
    assert request_key("m", a) == request_key("m", dataclasses.replace(a))


@pytest.mark.parametrize(
    "change",
    [
        {"messages": (("system", "be brief"), ("user", "hi!"))},
        {"messages": (("user", "be brief"), ("user", "hi"))},
        {"max_tokens": 33},
        {"temperature": 0.5},
        {"top_p": 0.9},
        {"stop": ("\n", "END")},
        {"stop": ()},
        {"seed": 8},
        {"seed": None},
    ],
)
def test_any_parameter_changes_key(change: dict) -> None:
    assert request_key("m", BASE) != request_key("m", dataclasses.replace(BASE, **change))


def test_model_changes_key() -> None:
    assert request_key("m1", BASE) != request_key("m2", BASE)


def test_round_trip_marks_cached(tmp_path) -> None:
    cache = ResponseCache(tmp_path / "c.sqlite")
    key = request_key("m", BASE)
    assert cache.get(key) is None
    cache.put(key, LLMResponse("héllo\nworld", 11, 3, 0.25, cached=False, model="m"))
    got = cache.get(key)
    assert got == LLMResponse("héllo\nworld", 11, 3, 0.25, cached=True, model="m")
    assert len(cache) == 1
    cache.close()
    # Persisted: a fresh connection (another process in real use) sees it.
    again = ResponseCache(tmp_path / "c.sqlite")
    assert again.get(key) is not None and again.get(key).text == "héllo\nworld"


def test_threads_share_one_cache(tmp_path) -> None:
    cache = ResponseCache(tmp_path / "c.sqlite")

    def work(i: int) -> None:
        for j in range(20):
            cache.put(f"k{i}-{j}", LLMResponse(f"{i}-{j}"))
            assert cache.get(f"k{i}-{j}").text == f"{i}-{j}"

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache) == 160
