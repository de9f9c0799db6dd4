"""Wiring: validated settings → objects (the run's env, memory module, model clients and
embedder; a benchmark's judge client too). No logic beyond construction: each schema
(memrl.config.sections, the env's and memory's `Settings`) names every key, its meaning and
its one default; this module only reads them.

Which model keys reach which backend: litellm (memrl.llm.litellm_backend: `model`, `api_base`,
`api_key_env`, `timeout`, `extra`, `vision`, `model_fingerprint`, and the model's profile,
`PROFILE_KEYS`: memrl.llm.profile), local (memrl.llm.local: `model` or `model_path`, `mode`,
`n_ctx`, `n_threads`, `reuse_prefix`, `prefix_block`) and scripted (memrl.llm.scripted:
`script`, a "package.module:function" from request to str, else an echo of the last user
message; `model` as its model id; `vision`; a reasoning profile for tests of the budget rule).
The client takes the rest: the cache, concurrency, retries and the request defaults."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from memrl.config.sections import EmbedderSettings, ModelSettings
from memrl.config.validate import Validated
from memrl.core.errors import ConfigError
from memrl.env.base import Env, EnvSettings
from memrl.llm.client import LLMClient
import importlib
from collections.abc import Callable

from memrl.core.cachedir import EMBEDDING_CACHE, LLM_CACHE, default_cache_dir
from memrl.llm.base import Backend, LLMRequest
from memrl.llm.embed import CachedEmbedder, Embedder, HashingEmbedder, LiteLLMEmbedder, MiniLMEmbedder
from memrl.llm.profile import plain_profile
from memrl.llm.response_cache import ResponseCache
from memrl.memory.base import MemoryModule


@dataclass
class Wired:
    env: Env
    memory: MemoryModule
    llm: LLMClient | None
    embedder: Any
    eval_env: Env | None = None  # transfer protocol: the held-out split


def eval_settings(v: Validated) -> EnvSettings:
    """The env settings of a transfer run's held-out split: `runner.eval_split` in the field
    the env's settings name for it (`EVAL_SPLIT_FIELD`), `runner.eval_max_tasks` tasks."""
    settings: EnvSettings = v.env  # type: ignore[assignment]
    try:
        return v.env_cls.Settings.model_validate(
            {**settings.model_dump(), settings.EVAL_SPLIT_FIELD: v.runner.eval_split,
             "max_tasks": v.runner.eval_max_tasks})
    except ValidationError as exc:
        raise ConfigError(f"runner.eval_split: {exc.errors()[0]['msg']}") from exc


def wire(v: Validated, run_dir: Path) -> Wired:
    embedder = build_embedder(v.embedder)
    memory = v.memory_cls.build(v.memory, run_dir=run_dir, embedder=embedder)
    env = v.env_cls(v.env, agent=v.agent.name)
    llm = build_client(v.llm) if (v.policy.needs_llm or memory.needs_llm) else None
    memory.attach_llm(llm)
    eval_env = None
    if v.runner.mode == "transfer":
        eval_env = v.env_cls(eval_settings(v), agent=v.agent.name)
    return Wired(env=env, memory=memory, llm=llm, embedder=embedder, eval_env=eval_env)


# ------------------------------------------------------------------------------ models
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


def build_embedder(settings: EmbedderSettings) -> Embedder:
    """The embedder of a validated `embedder` section (memrl.config.sections.EmbedderSettings:
    its keys and their defaults)."""
    s = settings
    inner: Embedder
    if s.backend == "minilm":
        inner = MiniLMEmbedder()
    elif s.backend == "litellm":
        if not s.model:
            raise ValueError("embedder.backend=litellm needs embedder.model")
        inner = LiteLLMEmbedder(str(s.model), api_base=s.api_base, api_key_env=s.api_key_env)
    elif s.backend == "hashing":
        inner = HashingEmbedder() if s.dim is None else HashingEmbedder(dim=int(s.dim))
    else:
        raise ValueError(f"unknown embedder backend {s.backend!r} (minilm | litellm | hashing)")
    if s.cache:
        return CachedEmbedder(inner, s.cache_path or default_cache_dir() / EMBEDDING_CACHE)
    return inner
