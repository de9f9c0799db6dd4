"""Backend for any model litellm can reach: hosted APIs, vLLM, Ollama, llama.cpp servers.

litellm is imported on first use, after `LITELLM_LOCAL_MODEL_COST_MAP=True` is set so that
importing it never reaches for the network. litellm's own retries are switched off
(`num_retries=0`, `max_retries=0`): `LLMClient` retries.

Images go out as chat-completions `image_url` parts. Whether the model takes them is
`vision` when given, else litellm's own model list (`litellm.supports_vision`), which knows
hosted models but not what a self-hosted server (vLLM, Ollama) serves: set `vision: true`
for those.

Base models behind an OpenAI-compatible server (e.g. llama.cpp's `llama-server` or
`python -m llama_cpp.server` with the Gemma 270M base GGUF): use the model prefix
`text-completion-openai/<name>`, which sends the prompt to `/v1/completions` as text to be
continued. Through the chat route (`openai/<name>`) the server wraps the prompt as a user
message in a chat template, which a base model cannot follow. `extra` is passed to
`litellm.completion` as it is: e.g. `{repeat_penalty: 1.0}` to match the embedded backend
(llama.cpp's server defaults to 1.1).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from memrl.llm.base import LLMRequest, LLMResponse, openai_content


# Loggers that write a line per request at INFO (litellm's own, and httpx's "HTTP Request:"
# line): they would fill a run's log; warnings and errors still show.
CHATTY_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "httpx")


def import_litellm() -> ModuleType:
    """Import litellm quietly and offline (local price list, no debug banners, no INFO line
    per request)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    return litellm


def api_key_from_env(api_key_env: str | None) -> str | None:
    if not api_key_env:
        return None
    key = os.environ.get(api_key_env)
    if not key:
        raise RuntimeError(f"environment variable {api_key_env} (the API key) is not set")
    return key


class LiteLLMBackend:
    """Chat completion through `litellm.completion`."""

    def __init__(
        self,
        model: str,
        api_base: str | None = None,
        api_key_env: str | None = None,
        timeout: float = 60,
        extra: Mapping[str, Any] | None = None,
        vision: bool | None = None,
    ) -> None:
        self.model = model
        self.vision = vision
        self.api_base = api_base or None
        self.api_key_env = api_key_env or None
        self.timeout = float(timeout)
        self.extra: dict[str, Any] = dict(extra or {})
        base = f"{model}@{self.api_base}" if self.api_base else model
        # `extra` can change the answer (sampling settings): it is part of the id, hence of
        # every cache key, so answers made with other settings are never served from cache
        self.model_id = base + (f"#{json.dumps(self.extra, sort_keys=True, separators=(',', ':'))}"
                                if self.extra else "")
        self._known_vision: bool | None = None

    @property
    def supports_images(self) -> bool:
        """`vision` if configured, else what litellm's model list says (False if unknown)."""
        if self.vision is not None:
            return bool(self.vision)
        if self._known_vision is None:
            try:
                self._known_vision = bool(import_litellm().supports_vision(model=self.model))
            except Exception:  # unknown provider/model: treat as text-only
                self._known_vision = False
        return self._known_vision

    def generate(self, request: LLMRequest) -> LLMResponse:
        litellm = import_litellm()
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": role, "content": openai_content(content)}
                         for role, content in request.messages],
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "timeout": self.timeout,
            "num_retries": 0,
            "max_retries": 0,
            # Providers that do not take e.g. `seed` get it dropped instead of failing.
            "drop_params": True,
        }
        if request.stop:
            kwargs["stop"] = list(request.stop)
        if request.seed is not None:
            kwargs["seed"] = request.seed
        if request.response_format == "json":
            kwargs["response_format"] = {"type": "json_object"}
        if self.api_base:
            kwargs["api_base"] = self.api_base
        key = api_key_from_env(self.api_key_env)
        if key:
            kwargs["api_key"] = key
        kwargs.update(self.extra)
        raw = litellm.completion(**kwargs)
        text = raw.choices[0].message.content or ""
        usage = getattr(raw, "usage", None)
        return LLMResponse(
            text=text,
            prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            cost_usd=_cost(litellm, raw),
            model=self.model_id,
        )


def _cost(litellm: ModuleType, raw: Any) -> float:
    """Price of one response from litellm's local price list; 0.0 for unknown models."""
    try:
        return float(litellm.completion_cost(completion_response=raw) or 0.0)
    except Exception:  # litellm raises a variety of errors for unpriced models
        return 0.0
