"""LLM client: retries, errors, concurrency bound, cache use, accounting, episode handles."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from memrl.config.sections import LLMSettings
from memrl.llm.base import LLMError, LLMRequest
from clients import make_client

from memrl.llm.client import LLMClient
from memrl.control.wiring import build_client
from memrl.llm.response_cache import ResponseCache
from memrl.llm.retry import is_transient, retry_after_seconds
from memrl.llm.scripted import ScriptedBackend

REQ = LLMRequest(messages=(("user", "ping"),), max_tokens=8)


def flaky(failures: list[BaseException], answer: str = "pong"):
    """A script that raises the given errors in turn, then answers."""
    pending = list(failures)

    def fn(request: LLMRequest) -> str:
        if pending:
            raise pending.pop(0)
        return answer

    return fn


def fast_client(backend, **kw) -> LLMClient:
    kw.setdefault("backoff_base", 0.001)
    kw.setdefault("backoff_max", 0.01)
    return make_client(backend, **kw)


def test_retries_transient_errors_then_succeeds() -> None:
    backend = ScriptedBackend(flaky([TimeoutError("slow"), ConnectionError("reset")]))
    client = fast_client(backend, max_retries=3)
    resp = client.complete(REQ)
    assert resp.text == "pong" and not resp.cached
    assert backend.calls == 3
    t = client.totals()
    assert t["retries"] == 2 and t["calls"] == 1 and t["failures"] == 0


def test_gives_llm_error_after_max_retries() -> None:
    backend = ScriptedBackend(flaky([TimeoutError(f"t{i}") for i in range(10)]))
    client = fast_client(backend, max_retries=2)
    with pytest.raises(LLMError, match="t2") as info:
        client.complete(REQ)
    assert isinstance(info.value.__cause__, TimeoutError)
    assert backend.calls == 3  # first try + 2 retries
    assert client.totals()["failures"] == 1


def test_non_transient_error_is_not_retried() -> None:
    backend = ScriptedBackend(flaky([ValueError("bad prompt")]))
    client = fast_client(backend, max_retries=5)
    with pytest.raises(LLMError, match="bad prompt"):
        client.complete(REQ)
    assert backend.calls == 1
    assert client.totals()["retries"] == 0


def test_backoff_is_exponential_and_deterministic() -> None:
    def run() -> list[float]:
        waits: list[float] = []
        backend = ScriptedBackend(flaky([TimeoutError()] * 4))
        make_client(backend, max_retries=4, backoff_base=1.0, backoff_max=5.0, sleep=waits.append).complete(REQ)
        return waits

    waits = run()
    assert len(waits) == 4
    for i, w in enumerate(waits):
        step = min(5.0, 2.0**i)
        assert step * 0.5 <= w <= step
    assert waits == run()


class _Throttled(Exception):
    """Looks like litellm's RateLimitError to the classifier, carrying a Retry-After header."""

    def __init__(self, headers: dict[str, str]) -> None:
        super().__init__("429")
        self.response = type("R", (), {"headers": headers})()


_Throttled.__module__ = "litellm.exceptions"
_Throttled.__name__ = "RateLimitError"


def test_retry_after_header_is_honoured() -> None:
    waits: list[float] = []
    backend = ScriptedBackend(flaky([_Throttled({"Retry-After": "3"})]))
    # a fixed limiter: the caller sleeps the Retry-After itself (the adaptive one holds every
    # caller in its shared pause: tests/llm/test_rate_limits.py)
    client = make_client(backend, backoff_base=0.001, backoff_max=10.0, sleep=waits.append, adaptive=False)
    assert client.complete(REQ).text == "pong"
    assert waits == [3.0]
    assert retry_after_seconds(_Throttled({"retry-after-ms": "250"})) == 0.25
    assert retry_after_seconds(ValueError()) is None


def test_litellm_classes_are_classified_without_importing_it() -> None:
    assert is_transient(_Throttled({}))
    assert is_transient(TimeoutError()) and is_transient(ConnectionResetError())
    assert not is_transient(ValueError()) and not is_transient(KeyError())


def test_concurrency_limit_is_respected() -> None:
    state = {"now": 0, "peak": 0}
    lock = threading.Lock()

    def slow(request: LLMRequest) -> str:
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(0.02)
        with lock:
            state["now"] -= 1
        return request.messages[0][1]

    backend = ScriptedBackend(slow)
    client = make_client(backend, max_concurrency=3)
    outs: list[str] = []

    def worker(i: int) -> None:
        outs.append(client.complete(LLMRequest(messages=(("user", f"q{i}"),))).text)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outs) == sorted(f"q{i}" for i in range(12))
    assert state["peak"] == 3  # reached, never exceeded
    assert client.totals()["calls"] == 12


