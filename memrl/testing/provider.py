"""Hosted-provider emulation for the fault server (`FaultServer(provider=True)`): requests for
a catalogued model are validated, answered and billed the way OpenAI or Google would, so tests
can drive the project's real client stack (litellm) as if it were talking to them.

The catalogue (`CATALOGUE`, a `ModelSpec` per model) is the one home of the facts (kind, prices
per million tokens, limits, reasoning efforts and their hidden tokens). A token is 4 characters
(a prompt at least 1); hidden reasoning is drawn from a hash of the request, never from time.

  OpenAI reasoning (gpt-5-mini, o3-mini)  refuse max_tokens, top_p, stop (gpt-5-mini),
      temperature != 1, an unknown reasoning_effort, max_completion_tokens above the limit
      (HTTP 400, OpenAI's error body). Reasoning tokens count against max_completion_tokens;
      when reasoning + output exceed it the reply is empty, finish_reason "length", and the
      whole budget is billed as reasoning.
  OpenAI chat (gpt-4o, gpt-4o-mini)  refuse reasoning_effort and max_tokens above 16384;
      apply stop; cut the text at max_tokens (finish_reason "length").
  Gemini (gemini-3-pro-preview)  generateContent; thinking (level "high" by default) counts
      against max_output_tokens; exhaustion is finishReason MAX_TOKENS with no parts.
  Embeddings (text-embedding-3-large)  hashed bag-of-words unit vectors.

Prompt caching: a prompt of at least `cache_min_tokens` whose prefix matches one seen before
(same model) reports the longest shared prefix in whole 128-token blocks as cached. The
`Ledger` keeps what was billed (module `fault_server`: `counts()["billed"]`).
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from memrl.testing.replies import apply_stop, embed_text, share, text_of

CHARS_PER_TOKEN = 4
CACHE_BLOCK = 128  # prompt caching works in blocks of this many tokens
GOOGLE_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
                 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE",
                 504: "DEADLINE_EXCEEDED"}
GOOGLE_NO_KEY = ("Method doesn't allow unregistered callers (callers without established identity). "
                 "Please use API Key or other form of API consumer identity to call this API.")
GOOGLE_BAD_KEY = "API key not valid. Please pass a valid API key."
KINDS = ("openai_reasoning", "openai_chat", "gemini", "embedding")


@dataclass(frozen=True, eq=False)
class ModelSpec:
    """What the emulation knows of one hosted model. Prices are USD per million tokens."""

    name: str
    kind: str                                  # one of KINDS
    input_per_m: float
    cached_per_m: float | None = None
    output_per_m: float | None = None
    max_output_tokens: int | None = None
    snapshot: str = ""                         # the model name replies carry
    efforts: tuple[str, ...] = ()              # accepted reasoning efforts / thinking levels
    default_effort: str | None = None
    effort_tokens: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # hidden tokens
    log_uniform: bool = True                   # how hidden tokens spread between the bounds
    accepts_stop: bool = True
    cache_min_tokens: int = 1024
    long_prompt_tokens: int | None = None      # prompts above this bill at `long_rates`
    long_rates: tuple[float, float, float] | None = None  # input, cached input, output
    dimensions: int | None = None              # embeddings
    max_input_tokens: int | None = None

    def rates(self, prompt_tokens: int) -> tuple[float, float, float]:
        """(input, cached input, output) USD per million tokens for a prompt of this size."""
        if self.long_rates is not None and self.long_prompt_tokens is not None \
                and prompt_tokens > self.long_prompt_tokens:
            return self.long_rates
        return (self.input_per_m, self.cached_per_m if self.cached_per_m is not None else self.input_per_m,
                self.output_per_m or 0.0)

    def usd(self, prompt_tokens: int, cached_tokens: int, completion_tokens: int) -> float:
        """What a reply costs: the uncached prompt at the input rate, the cached part at the
        cached rate, the completion (reasoning included) at the output rate."""
        inp, cached, out = self.rates(prompt_tokens)
        return ((prompt_tokens - cached_tokens) * inp + cached_tokens * cached
                + completion_tokens * out) / 1e6


_OPENAI_EFFORT = {"minimal": (0, 64), "low": (64, 768), "medium": (192, 2560), "high": (1024, 12288)}
CATALOGUE: dict[str, ModelSpec] = {s.name: s for s in (
    ModelSpec("gpt-5-mini", "openai_reasoning", 0.25, 0.025, 2.00, 128000, "gpt-5-mini-2025-08-07",
              ("minimal", "low", "medium", "high"), "medium", _OPENAI_EFFORT, accepts_stop=False),
    ModelSpec("o3-mini", "openai_reasoning", 1.10, 0.55, 4.40, 100000, "o3-mini-2025-01-31",
              ("low", "medium", "high"), "medium", _OPENAI_EFFORT),
    ModelSpec("gpt-4o", "openai_chat", 2.50, 1.25, 10.00, 16384, "gpt-4o-2024-08-06"),
    ModelSpec("gpt-4o-mini", "openai_chat", 0.15, 0.075, 0.60, 16384, "gpt-4o-mini-2024-07-18"),
    ModelSpec("gemini-3-pro-preview", "gemini", 2.00, 0.20, 12.00, 65536, "gemini-3-pro-preview",
              ("low", "high"), "high", {"low": (500, 3000), "high": (4000, 16000)}, log_uniform=False,
              cache_min_tokens=4096, long_prompt_tokens=200_000, long_rates=(4.00, 0.40, 18.00),
              max_input_tokens=1_048_576),
    ModelSpec("text-embedding-3-large", "embedding", 0.13, snapshot="text-embedding-3-large",
              dimensions=3072, max_input_tokens=8191),
)}


def spec_for(model: Any) -> ModelSpec | None:
    """The catalogue entry for a request's model name (or its dated snapshot), else None."""
    name = str(model or "").removeprefix("models/")
    name = name.split("/", 1)[1] if name.startswith(("openai/", "gemini/")) else name
    return CATALOGUE.get(name) or next((s for s in CATALOGUE.values() if s.snapshot == name), None)


