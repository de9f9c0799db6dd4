"""Backend for any model litellm can reach: hosted APIs, vLLM, Ollama, llama.cpp servers.

litellm is imported on first use, after `LITELLM_LOCAL_MODEL_COST_MAP=True` is set so that
importing it never reaches for the network. litellm's own retries are switched off
(`num_retries=0`, `max_retries=0`): `LLMClient` retries.

Images go out as chat-completions `image_url` parts. Whether the model takes them is
`vision` when given, else litellm's own model list (`litellm.supports_vision`), which knows
hosted models but not what a self-hosted server (vLLM, Ollama) serves: set `vision: true`
for those.

Model identity (what the response cache and the resume check key on, never where it is
served): `model_id` is the model name; `cache_identity` is the model name for a hosted API
(no `api_base`: the same key as ever), and for a server at `api_base` the name plus a
fingerprint: `model_fingerprint` when the user sets one, else a hash of what the server
reports for the model at `<api_base>/models` (its id and any file, hash or size fields it
exposes; never timestamps or the URL). A server that cannot say (no listing, several models
none of which is the one asked for) leaves the name alone, and `identity()` says so. The
base URL goes into the run card only.

`extra` (settings passed to `litellm.completion` as they are, e.g. sampling settings) can
change the answer, so it is part of the cache identity (`|extra=<its JSON>` after the key),
and answers made with other settings are never served from the cache.

Base models behind an OpenAI-compatible server (e.g. llama.cpp's `llama-server` or
`python -m llama_cpp.server` with the Gemma 270M base GGUF): use the model prefix
`text-completion-openai/<name>`, which sends the prompt to `/v1/completions` as text to be
continued. Through the chat route (`openai/<name>`) the server wraps the prompt as a user
message in a chat template, which a base model cannot follow. `extra` matches the embedded
backend's sampling with e.g. `{repeat_penalty: 1.0}` (llama.cpp's server defaults to 1.1).

An empty reply (HTTP 200, no text) is a provider fault here (`empty_reply_is_fault`),
unless the provider says the budget ran out (`finish_reason: length`: memrl.llm.client).

What a reply says beyond its text is kept: `finish_reason`, the reasoning tokens
(`usage.completion_tokens_details.reasoning_tokens`; Gemini's thoughts) and the prompt
tokens the provider served from its cache (`usage.prompt_tokens_details.cached_tokens`).
Cost: the config's prices when it gives them, else the project's price list
(memrl.llm.price_list, with its tiers), else litellm's price list (which bills cached prompt
tokens at the cached rate), else the reply is `priced: False` (never a silent $0).
The model's kind, the settings it takes and its prices are its `profile`
(memrl.llm.profile); `reasoning_effort` is sent only when configured, and is then part of
the cache identity (`|effort=<e>`), like `extra`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from memrl.llm.base import LLMRequest, LLMResponse, MissingKeyError, openai_content
from memrl.llm.litellm_import import import_litellm
from memrl.llm.profile import LITELLM_PRICES, ModelProfile, litellm_profile

log = logging.getLogger(__name__)

# what a server's model listing may say about the model itself (vLLM: root/parent; llama.cpp's
# server: meta with the file's size and parameter count; others: a digest or file name)
IDENTITY_FIELDS = ("id", "root", "parent", "digest", "sha256", "hash", "checksum", "file",
                   "filename", "path", "model_path", "size", "meta")


def key_problem(api_key_env: str | None) -> str | None:
    """Why the key cannot be read, or None (no key variable configured, or it is set)."""
    if api_key_env and not os.environ.get(api_key_env):
        return f"environment variable {api_key_env} (the API key) is not set"
    return None


def api_key_from_env(api_key_env: str | None) -> str | None:
    problem = key_problem(api_key_env)
    if problem:
        raise MissingKeyError(problem)
    return os.environ.get(api_key_env) if api_key_env else None


def served_name(model: str) -> str:
    """The name a server knows the model by: litellm's provider prefix dropped
    (`openai/Qwen/Qwen2.5-7B-Instruct` -> `Qwen/Qwen2.5-7B-Instruct`)."""
    head, sep, rest = model.partition("/")
    return rest if sep and head in _PROVIDERS else model


_PROVIDERS = {"openai", "hosted_vllm", "vllm", "ollama", "ollama_chat", "lm_studio",
              "llamafile", "text-completion-openai", "openai_like", "litellm_proxy"}


def pick_listed(listing: Any, name: str) -> dict[str, Any] | None:
    """The entry of a `/models` listing for `name` (or the only entry: a server of one
    model answers whatever name it is asked for), reduced to identity fields."""
    data = listing.get("data") if isinstance(listing, Mapping) else None
    if not isinstance(data, list):
        return None
    entries = [d for d in data if isinstance(d, Mapping)]
    match = [d for d in entries if d.get("id") == name] or (entries if len(entries) == 1 else [])
    if not match:
        return None
    return {k: match[0][k] for k in IDENTITY_FIELDS if k in match[0]}


def fingerprint_of(reported: Mapping[str, Any]) -> str:
    blob = json.dumps(reported, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


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
        model_fingerprint: str | None = None,
        profile: Mapping[str, Any] | ModelProfile | None = None,
    ) -> None:
        self.model = model
        self.vision = vision
        self.api_base = api_base or None
        self.api_key_env = api_key_env or None
        self.timeout = float(timeout)
        self.extra: dict[str, Any] = dict(extra or {})
        self.model_id = model  # what the model is called; where it is served is api_base
        self.model_fingerprint = model_fingerprint or None
        self._known_vision: bool | None = None
        self._identity: dict[str, Any] | None = None
        self._identity_final = False
        self._retry_at = 0.0
        self._identity_lock = threading.Lock()
        # what the model is (memrl.llm.profile): from the llm config's profile keys and litellm
        self._profile_cfg = profile if isinstance(profile, Mapping) else {}
        self._profile: ModelProfile | None = profile if isinstance(profile, ModelProfile) else None
        self.reasoning_effort: str | None = self._profile_cfg.get("reasoning_effort") or (
            self._profile.effort if self._profile is not None else None)

    empty_reply_is_fault = True

    @property
    def profile(self) -> ModelProfile:
        if self._profile is None:
            self._profile = litellm_profile({**self._profile_cfg, "model": self.model})
        return self._profile

    def key_problem(self) -> str | None:
        return key_problem(self.api_key_env)

    # -- identity ----------------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        """What the model is (module doc): `key` (the cache identity), `source` (how it was
        found), `reported` (what the server said), `api_base` (recorded, not keyed)."""
        with self._identity_lock:
            if self._identity is not None and (self._identity_final or time.monotonic() < self._retry_at):
                return dict(self._identity)
            ident, final = self._find_identity()
            if self.extra or self.reasoning_effort:  # settings that can change the answer (module doc)
                ident = {**ident, "key": ident["key"] + self._extra_key()}
                if self.extra:
                    ident["extra"] = dict(self.extra)
                if self.reasoning_effort:
                    ident["reasoning_effort"] = self.reasoning_effort
            # a server that cannot be reached now is asked again, but not on every call
            self._identity, self._identity_final = ident, final
            self._retry_at = time.monotonic() + 30.0
            return dict(ident)

    @property
    def cache_identity(self) -> str:
        if self.api_base is None and self.model_fingerprint is None:
            return self.model + self._extra_key()  # hosted: the name, as cache keys always had it
        return str(self.identity()["key"])

    def _extra_key(self) -> str:
        key = ""
        if self.reasoning_effort:
            key += f"|effort={self.reasoning_effort}"
        if self.extra:
            key += "|extra=" + json.dumps(self.extra, sort_keys=True, separators=(",", ":"), default=str)
        return key

    def _find_identity(self) -> tuple[dict[str, Any], bool]:
        base: dict[str, Any] = {"model": self.model, "api_base": self.api_base}
        if self.model_fingerprint is not None:
            return {**base, "key": f"{self.model}#{self.model_fingerprint}",
                    "source": "llm.model_fingerprint"}, True
        if self.api_base is None:
            return {**base, "key": self.model, "source": "model name (hosted API)"}, True
        url = self.api_base.rstrip("/") + "/models"
        try:
            listing = self._get_json(url)
        except urllib.error.HTTPError as exc:  # the server answered: it has no listing for us
            return {**base, "key": self.model,
                    "source": f"model name ({url} answered HTTP {exc.code})"}, True
        except (OSError, ValueError) as exc:  # unreachable now: try again on the next use
            return {**base, "key": self.model, "source": f"model name ({url} unreachable: {exc})"}, False
        reported = pick_listed(listing, served_name(self.model))
        if reported is None:
            log.warning("%s does not list %s: the response cache keys on the model name only; "
                        "set llm.model_fingerprint to say which model this is", url, self.model)
            return {**base, "key": self.model,
                    "source": f"model name ({url} does not list it)"}, True
        return {**base, "key": f"{self.model}#{fingerprint_of(reported)}",
                "source": "server /models", "reported": reported}, True

    def _get_json(self, url: str) -> Any:
        headers = {"Accept": "application/json"}
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        req = urllib.request.Request(url, headers=headers)
        with urllib.request.urlopen(req, timeout=min(self.timeout, 30.0)) as resp:
            return json.loads(resp.read().decode("utf-8"))

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
        if self.reasoning_effort:
            kwargs["reasoning_effort"] = self.reasoning_effort
        if self.api_base:
            kwargs["api_base"] = self.api_base
        key = api_key_from_env(self.api_key_env)
        if key:
            kwargs["api_key"] = key
        kwargs.update(self.extra)
        raw = litellm.completion(**kwargs)
        choice = raw.choices[0]
        usage = getattr(raw, "usage", None)
        prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion = int(getattr(usage, "completion_tokens", 0) or 0)
        cached = _detail(usage, "prompt_tokens_details", "cached_tokens")
        cost, priced = self._cost(litellm, raw, prompt, completion, cached)
        return LLMResponse(
            text=choice.message.content or "",
            prompt_tokens=prompt,
            completion_tokens=completion,
            cost_usd=cost,
            model=self.model_id,
            reasoning_tokens=_detail(usage, "completion_tokens_details", "reasoning_tokens"),
            cached_prompt_tokens=cached,
            finish_reason=str(getattr(choice, "finish_reason", "") or ""),
            priced=priced,
        )

    def _cost(self, litellm: ModuleType, raw: Any, prompt: int, completion: int,
              cached: int) -> tuple[float, bool]:
        """(USD, priced) of one reply (module doc)."""
        profile = self.profile
        if profile.prices is not None and profile.prices.source != LITELLM_PRICES:  # the config's or the project's
            return profile.prices.cost(prompt, completion, cached), True
        try:
            cost = float(litellm.completion_cost(completion_response=raw) or 0.0)
        except Exception:  # litellm raises a variety of errors for unpriced models
            cost = 0.0
        if cost > 0 or profile.prices is not None:
            return cost, True
        return 0.0, prompt + completion == 0


def _detail(usage: Any, group: str, name: str) -> int:
    """usage.<group>.<name> as an int (0 when the provider does not report it)."""
    part = getattr(usage, group, None)
    value = part.get(name) if isinstance(part, Mapping) else getattr(part, name, None)
    return int(value or 0)