def test_totals_count_tokens_and_cache_hits(tmp_path) -> None:
    backend = ScriptedBackend(lambda r: "a b c")
    client = make_client(backend, cache=ResponseCache(tmp_path / "c.sqlite"))
    first = client.complete(LLMRequest(messages=(("user", "one two"),)))
    second = client.complete(LLMRequest(messages=(("user", "one two"),)))
    assert not first.cached and second.cached and second.text == "a b c"
    assert (second.prompt_tokens, second.completion_tokens) == (2, 3)
    t = client.totals()
    assert (t["requests"], t["calls"], t["cache_hits"]) == (2, 1, 1)
    assert (t["prompt_tokens"], t["completion_tokens"]) == (2, 3)
    assert t["model"] == "scripted"


def test_episode_sample_ids_defaults_and_meter() -> None:
    backend = ScriptedBackend(lambda r: "x y", model_id="fake")
    client = make_client(backend, defaults={"max_tokens": 64, "temperature": 0.7, "top_p": 0.9})
    ep = client.episode("seed0/e1/task-a", seed=123)
    assert ep.complete("look", purpose="act") == "x y"
    ep.complete([("system", "sys"), ("user", "go")], purpose="act", stop=("\n",))
    ep.complete("why", purpose="reflect", max_tokens=5, temperature=0.0)
    reqs = backend.requests
    assert [r.sample_id for r in reqs] == [
        "seed0/e1/task-a/act/0",
        "seed0/e1/task-a/act/1",
        "seed0/e1/task-a/reflect/0",
    ]
    assert reqs[0].messages == (("user", "look"),)
    assert reqs[1].messages == (("system", "sys"), ("user", "go")) and reqs[1].stop == ("\n",)
    assert (reqs[0].max_tokens, reqs[0].temperature, reqs[0].top_p, reqs[0].seed) == (64, 0.7, 0.9, 123)
    assert (reqs[2].max_tokens, reqs[2].temperature) == (5, 0.0)
    assert ep.meter.calls == 3 and ep.meter.completion_tokens == 6 and ep.meter.prompt_tokens == 4
    # A second episode's meter is its own.
    ep2 = client.episode("seed0/e1/task-b", seed=1)
    ep2.complete("z", purpose="act")
    assert ep2.meter.calls == 1 and ep.meter.calls == 3


def test_episode_records_errors() -> None:
    backend = ScriptedBackend(flaky([ValueError("nope")]))
    ep = make_client(backend).episode("p", seed=0)
    with pytest.raises(LLMError):
        ep.complete("q", purpose="act")
    assert len(ep.meter.errors) == 1 and "nope" in ep.meter.errors[0]
    assert ep.meter.calls == 0


def _run_episodes(client: LLMClient) -> list[str]:
    texts = []
    for task in ("t1", "t2"):
        ep = client.episode(f"seed0/e1/{task}", seed=5)
        for _ in range(3):
            texts.append(ep.complete(f"{task}: step", purpose="act"))
    return texts


def test_second_identical_run_makes_no_backend_calls(tmp_path) -> None:
    counter = {"n": 0}

    def sampler(request: LLMRequest) -> str:  # a different answer every call, like sampling
        counter["n"] += 1
        return f"answer {counter['n']}"

    cfg = {"temperature": 0.8}
    first_backend = ScriptedBackend(sampler)
    first = _run_episodes(make_client(first_backend, cache=ResponseCache(tmp_path / "c.sqlite"), defaults=cfg))
    assert first_backend.calls == 6 and len(set(first)) == 6  # distinct samples stay distinct

    second_backend = ScriptedBackend(sampler)
    client = make_client(second_backend, cache=ResponseCache(tmp_path / "c.sqlite"), defaults=cfg)
    second = _run_episodes(client)
    assert second_backend.calls == 0
    assert second == first
    assert client.totals()["cache_hits"] == 6


def test_build_client_from_config(tmp_path) -> None:
    client = build_client(LLMSettings.model_validate(
        {
            "name": "echo",
            "backend": "scripted",
            "model": "echo",
            "temperature": 0.0,
            "max_tokens": 16,
            "cache": True,
            "cache_path": str(tmp_path / "llm.sqlite"),
            "max_concurrency": 2,
            "max_retries": 1,
        }
    ))
    assert client.model_id == "echo" and client.max_concurrency == 2 and client.max_retries == 1
    assert client.defaults == {"temperature": 0.0, "top_p": 1.0, "max_tokens": 16}  # top_p: the schema's
    assert client.episode("p", 0).complete("hello", purpose="act") == "hello"
    assert (tmp_path / "llm.sqlite").exists()
    with pytest.raises(ValueError):  # the schema refuses it before any factory sees it
        LLMSettings.model_validate({"name": "x", "backend": "nope"})


