"""Prices the project states itself, for hosted models litellm 1.106.12 cannot price: the one
home of these numbers. The client reads them (memrl.llm.profile, when the llm config gives no
`price_per_mtok_*`) and so does the provider emulation (memrl.testing.provider), so a run
against the emulation checks the client's arithmetic, not a copy of the same typed numbers.

A price is a list of tiers by the size of the call's prompt: each tier's rates apply to the
whole call (input, cached input and output) when its prompt has at most `up_to` tokens (the
last tier: no bound). Rates are USD per million tokens; reasoning / thinking tokens are billed
as output.

Gemini 3 Pro Preview (`gemini-3-pro-preview`, Gemini API, paid tier, standard): Google's
published table (ai.google.dev/gemini-api/docs/pricing): input $2.00 for prompts up to 200k
tokens, $4.00 above; output, thinking included, $12.00 / $18.00; context caching $0.20 /
$0.40 (implicit caching has no storage charge). tests/llm/test_price_list.py pins these
against that table typed as a literal; check them against the current page before a paid run.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tier:
    """Rates (USD per million tokens) for a call whose prompt has at most `up_to` tokens
    (None: any size)."""

    up_to: int | None
    input: float
    cached_input: float
    output: float


@dataclass(frozen=True)
class PriceTable:
    tiers: tuple[Tier, ...]
    source: str

    def tier(self, prompt_tokens: int) -> Tier:
        """The tier whose rates a call with this many prompt tokens is billed at."""
        for t in self.tiers:
            if t.up_to is None or prompt_tokens <= t.up_to:
                return t
        return self.tiers[-1]


GEMINI_PRICING_PAGE = "ai.google.dev/gemini-api/docs/pricing"

PRICE_LIST: dict[str, PriceTable] = {
    "gemini-3-pro-preview": PriceTable(
        tiers=(Tier(200_000, 2.00, 0.20, 12.00), Tier(None, 4.00, 0.40, 18.00)),
        source=f"memrl price list (Google's published preview prices, {GEMINI_PRICING_PAGE})"),
}


def table_for(model: str) -> PriceTable | None:
    """The project's price table for a model name, with or without litellm's provider prefix
    (`gemini/gemini-3-pro-preview`) or Google's `models/` prefix; None when it has none."""
    name = model.removeprefix("models/")
    if "/" in name:
        name = name.split("/", 1)[1]
    return PRICE_LIST.get(name)