@dataclass
class ProviderPlan:
    """Settings of the emulation. `reasoning_scale` multiplies every hidden reasoning/thinking
    draw (tests force exhaustion with it); `react_rate` is the share of ALFWorld replies an
    OpenAI reasoning model writes as "Thought: ...\\nAction: ..."; `caching` turns prompt
    caching on; `seed` varies the draws."""

    reasoning_scale: float = 1.0
    react_rate: float = 0.3
    caching: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if self.reasoning_scale < 0 or not 0.0 <= self.react_rate <= 1.0:
            raise ValueError("reasoning_scale must be >= 0 and react_rate in [0, 1]")


# ------------------------------------------------------------------------------ tokens
def prompt_tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def output_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def serialize(messages: Sequence[Mapping[str, Any]]) -> str:
    """The prompt as the emulation counts and caches it: the messages in order, role and content."""
    return "".join(f"<|{m.get('role', 'user')}|>\n{text_of(m.get('content'))}\n" for m in messages)


def spread(lo: int, hi: int, u: float, log: bool) -> int:
    """A point between lo and hi for u in [0, 1): log-uniform (uniform when lo is 0)."""
    if log and lo > 0:
        return int(round(lo * (hi / lo) ** u))
    return int(round(lo + (hi - lo) * u))


class PromptCache:
    """Automatic prefix caching: per model, hashes of every prompt's prefix at each 128-token
    boundary (prompts of at least the model's minimum only)."""

    def __init__(self) -> None:
        self._seen: dict[str, set[bytes]] = {}
        self._lock = threading.Lock()

    def cached_tokens(self, model: str, prompt: str, min_tokens: int) -> int:
        """The cached part of this prompt (0 below the minimum), and remember its prefixes."""
        if prompt_tokens(prompt) < min_tokens:
            return 0
        block = CACHE_BLOCK * CHARS_PER_TOKEN
        h, digests = hashlib.blake2b(digest_size=16), []
        for k in range(len(prompt) // block):
            h.update(prompt[k * block:(k + 1) * block].encode("utf-8", "surrogatepass"))
            digests.append(h.copy().digest())
        with self._lock:
            seen = self._seen.setdefault(model, set())
            hit = next((k for k, d in enumerate(digests) if d not in seen), len(digests))
            seen.update(digests)
        cached = hit * CACHE_BLOCK
        return cached if cached >= min_tokens else 0

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()


LEDGER_KEYS = ("requests", "replies", "refused", "errors", "prompt_tokens", "cached_tokens",
               "completion_tokens", "reasoning_tokens", "empty_replies", "cut_replies")


class Ledger:
    """What the emulated provider billed, per model and in total. `requests` = `replies`
    (HTTP 200, billed) + `refused` (4xx, rate limits included) + `errors` (5xx, hangs)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by: dict[str, dict[str, float]] = {}

    def _row(self, model: str) -> dict[str, float]:
        return self._by.setdefault(model, {**{k: 0 for k in LEDGER_KEYS}, "usd": 0.0})

    def bill(self, model: str, *, prompt: int, cached: int = 0, completion: int = 0, reasoning: int = 0,
             empty: bool = False, cut: bool = False, usd: float) -> None:
        with self._lock:
            row = self._row(model)
            for k, v in (("requests", 1), ("replies", 1), ("prompt_tokens", prompt), ("cached_tokens", cached),
                         ("completion_tokens", completion), ("reasoning_tokens", reasoning),
                         ("empty_replies", int(empty)), ("cut_replies", int(cut)), ("usd", usd)):
                row[k] += v

    def unbilled(self, model: str, status: int) -> None:
        with self._lock:
            row = self._row(model)
            row["requests"] += 1
            row["refused" if 400 <= status < 500 else "errors"] += 1

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            by = {m: dict(row) for m, row in sorted(self._by.items())}
        total: dict[str, Any] = {k: sum(int(r[k]) for r in by.values()) for k in LEDGER_KEYS}
        total["usd"] = sum(r["usd"] for r in by.values())
        return {**total, "by_model": by}

    def reset(self) -> None:
        with self._lock:
            self._by.clear()


# ------------------------------------------------------------------------------ error bodies
def openai_error(message: str, param: str | None, code: str | None,
                 type_: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def google_error(status: int, message: str) -> dict[str, Any]:
    return {"error": {"code": status, "message": message, "status": GOOGLE_STATUS.get(status, "UNKNOWN")}}


def _num(v: Any) -> str:
    return str(int(v)) if isinstance(v, (int, float)) and float(v).is_integer() else str(v)


def _given(body: Mapping[str, Any], key: str) -> bool:
    return body.get(key) is not None


def _too_large(param: str, n: int, limit: int) -> dict[str, Any]:
    return openai_error(f"{param} is too large: {n}. This model supports at most {limit} completion "
                        f"tokens, whereas you provided {n}.", param, "invalid_value")


def _unsupported(param: str, extra: str = "") -> dict[str, Any]:
    return openai_error(f"Unsupported parameter: '{param}' is not supported with this model.{extra}",
                        param, "unsupported_parameter")


def openai_refusal(spec: ModelSpec, body: Mapping[str, Any]) -> dict[str, Any] | None:
    """OpenAI's 400 body for a request this model refuses, or None."""
    budget_key = "max_completion_tokens" if _given(body, "max_completion_tokens") else "max_tokens"
    if spec.kind == "openai_reasoning":
        if _given(body, "max_tokens"):
            return _unsupported("max_tokens", " Use 'max_completion_tokens' instead.")
        t = body.get("temperature")
        if t is not None and t != 1:
            return openai_error(f"Unsupported value: 'temperature' does not support {_num(t)} with this "
                                "model. Only the default (1) value is supported.", "temperature",
                                "unsupported_value")
        for param in ("top_p",) + (() if spec.accepts_stop else ("stop",)):
            if _given(body, param):
                return _unsupported(param)
        effort = body.get("reasoning_effort")
        if effort is not None and effort not in spec.efforts:
            listed = ", ".join(f"'{e}'" for e in spec.efforts[:-1]) + f", and '{spec.efforts[-1]}'"
            return openai_error(f"Unsupported value: 'reasoning_effort' does not support {effort!r} with "
                                f"this model. Supported values are: {listed}.", "reasoning_effort",
                                "unsupported_value")
    elif _given(body, "reasoning_effort"):
        return _unsupported("reasoning_effort")
    fmt = body.get("response_format")
    if isinstance(fmt, Mapping) and fmt.get("type") == "json_object" \
            and "json" not in serialize(body.get("messages") or []).lower():
        return openai_error("'messages' must contain the word 'json' in some form, to use 'response_format' "
                            "of type 'json_object'.", "messages", None)
    budget = body.get(budget_key)
    if budget is not None:
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
            return openai_error(f"Invalid '{budget_key}': integer below minimum value. Expected a value "
                                f">= 1, but got {budget!r} instead.", budget_key, "integer_below_min_value")
        if budget > (spec.max_output_tokens or budget):
            return _too_large(budget_key, budget, spec.max_output_tokens or budget)
    return None


# ------------------------------------------------------------------------------ Gemini requests
def _cfg(cfg: Mapping[str, Any], camel: str) -> Any:
    """A generationConfig field under its camelCase or snake_case name (the API takes both)."""
    snake = re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), camel)
    return cfg.get(camel, cfg.get(snake))