# -- litellm against a local OpenAI-compatible server (no network beyond 127.0.0.1) ---------


class _FakeOpenAI(BaseHTTPRequestHandler):
    script: list[tuple[int, dict[str, str], dict]] = []
    bodies: list[dict] = []
    paths: list[str] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        type(self).bodies.append(json.loads(self.rfile.read(length)))
        type(self).paths.append(self.path)
        status, headers, body = type(self).script.pop(0)
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


def _ok(text: str | None) -> tuple[int, dict, dict]:
    return (
        200,
        {},
        {
            "id": "cmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "fake-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9},
        },
    )


def _err(status: int, headers: dict | None = None) -> tuple[int, dict, dict]:
    return status, headers or {}, {"error": {"message": f"status {status}", "type": "x", "code": str(status)}}


@pytest.fixture
def fake_server(monkeypatch) -> Iterator[str]:
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no price-list download
    pytest.importorskip("litellm")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("FAKE_KEY", "sk-test")
    _FakeOpenAI.script, _FakeOpenAI.bodies, _FakeOpenAI.paths = [], [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeOpenAI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_litellm_backend_end_to_end(fake_server) -> None:
    from memrl.llm.litellm_backend import LiteLLMBackend

    _FakeOpenAI.script = [_err(429, {"Retry-After": "0"}), _err(503), _ok("hello there"), _ok(None),
                          _ok("again then"), _err(400)]
    backend = LiteLLMBackend("openai/fake-model", api_base=fake_server, api_key_env="FAKE_KEY", timeout=10)
    assert backend.model_id == "openai/fake-model"  # where it is served is not what it is
    client = make_client(backend, max_retries=3, backoff_base=0.001, backoff_max=0.01)
    req = LLMRequest(messages=(("system", "s"), ("user", "u")), max_tokens=9, stop=("END",), seed=3)
    resp = client.complete(req)
    assert resp.text == "hello there"
    assert (resp.prompt_tokens, resp.completion_tokens, resp.cost_usd) == (7, 2, 0.0)
    assert client.totals()["retries"] == 2
    assert len(_FakeOpenAI.bodies) == 3  # litellm did not retry on its own
    body = _FakeOpenAI.bodies[-1]
    assert body["messages"] == [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    assert body["max_tokens"] == 9 and body["stop"] == ["END"] and body["seed"] == 3
    # content None is an empty reply: a provider fault, retried
    assert client.complete(LLMRequest(messages=(("user", "again"),))).text == "again then"
    assert client.totals()["retries"] == 3
    # 400 is not transient: one request, then LLMError wrapping litellm.BadRequestError
    with pytest.raises(LLMError) as info:
        client.complete(LLMRequest(messages=(("user", "bad"),)))
    assert type(info.value.__cause__).__name__ == "BadRequestError"
    assert len(_FakeOpenAI.bodies) == 6


def test_litellm_exceptions_classified(fake_server) -> None:
    import litellm

    assert is_transient(litellm.RateLimitError("x", llm_provider="openai", model="m"))
    assert is_transient(litellm.Timeout("x", model="m", llm_provider="openai"))
    assert is_transient(litellm.APIConnectionError("x", llm_provider="openai", model="m"))
    assert is_transient(litellm.ServiceUnavailableError("x", llm_provider="openai", model="m"))
    assert is_transient(litellm.InternalServerError("x", llm_provider="openai", model="m"))
    assert not is_transient(litellm.BadRequestError("x", model="m", llm_provider="openai"))
    assert not is_transient(litellm.AuthenticationError("x", llm_provider="openai", model="m"))
    assert not is_transient(litellm.ContextWindowExceededError("x", model="m", llm_provider="openai"))


def test_build_client_takes_a_section_validated_from_omegaconf(tmp_path) -> None:
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(
        {"name": "s", "backend": "scripted", "model": None, "cache": False, "cache_path": None, "top_p": 0.5}
    )
    client = build_client(LLMSettings.model_validate(OmegaConf.to_container(cfg)))
    # what the section leaves out is the schema's default (memrl.config.sections)
    assert client.cache is None and client.max_retries == 6 and client.model_id == "scripted"
    assert client.defaults == {"temperature": 0.0, "top_p": 0.5, "max_tokens": 256}


def _text_ok(text: str) -> tuple[int, dict, dict]:
    return (200, {}, {"id": "cmpl-2", "object": "text_completion", "created": 0, "model": "base",
                      "choices": [{"index": 0, "text": text, "finish_reason": "stop", "logprobs": None}],
                      "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}})


def test_base_model_behind_a_server_gets_text_completion_with_extra(fake_server, caplog) -> None:
    """`text-completion-openai/<m>` sends the prompt to /v1/completions as text to continue
    (what a base model behind llama.cpp's server needs); `llm.extra` reaches the request; a
    retry is logged when it happens; litellm writes no INFO line per request."""
    import logging

    _FakeOpenAI.script = [_err(503), _text_ok(" go to cabinet 1")]
    client = build_client(LLMSettings(name="base", backend="litellm", model="text-completion-openai/gemma-base",
                                      api_base=fake_server, api_key_env="FAKE_KEY", max_retries=2,
                                      backoff_base=0.001, backoff_max=0.01, cache=False,
                                      extra={"repeat_penalty": 1.0}))
    with caplog.at_level(logging.INFO):
        text = client.episode("s/e1/t", seed=1).complete("You are in a room.\n>", purpose="act",
                                                          max_tokens=8, stop=("\n",))
    assert text == " go to cabinet 1"
    assert _FakeOpenAI.paths == ["/v1/completions", "/v1/completions"]
    body = _FakeOpenAI.bodies[-1]
    assert "You are in a room.\n>" in str(body["prompt"]) and "messages" not in body
    assert body["repeat_penalty"] == 1.0 and body["max_tokens"] == 8
    retries = [r for r in caplog.records if r.name == "memrl.llm.client" and "retrying" in r.getMessage()]
    assert len(retries) == 1 and "try 1 of 3" in retries[0].getMessage()
    assert retries[0].levelno == logging.WARNING
    assert not [r for r in caplog.records if r.name.startswith("LiteLLM") and r.levelno < logging.WARNING]


def test_a_call_that_fails_for_good_is_logged(caplog) -> None:
    import logging

    client = fast_client(ScriptedBackend(flaky([TimeoutError("server too slow")] * 3)), max_retries=1)
    with caplog.at_level(logging.WARNING, logger="memrl.llm.client"), pytest.raises(LLMError):
        client.complete(REQ)
    msgs = [r.getMessage() for r in caplog.records]
    assert any("try 1 of 2 failed (TimeoutError: server too slow)" in m for m in msgs)
    assert any("model call failed" in m and "server too slow" in m for m in msgs)


def test_greedy_answers_of_a_seed_free_backend_are_shared_across_seeds(tmp_path) -> None:
    """At temperature 0 the embedded model's answer does not depend on the seed, so the cache
    keys it without: the same prompt in another epoch (another episode seed) is a hit. Not so
    for sampled answers, nor for backends that do not declare it (an API may use the seed)."""
    seedless = ScriptedBackend(lambda r: "a")
    seedless.greedy_ignores_seed = True
    for backend, hits in ((seedless, [True, False, False]), (ScriptedBackend(lambda r: "a"), [False, False, False])):
        client = make_client(backend, cache=ResponseCache(tmp_path / f"{id(backend)}.sqlite"))
        client.complete(LLMRequest(messages=(("user", "p"),), seed=1, temperature=0.0))
        client.complete(LLMRequest(messages=(("user", "p"),), seed=1, temperature=0.7, sample_id="x"))
        got = [client.complete(LLMRequest(messages=(("user", "p"),), seed=2, temperature=t, sample_id=sid)).cached
               for t, sid in ((0.0, "y"), (0.7, "x"), (0.7, "z"))]
        assert got == hits


def test_greedy_entries_cached_with_their_seed_still_hit(tmp_path) -> None:
    """Entries written while greedy answers were keyed with their seed keep answering."""
    from memrl.llm.response_cache import request_key

    backend = ScriptedBackend(lambda r: "fresh")
    backend.greedy_ignores_seed = True
    cache = ResponseCache(tmp_path / "c.sqlite")
    old = LLMRequest(messages=(("user", "p"),), seed=5, temperature=0.0)
    from memrl.llm.base import LLMResponse

    cache.put(request_key(backend.model_id, old), LLMResponse(text="from before", prompt_tokens=1,
                                                             completion_tokens=1, cost_usd=0.0))
    client = make_client(backend, cache=cache)
    assert client.complete(old).text == "from before" and backend.calls == 0
    # ... and now under the seed-free key too: another seed hits it
    assert client.complete(LLMRequest(messages=(("user", "p"),), seed=6)).text == "from before"
    assert backend.calls == 0
