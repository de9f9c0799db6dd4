"""A deterministic backend driven by a Python function, for tests and resume checks."""

from __future__ import annotations

import threading
from collections.abc import Callable

from memrl.llm.base import LLMRequest, LLMResponse, content_text


def _word_count(text: str) -> int:
    return len(text.split())


class ScriptedBackend:
    """Answers with `fn(request)`; counts calls. Tokens are whitespace word counts, cost 0.

    `fn` may raise to simulate failures; the call is counted before `fn` runs.
    `supports_images` plays a model that takes images (default) or a text-only one.
    """

    def __init__(self, fn: Callable[[LLMRequest], str], model_id: str = "scripted",
                 supports_images: bool = True) -> None:
        self.fn = fn
        self.model_id = model_id
        self.supports_images = bool(supports_images)
        self.calls = 0
        self.requests: list[LLMRequest] = []
        self._lock = threading.Lock()

    def generate(self, request: LLMRequest) -> LLMResponse:
        with self._lock:
            self.calls += 1
            self.requests.append(request)
        text = self.fn(request)
        return LLMResponse(
            text=text,
            prompt_tokens=sum(_word_count(content_text(content)) for _, content in request.messages),
            completion_tokens=_word_count(text),
            cost_usd=0.0,
            model=self.model_id,
        )


def echo_last_user(request: LLMRequest) -> str:
    """Default script: repeat the last user message."""
    for role, content in reversed(request.messages):
        if role == "user":
            return content_text(content)
    return ""
