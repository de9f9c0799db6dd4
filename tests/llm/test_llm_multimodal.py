"""Image content in the LLM layer: message parts, cache keys (text-only keys unchanged), the
capability check that refuses images for text-only models before any call, and the wire
format litellm sends."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from memrl.config.sections import LLMSettings
from memrl.llm.base import (ImagePart, LLMError, LLMRequest, TextPart, UnsupportedContentError, as_content,
                            content_text, has_images, openai_content)
from clients import make_client

from memrl.control.wiring import build_client
from memrl.llm.local import LocalLlamaBackend, render_prompt
from memrl.llm.response_cache import ResponseCache, request_key
from memrl.llm.scripted import ScriptedBackend

PNG = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAgAAAAECAIAAAA8r+mnAAAAFklEQVR42mP8z4AA"
       "jAwIHhMDDkC6BAC5kwIHcfyfKQAAAABJRU5ErkJggg==")  # 8x4 PNG, red | blue
OTHER_PNG = PNG[:-10] + "AAAAAAAAAA"

TEXT = LLMRequest(messages=(("system", "Answer briefly."), ("user", "What is 2+2?")), max_tokens=64,
                  temperature=0.0, top_p=1.0, stop=("\n",), sample_id="s0/e1/t/act/0", seed=11)
SAMPLED = LLMRequest(messages=(("user", "héllo"),), max_tokens=16, temperature=0.7,
                     sample_id="s0/e2/x/answer/0")


def with_image(url: str = PNG) -> LLMRequest:
    return dataclasses.replace(TEXT, messages=(("system", "Answer briefly."),
                                               ("user", (TextPart("What is 2+2?"), ImagePart(url)))))


# -- cache keys ----------------------------------------------------------------------------


def test_text_only_keys_are_the_ones_computed_before_images_existed() -> None:
    # Computed with the cache code as it was before multi-part content and response_format
    # were added: existing caches keep answering text-only requests.
    assert request_key("openai/gpt-4o-mini", TEXT) == \
        "50d17432a06f1b6043b7c1636bdf682b7d3bc42c3909819c111bcb1c7d241e9c"
    assert request_key("local/gemma3-270m-q4_k_m", SAMPLED) == \
        "47e82a30542eca4d0ffcee7dde07c6d39311077f22defca459f60ed1c14da3e5"


def test_image_requests_have_their_own_keys() -> None:
    base = request_key("m", TEXT)
    img = request_key("m", with_image())
    assert img != base
    assert request_key("m", with_image()) == img  # stable
    assert request_key("m", with_image(OTHER_PNG)) != img  # the image is part of the key
    # a single text part is a different request from a plain string (a different wire format)
    parts_only = dataclasses.replace(TEXT, messages=(("system", "Answer briefly."),
                                                     ("user", (TextPart("What is 2+2?"),))))
    assert request_key("m", parts_only) != base


def test_response_format_joins_the_key_only_when_set() -> None:
    assert request_key("m", dataclasses.replace(TEXT, response_format=None)) == request_key("m", TEXT)
    assert request_key("m", dataclasses.replace(TEXT, response_format="json")) != request_key("m", TEXT)


# -- content helpers -----------------------------------------------------------------------


def test_content_normalisation() -> None:
    parts = as_content([{"type": "text", "text": "look"},
                        {"type": "image_url", "image_url": {"url": PNG}}, TextPart("again")])
    assert parts == (TextPart("look"), ImagePart(PNG), TextPart("again"))
    assert as_content("plain") == "plain" and as_content(7) == "7"
    assert content_text(parts) == "look\nagain"
    assert has_images([("user", parts)]) and not has_images([("user", "plain")])
    assert openai_content(parts)[1] == {"type": "image_url", "image_url": {"url": PNG}}
    assert openai_content("plain") == "plain"
    with pytest.raises(TypeError):
        as_content([{"type": "audio", "data": "x"}])
    with pytest.raises(ValueError, match="data:image"):
        ImagePart("/tmp/picture.png")


# -- capability check ----------------------------------------------------------------------


def test_text_only_backend_gets_no_call_for_an_image(tmp_path) -> None:
    backend = ScriptedBackend(lambda r: "4", supports_images=False)
    cache = ResponseCache(tmp_path / "c.sqlite")
    client = make_client(backend, cache=cache, max_retries=3)
    ep = client.episode("s0/e1/q1", seed=1)
    assert ep.supports_images is False
    with pytest.raises(UnsupportedContentError, match="text only"):
        ep.complete([("user", (TextPart("What colour?"), ImagePart(PNG)))], purpose="answer")
    assert backend.calls == 0 and len(cache) == 0
    assert isinstance(UnsupportedContentError("x"), LLMError)  # envs that catch LLMError record it
    assert ep.meter.errors and "text only" in ep.meter.errors[0]
    assert ep.complete("What is 2+2?", purpose="answer") == "4"  # text still works


def test_local_model_refuses_images_before_loading(tmp_path) -> None:
    model = tmp_path / "model.gguf"  # never loaded: not a GGUF (its id is its name and hash)
    model.write_bytes(b"not a model")
    backend = LocalLlamaBackend(model_path=model)
    client = make_client(backend, max_retries=0)
    assert client.supports_images is False
    with pytest.raises(UnsupportedContentError):
        client.complete(with_image())
    with pytest.raises(UnsupportedContentError):
        backend.generate(with_image())  # the backend checks too, before it loads the model
    assert backend._llm is None
    assert render_prompt((("system", "Rules."), ("user", (TextPart("Q: hi"), TextPart("A:"))))) == \
        "Rules.\n\nQ: hi\nA:"


def test_vision_backend_receives_the_data_url() -> None:
    backend = ScriptedBackend(lambda r: "red")
    ep = make_client(backend).episode("s0/e1/q7", seed=1)
    assert ep.complete([("system", "Be brief."),
                        ("user", [{"type": "text", "text": "Colour?"},
                                  {"type": "image_url", "image_url": {"url": PNG}}])],
                       purpose="answer") == "red"
    (req,) = backend.requests
    assert req.messages[1][1] == (TextPart("Colour?"), ImagePart(PNG))
    assert req.messages[0][1] == "Be brief."


def test_factory_reads_the_vision_flag(tmp_path) -> None:
    def client(**section):
        return build_client(LLMSettings(name="m", cache=False, **section))

    assert client(backend="scripted").supports_images is True
    assert client(backend="scripted", vision=False).supports_images is False
    assert client(backend="local", vision=True).supports_images is False
    assert client(backend="litellm", model="openai/my-served-model", vision=True).supports_images is True
    assert client(backend="litellm", model="openai/my-served-model", vision=False).supports_images is False


def test_litellm_vision_defaults_to_its_model_list(monkeypatch) -> None:
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    pytest.importorskip("litellm")
    from memrl.llm.litellm_backend import LiteLLMBackend

    assert LiteLLMBackend("openai/gpt-4o-mini").supports_images is True
    assert LiteLLMBackend("openai/some-self-hosted-model").supports_images is False


# -- the wire format, against a local OpenAI-compatible server ------------------------------


class _Server(BaseHTTPRequestHandler):
    bodies: list[dict] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        type(self).bodies.append(body)
        data = json.dumps({
            "id": "c1", "object": "chat.completion", "created": 0, "model": "fake",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server(monkeypatch) -> Iterator[str]:
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    pytest.importorskip("litellm")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("FAKE_KEY", "sk-test")
    _Server.bodies = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def test_litellm_sends_image_parts_and_json_mode(server) -> None:
    from memrl.llm.litellm_backend import LiteLLMBackend

    backend = LiteLLMBackend("openai/fake", api_base=server, api_key_env="FAKE_KEY", vision=True)
    client = make_client(backend, max_retries=0)
    assert client.complete(with_image()).text == "ok"
    assert client.complete(dataclasses.replace(TEXT, response_format="json")).text == "ok"
    image_body, text_body = _Server.bodies
    assert image_body["messages"][1]["content"] == [
        {"type": "text", "text": "What is 2+2?"}, {"type": "image_url", "image_url": {"url": PNG}}]
    assert image_body["messages"][0] == {"role": "system", "content": "Answer briefly."}
    assert "response_format" not in image_body
    assert text_body["messages"][1] == {"role": "user", "content": "What is 2+2?"}
    assert text_body["response_format"] == {"type": "json_object"}
