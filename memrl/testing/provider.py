"""Hosted-provider emulation for the fault server (`FaultServer(provider=True)`): requests for
a catalogued model are validated, answered and billed the way OpenAI or Google would, so tests
can drive the project's real client stack (litellm) as if it were talking to them.

Its parts: the catalogue (memrl.testing.catalogue: one `ModelSpec` per model, the one home of
its facts), the refusals (memrl.testing.provider_rules: key, model, parameters, context
window, each in the provider's status and error shape), the token count, prompt cache and
ledger (memrl.testing.ledger). A token is 4 characters (a prompt at least 1); hidden
reasoning is drawn from a hash of the request, never from time.

  OpenAI reasoning (gpt-5-mini, o3-mini)  refuse what provider_rules lists. Reasoning tokens
      count against max_completion_tokens; when reasoning + output exceed it the choice is
      empty, finish_reason "length", and the whole budget is billed as reasoning.
  OpenAI chat (gpt-4o, gpt-4o-mini)  apply stop; cut the text at max_tokens (finish_reason
      "length").
  Both: `n` choices, each drawn and billed on its own (the prompt once).
  Gemini (gemini-3-pro-preview)  generateContent; thinking (level "high" by default) counts
      against max_output_tokens; exhaustion is finishReason MAX_TOKENS with no parts;
      `candidateCount` candidates, each billed. Prices: both tiers of memrl.llm.price_list.
  Embeddings (text-embedding-3-large)  hashed bag-of-words unit vectors.

Prompt caching: a prompt of at least `cache_min_tokens` whose prefix matches one seen before
(same model) reports the longest shared prefix in whole 128-token blocks as cached. The
`Ledger` keeps what was billed (module `fault_server`: `counts()["billed"]`); a handler called
with `delivered=False` bills a reply the client will never read (a cut body, a hang).
"""

from __future__ import annotations

import base64
import hashlib
import re
import struct
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from memrl.testing.catalogue import CATALOGUE, KINDS, ModelSpec, spec_for
from memrl.testing.ledger import (CACHE_BLOCK, CHARS_PER_TOKEN, LEDGER_KEYS, Ledger, PromptCache, output_tokens,
                                  prompt_tokens, serialize, spread)
from memrl.testing.provider_rules import (GOOGLE_BAD_KEY, GOOGLE_NO_KEY, GOOGLE_STATUS, cfg, gemini_refusal,
                                          google_error, key_refusal, not_found, openai_error, openai_refusal)
from memrl.testing.replies import apply_stop, embed_text, share

__all__ = ["CACHE_BLOCK", "CATALOGUE", "CHARS_PER_TOKEN", "EMULATED_KEYS", "GOOGLE_BAD_KEY", "GOOGLE_NO_KEY",
           "GOOGLE_STATUS", "KINDS", "LEDGER_KEYS", "Ledger", "ModelSpec", "PromptCache", "Provider", "ProviderPlan",
           "google_error", "key_refusal", "not_found", "openai_error", "output_tokens", "prompt_tokens",
           "provider_route", "serialize", "spec_for", "spread"]


# the keys the emulation takes when its server is given none (FaultServer(provider=True)): every
# request is checked, as a provider checks it; OpenAI's routes take the first, Gemini's the second
EMULATED_KEYS = {"openai": "sk-emulated", "google": "gm-emulated"}


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


_GENERATE = re.compile(r"/models/([^/:]+):generateContent$")


def provider_route(path: str) -> tuple[str, str | None] | None:
    """The emulation's own routes: ("gemini", model from the path) or ("embeddings", None)."""
    m = _GENERATE.search(path)
    return ("gemini", m.group(1)) if m else ("embeddings", None) if path.endswith("/embeddings") else None


# ------------------------------------------------------------------------------ the emulation
ReplyFn = Callable[[Sequence[Mapping[str, Any]], float], str]


