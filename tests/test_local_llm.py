"""The embedded offline model (llama.cpp + Gemma 3 270M base). Slow: loads a 253 MB model."""

from __future__ import annotations

import importlib.util
import logging

import pytest

from memrl.llm.base import LLMRequest
from memrl.llm.local import MODEL_ID, LocalLlamaBackend, ensure_model_file, render_prompt

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("llama_cpp") is None,
        reason="llama_cpp (llama-cpp-python, the `local` extra) is not installed",
    ),
]

FEW_SHOT = (
    "Q: What is the capital of France?\nA: Paris\n\n"
    "Q: What is the capital of Italy?\nA: Rome\n\n"
    "Q: What is the capital of Spain?\nA:"
)


@pytest.fixture(scope="module")
def backend(tmp_path_factory) -> LocalLlamaBackend:
    path = ensure_model_file(tmp_path_factory.mktemp("models"))
    return LocalLlamaBackend(model_path=path, n_ctx=512, seed=0)


def test_render_prompt_joins_contents_with_blank_lines() -> None:
    assert render_prompt((("system", "Rules."), ("user", "Q: hi\nA:"))) == "Rules.\n\nQ: hi\nA:"


def test_assembly_is_idempotent_and_safe_concurrently(tmp_path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(3) as pool:
        paths = list(pool.map(lambda _: ensure_model_file(tmp_path), range(3)))
    first = paths[0]
    assert paths == [first] * 3
    mtime = first.stat().st_mtime_ns
    assert first.stat().st_size > 200_000_000
    assert ensure_model_file(tmp_path) == first and first.stat().st_mtime_ns == mtime
    assert [p.name for p in first.parent.iterdir()] == [first.name]  # no temp files left


def test_few_shot_completion_is_non_empty(backend: LocalLlamaBackend) -> None:
    req = LLMRequest(messages=(("user", FEW_SHOT),), max_tokens=8, temperature=0.0, stop=("\n",), seed=1)
    resp = backend.generate(req)
    assert resp.text.strip() != ""
    assert "\n" not in resp.text
    assert resp.prompt_tokens > 20 and 0 < resp.completion_tokens <= 8
    assert resp.model == MODEL_ID and resp.cost_usd == 0.0


def test_temperature_zero_is_repeatable(backend: LocalLlamaBackend) -> None:
    req = LLMRequest(messages=(("user", "Once upon a time"),), max_tokens=24, temperature=0.0, seed=7)
    first = backend.generate(req).text
    backend.generate(LLMRequest(messages=(("user", "Something else entirely"),), max_tokens=8))
    assert backend.generate(req).text == first and first != ""


def test_long_prompt_is_cut_from_the_left(backend: LocalLlamaBackend, caplog) -> None:
    long = "word " * 2000 + "\nQ: What is the capital of Spain?\nA:"
    with caplog.at_level(logging.WARNING, logger="memrl.llm.local"):
        resp = backend.generate(LLMRequest(messages=(("user", long),), max_tokens=16, temperature=0.0))
    assert resp.prompt_tokens <= 512 - 16
    assert any("exceeds" in r.getMessage() for r in caplog.records)


def test_sampling_replays_by_seed_regardless_of_history(backend: LocalLlamaBackend) -> None:
    def sample(seed: int) -> str:
        req = LLMRequest(messages=(("user", "Once upon a time"),), max_tokens=12, temperature=0.8, seed=seed)
        return backend.generate(req).text

    first = sample(1)
    backend.generate(LLMRequest(messages=(("user", "The history of Rome"),), max_tokens=32, temperature=0.8))
    others = {sample(s) for s in (2, 3, 4)}
    assert sample(1) == first
    assert len(others | {first}) > 1  # the seed does steer the sample
