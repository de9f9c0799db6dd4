"""Build an `LLMClient` from the `llm` config group (a plain dict or an OmegaConf DictConfig).

Keys: backend (litellm | local | scripted), model, api_base, api_key_env, timeout,
max_concurrency, adaptive_concurrency, rpm, tpm (memrl.llm.ratelimit), max_retries,
temperature, top_p, max_tokens, cache (bool), cache_path, n_ctx, model_path, vision (image
input: true/false; null = litellm's model list for litellm backends, never for `local`); for
`litellm` also `extra` (a mapping passed to `litellm.completion` as it is, e.g.
`{repeat_penalty: 1.0}` for a llama.cpp server) and `model_fingerprint` (which model a server
serves); the model's profile (memrl.llm.profile): `reasoning` (null = litellm's model list),
`reasoning_effort` (null = the provider's default, not sent), `reasoning_headroom` (null = by
effort), `max_output_tokens` (null = litellm's), `price_per_mtok_in`, `price_per_mtok_cached_in`,
`price_per_mtok_out` (null = litellm's price list); for `local` `model` (a packaged model name), `model_path` (any GGUF instead), `mode`
(completion | chat), n_ctx, n_threads, `reuse_prefix` and `prefix_block` (see
memrl.llm.local); for `scripted` optionally `script` ("package.module:function", a function
request -> str; default: echo the last user message) and `model` as its model id.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from memrl.core.cachedir import LLM_CACHE, default_cache_dir
from memrl.llm.base import Backend, LLMRequest
from memrl.llm.client import LLMClient
from memrl.llm.profile import plain_profile
from memrl.llm.response_cache import ResponseCache

# the llm section's keys that describe the model itself (memrl.llm.profile)
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


def _get(cfg: Mapping[str, Any], name: str, default: Any) -> Any:
    """cfg[name], or `default` when missing or null."""
    value = cfg.get(name)
    return default if value is None else value


def build_backend(cfg: Mapping[str, Any]) -> Backend:
    kind = str(cfg.get("backend", "litellm"))
    if kind == "litellm":
        from memrl.llm.litellm_backend import LiteLLMBackend

        model = cfg.get("model")
        if not model:
            raise ValueError("llm.backend=litellm needs llm.model")
        return LiteLLMBackend(
            str(model),
            api_base=cfg.get("api_base"),
            api_key_env=cfg.get("api_key_env"),
            timeout=float(_get(cfg, "timeout", 60)),
            extra=dict(cfg.get("extra") or {}),
            vision=cfg.get("vision"),
            model_fingerprint=cfg.get("model_fingerprint"),
            profile={k: cfg.get(k) for k in PROFILE_KEYS if cfg.get(k) is not None},
        )
    if kind == "local":
        from memrl.llm.local import DEFAULT_BLOCK, LocalLlamaBackend

        return LocalLlamaBackend(
            model_path=cfg.get("model_path"),
            model=cfg.get("model"),
            mode=str(_get(cfg, "mode", "completion")),
            n_ctx=int(_get(cfg, "n_ctx", 4096)),
            n_threads=cfg.get("n_threads"),
            reuse_prefix=bool(_get(cfg, "reuse_prefix", True)),
            prefix_block=int(_get(cfg, "prefix_block", DEFAULT_BLOCK)),
        )
    if kind == "scripted":
        from memrl.llm.scripted import ScriptedBackend, echo_last_user

        script = cfg.get("script")
        fn = _load_callable(str(script)) if script else echo_last_user
        backend = ScriptedBackend(fn, model_id=str(cfg.get("model") or "scripted"),
                                  supports_images=bool(_get(cfg, "vision", True)))
        # a scripted model may play a reasoning one (tests of the budget rule)
        backend.profile = plain_profile(backend.model_id, reasoning=bool(cfg.get("reasoning")),
                                        headroom=cfg.get("reasoning_headroom"),
                                        effort=cfg.get("reasoning_effort"),
                                        max_output_tokens=cfg.get("max_output_tokens"))
        return backend
    raise ValueError(f"unknown llm backend {kind!r} (litellm | local | scripted)")


def build_client(cfg: Mapping[str, Any], section: str = "llm") -> LLMClient:
    """The client of one model section (`section`: its config key, for messages); ValueError
    names a setting the model would never see (memrl.llm.profile `conflicts`)."""
    backend = build_backend(cfg)
    profile = getattr(backend, "profile", None)
    if profile is not None:
        problems = profile.conflicts(cfg.get("temperature"), cfg.get("top_p"))
        if problems:
            raise ValueError("; ".join(f"{section}.{p}" for p in problems))
    cache = None
    if _get(cfg, "cache", True):
        cache = ResponseCache(cfg.get("cache_path") or default_cache_dir() / LLM_CACHE)
    defaults = {
        name: cfg.get(name)
        for name in ("temperature", "top_p", "max_tokens")
        if cfg.get(name) is not None
    }
    return LLMClient(
        backend,
        cache=cache,
        max_concurrency=int(_get(cfg, "max_concurrency", 8)),
        adaptive=bool(_get(cfg, "adaptive_concurrency", True)),
        rpm=None if cfg.get("rpm") is None else int(cfg["rpm"]),
        tpm=None if cfg.get("tpm") is None else int(cfg["tpm"]),
        max_retries=int(_get(cfg, "max_retries", 6)),
        backoff_base=float(_get(cfg, "backoff_base", 1.0)),
        backoff_max=float(_get(cfg, "backoff_max", 60.0)),
        defaults=defaults,
        section=section,
    )