class Provider:
    """Answers and bills requests for catalogued models. `reply(messages, react_rate)` makes
    the visible text; `text` (an injected 200 fault's content) replaces it; `delivered`
    false bills a reply the client will never read (module doc)."""

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

    def _hidden(self, spec: ModelSpec, level: str, prompt: str, seed: Any, index: int = 0) -> int:
        lo, hi = spec.effort_tokens[level]
        salt = f"\0{index}" if index else ""  # choice 0 keeps the draw a single reply gets
        u = share(f"{self.plan.seed}\0{spec.name}\0{level}\0{seed}\0{prompt}{salt}", "hidden")
        n = spread(lo, hi, u, spec.log_uniform)
        return int(round(n * self.plan.reasoning_scale))

    def _cached(self, spec: ModelSpec, prompt: str) -> int:
        return self.cache.cached_tokens(spec.name, prompt, spec.cache_min_tokens) if self.plan.caching else 0

    def _choice(self, spec: ModelSpec, text: str, budget: int, reasoning: int) -> tuple[str, int, int, bool]:
        """(text, completion tokens, reasoning tokens, cut) of one choice: hidden reasoning is
        spent first; a budget it exhausts leaves no text and is billed whole as reasoning."""
        thinking = spec.kind in ("openai_reasoning", "gemini")
        cut = reasoning + output_tokens(text) > budget
        if cut and thinking:
            return "", budget, budget, True
        if cut:
            return text[:budget * CHARS_PER_TOKEN], budget, reasoning, True
        return text, reasoning + output_tokens(text), reasoning, False

    def chat(self, spec: ModelSpec, body: Mapping[str, Any], messages: list[dict[str, Any]],
             text: str | None = None, delivered: bool = True) -> tuple[int, dict[str, Any]]:
        """POST /v1/chat/completions for an OpenAI model: (status, response body)."""
        prompt = serialize(messages)
        n_prompt = prompt_tokens(prompt)
        refusal = openai_refusal(spec, body, prompt, n_prompt)
        if refusal is not None:
            self.ledger.unbilled(spec.name, 400)
            return 400, refusal
        thinking = spec.kind == "openai_reasoning"
        cached = self._cached(spec, prompt)
        budget = body.get("max_completion_tokens") or body.get("max_tokens") or spec.max_output_tokens or 0
        if text is None:
            text = self.reply(messages, self.plan.react_rate if thinking else 0.0)
        text = apply_stop(text, body.get("stop"))
        effort = str(body.get("reasoning_effort") or spec.default_effort)
        choices, completion, reasoning = [], 0, 0
        for i in range(int(body.get("n") or 1)):
            hidden = self._hidden(spec, effort, prompt, body.get("seed"), i) if thinking else 0
            out, used, spent, cut = self._choice(spec, text, budget, hidden)
            completion, reasoning = completion + used, reasoning + spent
            choices.append({"index": i, "message": {"role": "assistant", "content": out, "refusal": None},
                            "finish_reason": "length" if cut else "stop", "logprobs": None})
        usd = spec.usd(n_prompt, cached, completion)
        self.ledger.bill(spec.name, prompt=n_prompt, cached=cached, completion=completion, reasoning=reasoning,
                         empty=any(not c["message"]["content"] for c in choices),
                         cut=any(c["finish_reason"] == "length" for c in choices), usd=usd, delivered=delivered)
        now = time.time_ns()
        return 200, {
            "id": "chatcmpl-" + hashlib.sha1(f"{now}:{prompt}".encode()).hexdigest()[:24],
            "object": "chat.completion", "created": now // 10**9, "model": spec.snapshot or spec.name,
            "choices": choices,
            "usage": {"prompt_tokens": n_prompt, "completion_tokens": completion,
                      "total_tokens": n_prompt + completion,
                      "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
                      "completion_tokens_details": {"reasoning_tokens": reasoning, "audio_tokens": 0,
                                                    "accepted_prediction_tokens": 0,
                                                    "rejected_prediction_tokens": 0}},
            "service_tier": "default", "system_fingerprint": None,
        }

    def generate(self, spec: ModelSpec, body: Mapping[str, Any], messages: list[dict[str, Any]],
                 text: str | None = None, delivered: bool = True) -> tuple[int, dict[str, Any]]:
        """POST /v1beta/models/<model>:generateContent: (status, response body)."""
        config = body.get("generationConfig", body.get("generation_config")) or {}
        prompt = serialize(messages)
        n_prompt = prompt_tokens(prompt)
        refusal = gemini_refusal(spec, config, n_prompt)
        if refusal is not None:
            self.ledger.unbilled(spec.name, 400)
            return 400, google_error(400, refusal)
        thinking_cfg = cfg(config, "thinkingConfig") or {}
        level = str(cfg(thinking_cfg, "thinkingLevel") or spec.default_effort).lower()
        cached = self._cached(spec, prompt)
        budget = cfg(config, "maxOutputTokens") or spec.max_output_tokens or 0
        if text is None:
            text = self.reply(messages, 0.0)
        text = apply_stop(text, cfg(config, "stopSequences"))
        tbudget = cfg(thinking_cfg, "thinkingBudget")
        candidates, visible, thoughts = [], 0, 0
        for i in range(int(cfg(config, "candidateCount") or 1)):
            hidden = self._hidden(spec, level, prompt, cfg(config, "seed"), i)
            if isinstance(tbudget, int) and tbudget > 0:
                hidden = min(hidden, tbudget)
            out, used, spent, cut = self._choice(spec, text, budget, hidden)
            visible, thoughts = visible + used - spent, thoughts + spent
            parts = [{"text": out}] if not cut else []
            if parts and cfg(thinking_cfg, "includeThoughts"):
                parts.insert(0, {"text": "**Working it out**\n\nI weighed the request and settled on a "
                                         "short answer.", "thought": True})
            content: dict[str, Any] = {"role": "model", "parts": parts} if parts else {"role": "model"}
            candidates.append({"content": content, "finishReason": "MAX_TOKENS" if cut else "STOP", "index": i})
        usd = spec.usd(n_prompt, cached, visible + thoughts)
        self.ledger.bill(spec.name, prompt=n_prompt, cached=cached, completion=visible + thoughts, reasoning=thoughts,
                         empty=any("parts" not in c["content"] or not text for c in candidates),
                         cut=any(c["finishReason"] == "MAX_TOKENS" for c in candidates), usd=usd,
                         delivered=delivered)
        usage: dict[str, Any] = {"promptTokenCount": n_prompt, "candidatesTokenCount": visible,
                                 "thoughtsTokenCount": thoughts,
                                 "totalTokenCount": n_prompt + visible + thoughts,
                                 "promptTokensDetails": [{"modality": "TEXT", "tokenCount": n_prompt}]}
        if cached:
            usage["cachedContentTokenCount"] = cached
        return 200, {"candidates": candidates, "usageMetadata": usage, "modelVersion": spec.snapshot or spec.name,
                     "responseId": hashlib.sha1(f"{time.time_ns()}:{prompt}".encode()).hexdigest()[:22]}

    def embed(self, spec: ModelSpec, body: Mapping[str, Any], messages: Any = None, text: str | None = None,
              delivered: bool = True) -> tuple[int, dict[str, Any]]:
        """POST /v1/embeddings: (status, response body) (`messages` and `text` are ignored: the
        chat handlers' signature)."""
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
        self.ledger.bill(spec.name, prompt=n, usd=spec.usd(n, 0, 0), delivered=delivered)
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
