"""Types of the LLM seam: a request, a response, a backend, and a per-episode handle.

A message's content is either a plain string (text only, as every text benchmark sends it)
or a tuple of parts, `TextPart` and `ImagePart`, for models that take images. Plain strings
stay plain strings all the way to the cache key, so text-only requests keep their keys.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, Union

_IMAGE_URL_PREFIXES = ("data:image/", "http://", "https://")


@dataclass(frozen=True)
class TextPart:
    """A piece of text inside a multi-part message."""

    text: str


@dataclass(frozen=True)
class ImagePart:
    """An image inside a multi-part message: a data URL (`data:image/png;base64,...`) or an
    http(s) URL the provider fetches itself."""

    url: str

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url.startswith(_IMAGE_URL_PREFIXES):
            shown = self.url[:40] if isinstance(self.url, str) else type(self.url).__name__
            raise ValueError(f"an image part needs a data:image/... or http(s) URL, got {shown!r}")


Part = Union[TextPart, ImagePart]
Content = Union[str, tuple[Part, ...]]


def as_part(obj: Any) -> Part:
    """A `TextPart`/`ImagePart` from itself or from an OpenAI-style dict
    (`{"type": "text", "text": ...}`, `{"type": "image_url", "image_url": {"url": ...}}`)."""
    if isinstance(obj, (TextPart, ImagePart)):
        return obj
    if isinstance(obj, Mapping):
        kind = obj.get("type")
        if kind == "text" and isinstance(obj.get("text"), str):
            return TextPart(obj["text"])
        if kind == "image_url":
            ref = obj.get("image_url")
            url = ref.get("url") if isinstance(ref, Mapping) else ref
            return ImagePart(str(url))
    raise TypeError(f"not a message part (text or image_url): {str(obj)[:80]!r}")


def as_content(obj: Any) -> Content:
    """Normalise message content: a string stays a string; a list/tuple becomes a tuple of
    parts. Anything else is stringified (the behaviour text-only callers always had)."""
    if isinstance(obj, str):
        return obj
    if isinstance(obj, (list, tuple)):
        return tuple(as_part(p) for p in obj)
    return str(obj)


def content_text(content: Content) -> str:
    """The text of a message: the string itself, or its text parts joined by newlines."""
    if isinstance(content, str):
        return content
    return "\n".join(p.text for p in content if isinstance(p, TextPart))


def content_images(content: Content) -> list[ImagePart]:
    return [] if isinstance(content, str) else [p for p in content if isinstance(p, ImagePart)]


def has_images(messages: Iterable[tuple[str, Content]]) -> bool:
    """True when any message carries an image part."""
    return any(content_images(content) for _, content in messages)


def openai_content(content: Content) -> str | list[dict[str, Any]]:
    """Content in the chat-completions wire format (a string stays a string)."""
    if isinstance(content, str):
        return content
    out: list[dict[str, Any]] = []
    for p in content:
        if isinstance(p, TextPart):
            out.append({"type": "text", "text": p.text})
        else:
            out.append({"type": "image_url", "image_url": {"url": p.url}})
    return out


@dataclass(frozen=True)
class LLMRequest:
    """Everything that can change a model's answer (the cache key is built from all of it)."""

    messages: tuple[tuple[str, Content], ...]  # (role, content) pairs
    max_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    # Identity of the sample (run seed / epoch / task / purpose / call index). Part of the
    # cache key when temperature > 0, so distinct samples stay distinct and replay exactly.
    sample_id: str = ""
    seed: int | None = None
    # "json": ask the provider for a JSON object (JSON mode) where it offers one. None (the
    # default) leaves the request, and its cache key, exactly as before this field existed.
    response_format: str | None = None
    # What the call is for, never part of the cache key (memrl.llm.response_cache picks the keyed
    # fields): its purpose ("act", "write-script", ...), the tokens the caller asked for its
    # answer (`max_tokens` is the budget sent, reasoning headroom included: memrl.llm.profile)
    # and the config key that sets them, which an error names as the fix.
    purpose: str = ""
    answer_tokens: int | None = None
    budget_key: str = ""


