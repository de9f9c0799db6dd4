"""Types of the LLM seam: a request, a response, a backend, and a per-episode handle."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class LLMRequest:
    """Everything that can change a model's answer (the cache key is built from all of it)."""

    messages: tuple[tuple[str, str], ...]  # (role, content) pairs
    max_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    # Identity of the sample (run seed / epoch / task / purpose / call index). Part of the
    # cache key when temperature > 0, so distinct samples stay distinct and replay exactly.
    sample_id: str = ""
    seed: int | None = None


@dataclass
class LLMResponse:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cached: bool = False
    model: str = ""


class Backend(Protocol):
    """A model that answers one request (no caching, no retries: the client adds those)."""

    model_id: str  # stable name used in cache keys and run cards

    def generate(self, request: LLMRequest) -> LLMResponse: ...


class LLMError(RuntimeError):
    """A model call that still failed after the configured retries."""


@dataclass
class UsageMeter:
    """Counts one episode's (or one writer's) model use."""

    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    errors: list[str] = field(default_factory=list)

    def add(self, resp: LLMResponse) -> None:
        self.calls += 1
        self.cache_hits += int(resp.cached)
        self.prompt_tokens += resp.prompt_tokens
        self.completion_tokens += resp.completion_tokens
        self.cost_usd += resp.cost_usd

    def tokens(self) -> dict[str, int]:
        return {"prompt": self.prompt_tokens, "completion": self.completion_tokens}