_GENERATE = re.compile(r"/models/([^/:]+):generateContent$")


def provider_route(path: str) -> tuple[str, str | None] | None:
    """The emulation's own routes: ("gemini", model from the path) or ("embeddings", None)."""
    m = _GENERATE.search(path)
    return ("gemini", m.group(1)) if m else ("embeddings", None) if path.endswith("/embeddings") else None


def not_found(route: str, model: str) -> dict[str, Any]:
    """The 404 body for a model the route does not serve."""
    if route == "gemini":
        return google_error(404, f"models/{model} is not found for API version v1beta, or is not "
                                 "supported for generateContent.")
    return openai_error(f"The model `{model}` does not exist or you do not have access to it.", None,
                        "model_not_found")


# ------------------------------------------------------------------------------ the emulation
ReplyFn = Callable[[Sequence[Mapping[str, Any]], float], str]


class Provider:
    """Answers and bills requests for catalogued models. `reply(messages, react_rate)` makes
    the visible text; `text` (an injected 200 fault's content) replaces it."""

    def __init__(self, plan: ProviderPlan, reply: ReplyFn) -> None:
        self.plan = plan
        self.reply = reply
        self.ledger = Ledger()
        self.cache = PromptCache()

    @staticmethod
    def spec(model: Any, route: str) -> ModelSpec | None:
        """The model's entry when this route serves its kind (chat, gemini, embeddings)."""
        s = spec_for(model)
        kinds = {"chat": ("openai_reasoning", "openai_chat"), "gemini": ("gemini",), "embeddings": ("embedding",)}
        return s if s is not None and s.kind in kinds.get(route, ()) else None

    def _hidden(self, spec: ModelSpec, level: str, prompt: str, seed: Any) -> int:
        lo, hi = spec.effort_tokens[level]
        u = share(f"{self.plan.seed}\0{spec.name}\0{level}\0{seed}\0{prompt}", "hidden")
        n = spread(lo, hi, u, spec.log_uniform)
        return int(round(n * self.plan.reasoning_scale))

    def _cached(self, spec: ModelSpec, prompt: str) -> int:
        return self.cache.cached_tokens(spec.name, prompt, spec.cache_min_tokens) if self.plan.caching else 0

    def chat(self, spec: ModelSpec, body: Mapping[str, Any], messages: list[dict[str, Any]],
             text: str | None = None) -> tuple[int, dict[str, Any]]:
        """POST /v1/chat/completions for an OpenAI model: (status, response body)."""
        refusal = openai_refusal(spec, body)
        if refusal is not None:
            self.ledger.unbilled(spec.name, 400)
            return 400, refusal
        thinking = spec.kind == "openai_reasoning"
        prompt = serialize(messages)
        n_prompt, cached = prompt_tokens(prompt), self._cached(spec, prompt)
        budget = body.get("max_completion_tokens") or body.get("max_tokens") or spec.max_output_tokens or 0
        if text is None:
            text = self.reply(messages, self.plan.react_rate if thinking else 0.0)
        text = apply_stop(text, body.get("stop"))
        effort = str(body.get("reasoning_effort") or spec.default_effort)
        reasoning = self._hidden(spec, effort, prompt, body.get("seed")) if thinking else 0
        cut = reasoning + output_tokens(text) > budget
        if cut and thinking:  # the budget ran out while reasoning: nothing is delivered
            text, reasoning, completion = "", budget, budget
        elif cut:
            text, completion = text[:budget * CHARS_PER_TOKEN], budget
        else:
            completion = reasoning + output_tokens(text)
        usd = spec.usd(n_prompt, cached, completion)
        self.ledger.bill(spec.name, prompt=n_prompt, cached=cached, completion=completion, reasoning=reasoning,
                         empty=not text, cut=cut, usd=usd)
        now = time.time_ns()
        return 200, {
            "id": "chatcmpl-" + hashlib.sha1(f"{now}:{prompt}".encode()).hexdigest()[:24],
            "object": "chat.completion", "created": now // 10**9, "model": spec.snapshot or spec.name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": None},
                         "finish_reason": "length" if cut else "stop", "logprobs": None}],
            "usage": {"prompt_tokens": n_prompt, "completion_tokens": completion,
                      "total_tokens": n_prompt + completion,
                      "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
                      "completion_tokens_details": {"reasoning_tokens": reasoning, "audio_tokens": 0,
                                                    "accepted_prediction_tokens": 0,
                                                    "rejected_prediction_tokens": 0}},
            "service_tier": "default", "system_fingerprint": None,
        }

    def _gemini_refusal(self, spec: ModelSpec, cfg: Mapping[str, Any]) -> str | None:
        budget = _cfg(cfg, "maxOutputTokens")
        limit = spec.max_output_tokens or 0
        if budget is not None and (not isinstance(budget, int) or not 1 <= budget <= limit):
            return (f"Unable to submit request because it has a maxOutputTokens value of {budget} but the "
                    f"supported range is from 1 (inclusive) to {limit + 1} (exclusive). Update the value "
                    "and try again.")
        thinking = _cfg(cfg, "thinkingConfig") or {}
        level, tbudget = _cfg(thinking, "thinkingLevel"), _cfg(thinking, "thinkingBudget")
        if level is not None and str(level).lower() not in spec.efforts:
            return f"Thinking level {level} is not supported for this model. Supported levels: " \
                   + ", ".join(spec.efforts) + "."
        if level is not None and tbudget is not None:
            return "You can only set only one of thinking budget and thinking level."
        if tbudget == 0:
            return "Budget 0 is invalid. This model only works in thinking mode."
        return None

    def generate(self, spec: ModelSpec, body: Mapping[str, Any], messages: list[dict[str, Any]],
                 text: str | None = None) -> tuple[int, dict[str, Any]]:
        """POST /v1beta/models/<model>:generateContent: (status, response body)."""
        cfg = body.get("generationConfig", body.get("generation_config")) or {}
        refusal = self._gemini_refusal(spec, cfg)
        if refusal is not None:
            self.ledger.unbilled(spec.name, 400)
            return 400, google_error(400, refusal)
        thinking_cfg = _cfg(cfg, "thinkingConfig") or {}
        level = str(_cfg(thinking_cfg, "thinkingLevel") or spec.default_effort).lower()
        prompt = serialize(messages)
        n_prompt, cached = prompt_tokens(prompt), self._cached(spec, prompt)
        budget = _cfg(cfg, "maxOutputTokens") or spec.max_output_tokens or 0
        if text is None:
            text = self.reply(messages, 0.0)
        text = apply_stop(text, _cfg(cfg, "stopSequences"))
        thoughts = self._hidden(spec, level, prompt, _cfg(cfg, "seed"))
        tbudget = _cfg(thinking_cfg, "thinkingBudget")
        if isinstance(tbudget, int) and tbudget > 0:
            thoughts = min(thoughts, tbudget)
        cut = thoughts + output_tokens(text) > budget
        candidates = 0 if cut else output_tokens(text)
        if cut:
            thoughts, content = budget, {"role": "model"}
        else:
            parts = [{"text": text}]
            if _cfg(thinking_cfg, "includeThoughts"):
                parts.insert(0, {"text": "**Working it out**\n\nI weighed the request and settled on a "
                                         "short answer.", "thought": True})
            content = {"role": "model", "parts": parts}
        usd = spec.usd(n_prompt, cached, candidates + thoughts)
        self.ledger.bill(spec.name, prompt=n_prompt, cached=cached, completion=candidates + thoughts,
                         reasoning=thoughts, empty=cut or not text, cut=cut, usd=usd)
        usage: dict[str, Any] = {"promptTokenCount": n_prompt, "candidatesTokenCount": candidates,
                                 "thoughtsTokenCount": thoughts,
                                 "totalTokenCount": n_prompt + candidates + thoughts,
                                 "promptTokensDetails": [{"modality": "TEXT", "tokenCount": n_prompt}]}
        if cached:
            usage["cachedContentTokenCount"] = cached
        return 200, {"candidates": [{"content": content, "finishReason": "MAX_TOKENS" if cut else "STOP",
                                     "index": 0}],
                     "usageMetadata": usage, "modelVersion": spec.snapshot or spec.name,
                     "responseId": hashlib.sha1(f"{time.time_ns()}:{prompt}".encode()).hexdigest()[:22]}

    def embed(self, spec: ModelSpec, body: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        """POST /v1/embeddings: (status, response body)."""
        raw = body.get("input")
        texts = [raw] if isinstance(raw, str) else list(raw) if isinstance(raw, list) else []
        if texts and all(isinstance(t, int) for t in texts):
            texts = [" ".join(map(str, texts))]  # one input given as token ids
        texts = [t if isinstance(t, str) else " ".join(map(str, t)) if isinstance(t, list) else None
                 for t in texts]
        dims = body.get("dimensions", spec.dimensions)
        error = None
        if not texts or any(t is None or t == "" for t in texts):
            error = openai_error("'$.input' is invalid. Please check the API reference: "
                                 "https://platform.openai.com/docs/api-reference.", "input", None)
        elif not isinstance(dims, int) or not 1 <= dims <= (spec.dimensions or dims):
            error = openai_error(f"Invalid value for 'dimensions' = {dims}. Must be between 1 and "
                                 f"{spec.dimensions}.", "dimensions", "invalid_value")
        elif max(prompt_tokens(t) for t in texts) > (spec.max_input_tokens or 1 << 62):  # type: ignore[arg-type]
            error = openai_error(f"This model's maximum context length is {spec.max_input_tokens} tokens, "
                                 "however you requested more. Please reduce your prompt.", None,
                                 "context_length_exceeded")
        if error is not None:
            self.ledger.unbilled(spec.name, 400)
            return 400, error
        vectors = [embed_text(t or "", dims) for t in texts]
        n = sum(prompt_tokens(t or "") for t in texts)
        self.ledger.bill(spec.name, prompt=n, usd=spec.usd(n, 0, 0))
        b64 = body.get("encoding_format") == "base64"
        return 200, {"object": "list", "model": spec.snapshot or spec.name,
                     "data": [{"object": "embedding", "index": i,
                               "embedding": base64.b64encode(struct.pack(f"<{len(v)}f", *v)).decode()
                               if b64 else v} for i, v in enumerate(vectors)],
                     "usage": {"prompt_tokens": n, "total_tokens": n}}

    @staticmethod
    def listing(google: bool = False) -> dict[str, Any]:
        """GET /v1/models (OpenAI's form) or /v1beta/models (Google's) over the catalogue."""
        if google:
            return {"models": [{"name": f"models/{s.name}", "version": s.snapshot, "displayName": s.name,
                                "outputTokenLimit": s.max_output_tokens, "inputTokenLimit": s.max_input_tokens,
                                "supportedGenerationMethods": ["generateContent"], "thinking": True}
                               for s in CATALOGUE.values() if s.kind == "gemini"]}
        return {"object": "list", "data": [{"id": s.name, "object": "model", "created": 0,
                                            "owned_by": "google" if s.kind == "gemini" else "openai"}
                                           for s in CATALOGUE.values()]}

    def counts(self) -> dict[str, Any]:
        return self.ledger.snapshot()

    def reset(self) -> None:
        self.ledger.reset()
        self.cache.clear()
