"""Build an `LLMClient` (or its backend) from a validated model section.

The settings are `memrl.config.sections.ModelSettings` (the run's `llm`, an `LLMSettings`; a
benchmark's judge, e.g. memrl_envs/hle's `JudgeSettings`): the schema names every key, its
meaning and its one default; this module only reads them. Which keys reach which backend:
litellm (memrl.llm.litellm_backend: `model`, `api_base`, `api_key_env`, `timeout`, `extra`,
`vision`, `model_fingerprint`, and the model's profile, `PROFILE_KEYS`: memrl.llm.profile),
local (memrl.llm.local: `model` or `model_path`, `mode`, `n_ctx`, `n_threads`,
`reuse_prefix`, `prefix_block`) and scripted (memrl.llm.scripted: `script`, a
"package.module:function" from request to str, else an echo of the last user message;
`model` as its model id; `vision`; a reasoning profile for tests of the budget rule). The
client takes the rest: the cache, concurrency, retries and the request defaults.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from memrl.core.cachedir import LLM_CACHE, default_cache_dir
from memrl.llm.base import Backend, LLMRequest
from memrl.llm.client import LLMClient
from memrl.llm.profile import plain_profile
from memrl.llm.response_cache import ResponseCache

if TYPE_CHECKING:  # memrl.config.sections imports memrl.llm at runtime
    from memrl.config.sections import ModelSettings

# the model section's keys that describe the model itself (memrl.llm.profile)
PROFILE_KEYS = ("reasoning", "reasoning_effort", "reasoning_headroom", "max_output_tokens",
                "price_per_mtok_in", "price_per_mtok_cached_in", "price_per_mtok_out")


def _load_callable(path: str) -> Callable[[LLMRequest], str]:
    module, _, name = path.partition(":")
    if not name:
        raise ValueError(f"script must look like 'package.module:function', got {path!r}")
    fn = getattr(importlib.import_module(module), name)
    if not callable(fn):
        raise TypeError(f"{path} is not callable")
    return fn  # type: ignore[no-any-return]


def build_backend(settings: ModelSettings) -> Backend:
    """The backend of a validated model section."""
    s = settings
    if s.backend == "litellm":
        from memrl.llm.litellm_backend import LiteLLMBackend

        if not s.model:
            raise ValueError("llm.backend=litellm needs llm.model")
        return LiteLLMBackend(
            str(s.model),
            api_base=s.api_base,
            api_key_env=s.api_key_env,
            timeout=float(s.timeout),
            extra=dict(s.extra),
            vision=s.vision,
            model_fingerprint=s.model_fingerprint,
            profile={k: getattr(s, k) for k in PROFILE_KEYS if getattr(s, k) is not None},
        )
    if s.backend == "local":
        from memrl.llm.local import LocalLlamaBackend

        return LocalLlamaBackend(
            model_path=s.model_path,
            model=s.model,
            mode=s.mode,
            n_ctx=int(s.n_ctx),
            n_threads=s.n_threads,
            reuse_prefix=bool(s.reuse_prefix),
            prefix_block=int(s.prefix_block),
        )
    if s.backend == "scripted":
        from memrl.llm.scripted import ScriptedBackend, echo_last_user

        fn = _load_callable(str(s.script)) if s.script else echo_last_user
        named: dict[str, Any] = {"model_id": str(s.model)} if s.model else {}  # else the backend's own id
        # null vision: a scripted model takes images (a test may play a text-only one)
        backend = ScriptedBackend(fn, supports_images=s.vision is not False, **named)
        # a scripted model may play a reasoning one (tests of the budget rule)
        backend.profile = plain_profile(backend.model_id, reasoning=bool(s.reasoning),
                                        headroom=s.reasoning_headroom,
                                        effort=s.reasoning_effort,
                                        max_output_tokens=s.max_output_tokens)
        return backend
    raise ValueError(f"unknown llm backend {s.backend!r} (litellm | local | scripted)")


def build_client(settings: ModelSettings, section: str = "llm") -> LLMClient:
    """The client of one validated model section (`section`: its config key, for messages);
    ValueError names a setting the model would never see (memrl.llm.profile `conflicts`)."""
    s = settings
    backend = build_backend(s)
    profile = getattr(backend, "profile", None)
    if profile is not None:
        problems = profile.conflicts(s.temperature, s.top_p)
        if problems:
            raise ValueError("; ".join(f"{section}.{p}" for p in problems))
    cache = None
    if s.cache:
        cache = ResponseCache(s.cache_path or default_cache_dir() / LLM_CACHE)
    defaults = {name: getattr(s, name) for name in ("temperature", "top_p", "max_tokens")}  # None: the model's own
    return LLMClient(
        backend,
        cache=cache,
        max_concurrency=int(s.max_concurrency),
        adaptive=bool(s.adaptive_concurrency),
        rpm=None if s.rpm is None else int(s.rpm),
        tpm=None if s.tpm is None else int(s.tpm),
        max_retries=int(s.max_retries),
        backoff_base=float(s.backoff_base),
        backoff_max=float(s.backoff_max),
        defaults=defaults,
        section=section,
    )