@dataclass
class LLMResponse:
    """One answer. Tokens and cost are what the provider billed for it, every try the client
    made for this answer included (an empty reply that was retried was paid for too), so an
    episode's meter, the run's spend and the plan count every paid token; `attempts` says how
    many tries were billed. `completion_tokens` includes `reasoning_tokens` (hidden reasoning
    is billed as output); `cached_prompt_tokens` are the prompt tokens the provider served
    from its own prompt cache (billed at its cached rate). `priced` is False when neither
    litellm nor the config knows the model's price: its `cost_usd` is then unknown, not 0."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cached: bool = False  # served from the response cache (no call made now)
    model: str = ""
    key: str = ""  # the request's cache key (memrl.llm.response_cache.request_key), set by the client
    reasoning_tokens: int = 0
    cached_prompt_tokens: int = 0
    finish_reason: str = ""  # the provider's: stop, length, ... ("" when it does not say)
    priced: bool = True
    attempts: int = 1
    stop_applied: bool = False  # the client cut the reply at a stop the provider does not take


class Backend(Protocol):
    """A model that answers one request (no caching, no retries: the client adds those).

    A backend that takes images says so with a true `supports_images` attribute; the client
    refuses image content for any backend that does not, before any call.
    """

    model_id: str  # stable name used in cache keys and run cards

    def generate(self, request: LLMRequest) -> LLMResponse: ...


class LLMError(RuntimeError):
    """A model call that still failed after the configured retries. `billed` is what the
    provider charged for the failed call's tries (replies that came back unusable)."""

    billed: "LLMResponse | None" = None


class BudgetExhaustedError(LLMError):
    """The completion budget ran out before the model wrote any text (a reasoning model spent
    it all on reasoning): a configuration error, named on its first occurrence and never
    retried with the same budget. The message names the call's purpose, its budget, the
    reasoning tokens spent and the key to raise."""


class MissingKeyError(RuntimeError):
    """The environment variable that should hold the model's API key is not set."""


class UnsupportedContentError(LLMError):
    """The request holds content (an image) the model cannot take; raised before any call."""


@dataclass
class UsageMeter:
    """Counts one episode's (or one writer's) model use, and lists its calls in order:
    `model_calls` = [{"purpose", "key"}] (plus `"failed": true` for a call that failed), the
    key being the request's cache key, under which the response cache keeps the prompt and
    the answer (memrl.llm.response_cache)."""

    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    errors: list[str] = field(default_factory=list)
    model_calls: list[dict[str, Any]] = field(default_factory=list)

    reasoning_tokens: int = 0
    cached_prompt_tokens: int = 0
    unpriced_calls: int = 0

    def _usage(self, resp: LLMResponse) -> None:
        self.prompt_tokens += resp.prompt_tokens
        self.completion_tokens += resp.completion_tokens
        self.reasoning_tokens += resp.reasoning_tokens
        self.cached_prompt_tokens += resp.cached_prompt_tokens
        self.cost_usd += resp.cost_usd
        self.unpriced_calls += int(not resp.priced)

    def add(self, resp: LLMResponse, purpose: str = "") -> None:
        self.calls += 1
        self.cache_hits += int(resp.cached)
        self._usage(resp)
        self.model_calls.append({"purpose": purpose, "key": resp.key, **call_notes(resp)})

    def add_failure(self, purpose: str, key: str, error: str, billed: LLMResponse | None = None) -> None:
        self.errors.append(f"{purpose}: {error}")
        entry: dict[str, Any] = {"purpose": purpose, "key": key, "failed": True}
        if billed is not None and billed.attempts:
            self._usage(billed)
            entry.update(call_notes(billed))
        self.model_calls.append(entry)

    def tokens(self) -> dict[str, int]:
        out = {"prompt": self.prompt_tokens, "completion": self.completion_tokens}
        if self.reasoning_tokens:
            out["reasoning"] = self.reasoning_tokens
        if self.cached_prompt_tokens:
            out["cached_prompt"] = self.cached_prompt_tokens
        return out


def call_notes(resp: LLMResponse) -> dict[str, Any]:
    """What an episode record's `model_calls` entry says of a call beyond purpose and key:
    only what is not the usual (a cut reply, a client-side stop, retries billed, an unpriced
    model, reasoning spent), so the records of plain models read as before."""
    out: dict[str, Any] = {}
    if resp.finish_reason and resp.finish_reason != "stop":
        out["finish"] = resp.finish_reason
    if resp.reasoning_tokens:
        out["reasoning"] = resp.reasoning_tokens
    if resp.stop_applied:
        out["stop"] = "client"
    if resp.attempts > 1:
        out["attempts"] = resp.attempts
    if not resp.priced:
        out["unpriced"] = True
    return out


@dataclass(frozen=True)
class ModelProbe:
    """One kind of call a run will make, as the preflight sends it (memrl.control.preflight): the
    model client's config key (`role`: "llm", "env.judge"), the call's purpose, a prompt like
    the run's, the tokens its answer gets (`answer_tokens`, before the reasoning headroom of
    memrl.llm.profile), the key that sets them, and the call's stop / temperature / format."""

    role: str
    purpose: str
    prompt: Any  # a string (one user message) or [(role, content), ...]
    answer_tokens: int | None
    budget_key: str
    stop: tuple[str, ...] = ()
    temperature: float | None = None
    response_format: str | None = None
