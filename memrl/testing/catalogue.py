"""The provider emulation's catalogue (memrl.testing.provider): one `ModelSpec` per hosted model
it serves, the one home of what it knows of each (kind, prices, limits, the parameters it
refuses, reasoning efforts and their hidden tokens). docs/hosted-models.md says where each
fact comes from.

Limits: `max_input_tokens` (the most prompt tokens a request may hold), `context_window` (the
most prompt + completion budget one request may ask for; None: only the input limit) and
`max_output_tokens`. Prices are USD per million tokens: OpenAI's as litellm 1.106.12 lists them
(a test checks each reply's bill against `litellm.completion_cost`), Gemini 3 Pro's from the
project's price list (memrl.llm.price_list), which the client reads too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from memrl.llm.price_list import PriceTable, table_for

KINDS = ("openai_reasoning", "openai_chat", "gemini", "embedding")
# what OpenAI's reasoning models refuse when given (its reasoning guide's list of unsupported
# parameters; temperature other than 1 and max_tokens are refused with their own messages)
REASONING_REFUSED = ("top_p", "presence_penalty", "frequency_penalty", "logprobs", "top_logprobs", "logit_bias")


@dataclass(frozen=True, eq=False)
class ModelSpec:
    """What the emulation knows of one hosted model (module doc)."""

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
    refused: tuple[str, ...] = ()              # parameters refused whenever given
    temperature_refusal: str | None = None     # "value" / "parameter": how a temperature != 1 is refused
    cache_min_tokens: int = 1024
    table: PriceTable | None = None            # tiered prices (memrl.llm.price_list) instead of the rates
    logprobs: bool = True                      # Gemini: whether responseLogprobs is enabled
    dimensions: int | None = None              # embeddings
    max_input_tokens: int | None = None
    context_window: int | None = None

    def rates(self, prompt_tokens: int) -> tuple[float, float, float]:
        """(input, cached input, output) USD per million tokens for a prompt of this size."""
        if self.table is not None:
            t = self.table.tier(prompt_tokens)
            return t.input, t.cached_input, t.output
        return (self.input_per_m, self.cached_per_m if self.cached_per_m is not None else self.input_per_m,
                self.output_per_m or 0.0)

    def usd(self, prompt_tokens: int, cached_tokens: int, completion_tokens: int) -> float:
        """What a reply costs: the uncached prompt at the input rate, the cached part at the
        cached rate, the completion (reasoning included) at the output rate."""
        inp, cached, out = self.rates(prompt_tokens)
        return ((prompt_tokens - cached_tokens) * inp + cached_tokens * cached
                + completion_tokens * out) / 1e6


def _listed(name: str) -> dict[str, Any]:
    """The price fields of a model the project's price list holds (its first tier as the
    flat rates, the table for every tier)."""
    table = table_for(name)
    assert table is not None, name
    first = table.tiers[0]
    return {"input_per_m": first.input, "cached_per_m": first.cached_input, "output_per_m": first.output,
            "table": table}


_OPENAI_EFFORT = {"minimal": (0, 64), "low": (64, 768), "medium": (192, 2560), "high": (1024, 12288)}
CATALOGUE: dict[str, ModelSpec] = {s.name: s for s in (
    ModelSpec("gpt-5-mini", "openai_reasoning", 0.25, 0.025, 2.00, 128000, "gpt-5-mini-2025-08-07",
              ("minimal", "low", "medium", "high"), "medium", _OPENAI_EFFORT,
              refused=REASONING_REFUSED + ("stop",), temperature_refusal="value",
              max_input_tokens=272_000, context_window=400_000),
    ModelSpec("o3-mini", "openai_reasoning", 1.10, 0.55, 4.40, 100000, "o3-mini-2025-01-31",
              ("low", "medium", "high"), "medium", _OPENAI_EFFORT, refused=REASONING_REFUSED,
              temperature_refusal="parameter", max_input_tokens=200_000, context_window=200_000),
    ModelSpec("gpt-4o", "openai_chat", 2.50, 1.25, 10.00, 16384, "gpt-4o-2024-08-06",
              max_input_tokens=128_000, context_window=128_000),
    ModelSpec("gpt-4o-mini", "openai_chat", 0.15, 0.075, 0.60, 16384, "gpt-4o-mini-2024-07-18",
              max_input_tokens=128_000, context_window=128_000),
    ModelSpec("gemini-3-pro-preview", kind="gemini", max_output_tokens=65536, snapshot="gemini-3-pro-preview",
              efforts=("low", "high"), default_effort="high", effort_tokens={"low": (500, 3000), "high": (4000, 16000)},
              log_uniform=False, cache_min_tokens=4096, logprobs=False, max_input_tokens=1_048_576,
              **_listed("gemini-3-pro-preview")),
    ModelSpec("text-embedding-3-large", "embedding", 0.13, snapshot="text-embedding-3-large",
              dimensions=3072, max_input_tokens=8191),
)}


def spec_for(model: Any) -> ModelSpec | None:
    """The catalogue entry for a request's model name (or its dated snapshot), else None."""
    name = str(model or "").removeprefix("models/")
    name = name.split("/", 1)[1] if name.startswith(("openai/", "gemini/")) else name
    return CATALOGUE.get(name) or next((s for s in CATALOGUE.values() if s.snapshot == name), None)
