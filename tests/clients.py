"""An LLM client for tests that build one around a backend directly: every setting the schema's
default (memrl.config.sections.LLMSettings, the one owner of each default), but what a test
names."""

from __future__ import annotations

from typing import Any

from memrl.config.sections import LLMSettings
from memrl.llm.client import LLMClient

_OWN = {"max_concurrency": "max_concurrency", "max_retries": "max_retries", "backoff_base": "backoff_base",
        "backoff_max": "backoff_max", "adaptive": "adaptive_concurrency", "rpm": "rpm", "tpm": "tpm"}


def make_client(backend: Any, cache: Any = None, **kw: Any) -> LLMClient:
    """`LLMClient(backend, cache, ...)` with the schema's defaults for what `kw` leaves out
    (`defaults`: the sampling settings temperature, top_p, max_tokens)."""
    fields = LLMSettings.model_fields
    settings = {arg: fields[name].default for arg, name in _OWN.items()}
    sampling = {name: fields[name].default for name in ("temperature", "top_p", "max_tokens")}
    kw["defaults"] = {**sampling, **dict(kw.get("defaults") or {})}
    return LLMClient(backend, cache, **{**settings, **kw})
