"""What a model is, as the provider serves it: does it reason, which sampling settings reach
it, how much it may write, what a token costs. One home for these facts, and for the one
rule that sizes a call's completion budget.

Where the facts come from (`profile_for`): the `llm` section first (`reasoning`,
`reasoning_effort`, `max_output_tokens`, `price_per_mtok_in|cached_in|out`), else litellm's
own model list (`get_model_info`: `supports_reasoning`, `max_output_tokens`, the prices) and
litellm's transformation of a request for that model (`get_optional_params`: which of
`stop`, `top_p` and `temperature` it actually sends). The embedded and scripted backends
are plain models that take every setting and cost nothing.

**The budget rule** (`ModelProfile.budget`). Every caller names the tokens its *answer*
needs (ALFWorld's action `env.max_tokens`, the memory writer's `memory.writer.max_tokens`,
HLE's judge, MemP's script and keywords, Self-RAG's 4-token verdict). A reasoning model
spends hidden reasoning tokens from the same completion budget before it writes the answer
(OpenAI: `max_completion_tokens` counts reasoning; Gemini: `maxOutputTokens` counts
thinking), and a budget that runs out during reasoning returns no text at all. So on a
reasoning model every call is sent with

    budget = min(answer tokens + headroom, the model's max output tokens)

where headroom is `llm.reasoning_headroom` when set, else `REASONING_HEADROOM` for the
effort in use (`llm.reasoning_effort`, else the provider's default: medium for OpenAI,
high for Gemini 3). A plain model gets the answer's tokens unchanged (and its requests keep
their cache keys). The official presets set `reasoning_headroom: 0`: the official code's
budgets (4,096 / 10,240 / 12,800 / 65,536) are totals that already include reasoning.

Settings a provider does not take are never sent as if they were: a `stop` litellm drops is
applied by the client to the reply (`honors_stop` false; the call is recorded with
`stop: client`); a `top_p` or `temperature` other than the one the model takes is a
configuration error (`conflicts`), since litellm would drop it without a word and the run
card would name a setting the model never saw.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Mapping

log = logging.getLogger(__name__)

EFFORTS = ("minimal", "low", "medium", "high")
# Headroom for hidden reasoning, in tokens, by effort. A cap, not a spend: only the tokens
# the model uses are billed; but providers count a request's cap against a tokens-per-minute
# limit, so it is not unbounded either. OpenAI's reasoning guide advises reserving about
# 25,000 tokens for reasoning and output when starting out; the calls here are short
# (one action, a short plan), and medium effort spends hundreds to a few thousand tokens on
# them, so 8,192 at medium leaves room of about 3x.
REASONING_HEADROOM: dict[str, int] = {"minimal": 1024, "low": 4096, "medium": 8192, "high": 32768}
# The effort a provider applies when the request names none (the documented defaults)
DEFAULT_EFFORT: dict[str, str] = {"openai": "medium", "azure": "medium", "gemini": "high",
                                  "vertex_ai": "high"}
FALLBACK_EFFORT = "medium"


@dataclass(frozen=True)
class Prices:
    """USD per token; `cached_in` for prompt tokens the provider served from its cache."""

    prompt: float
    completion: float
    cached_prompt: float | None = None
    source: str = ""

    def cost(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> float:
        cached = min(max(0, int(cached_tokens)), int(prompt_tokens))
        rate = self.prompt if self.cached_prompt is None else self.cached_prompt
        return ((int(prompt_tokens) - cached) * self.prompt + cached * rate
                + int(completion_tokens) * self.completion)


@dataclass(frozen=True)
class ModelProfile:
    """One model as the run drives it (module doc)."""

    model: str
    provider: str = ""
    reasoning: bool = False
    effort: str | None = None          # configured reasoning effort (sent); None = provider's
    default_effort: str | None = None  # the provider's own when none is sent
    headroom_tokens: int | None = None  # llm.reasoning_headroom (None = by effort)
    max_output_tokens: int | None = None
    honors_stop: bool = True
    takes_top_p: bool = True
    fixed_temperature: float | None = None  # the only temperature the model takes
    prices: Prices | None = None       # None: unpriced (litellm has no price, none configured)
    free: bool = False                 # runs here (embedded / scripted): costs nothing
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def effective_effort(self) -> str | None:
        if not self.reasoning:
            return None
        return self.effort or self.default_effort or FALLBACK_EFFORT

    @property
    def headroom(self) -> int:
        """Tokens added to every call's answer budget (0 on a plain model)."""
        if not self.reasoning:
            return 0
        if self.headroom_tokens is not None:
            return int(self.headroom_tokens)
        return REASONING_HEADROOM[self.effective_effort or FALLBACK_EFFORT]

    @property
    def priced(self) -> bool:
        return self.free or self.prices is not None

    def budget(self, answer_tokens: int) -> int:
        """The completion budget a call is sent with (the module's rule)."""
        total = int(answer_tokens) + self.headroom
        if self.reasoning and self.max_output_tokens:
            total = min(total, int(self.max_output_tokens))
        return max(1, total)

    def conflicts(self, temperature: float | None, top_p: float | None) -> list[str]:
        """Settings the model would never see, as `key: why` (empty when none)."""
        out = []
        if (temperature is not None and self.fixed_temperature is not None
                and abs(float(temperature) - self.fixed_temperature) > 1e-9):
            out.append(f"temperature: {self.model} takes only temperature {self.fixed_temperature:g} "
                       f"(litellm drops {float(temperature):g} without a word, so the card would name "
                       f"a temperature the model never used); set it to {self.fixed_temperature:g}")
        if top_p is not None and not self.takes_top_p and abs(float(top_p) - 1.0) > 1e-9:
            out.append(f"top_p: {self.model} does not take top_p (litellm drops it); set it to 1.0")
        return out

    def describe(self) -> dict[str, Any]:
        """For the run card and `memrl check`."""
        out: dict[str, Any] = {"model": self.model, "reasoning": self.reasoning}
        if self.reasoning:
            out.update(effort=self.effective_effort, effort_sent=self.effort is not None,
                       headroom=self.headroom, max_output_tokens=self.max_output_tokens)
        out["stop"] = "provider" if self.honors_stop else "client"
        if self.free:
            out["prices"] = "free (runs here)"
        elif self.prices is None:
            out["prices"] = "unpriced"
        else:
            out["prices"] = {"per_mtok_in": round(self.prices.prompt * 1e6, 6),
                             "per_mtok_cached_in": None if self.prices.cached_prompt is None
                             else round(self.prices.cached_prompt * 1e6, 6),
                             "per_mtok_out": round(self.prices.completion * 1e6, 6),
                             "source": self.prices.source}
        if self.notes:
            out["notes"] = list(self.notes)
        return out


def plain_profile(model: str, *, free: bool = True, reasoning: bool = False,
                  headroom: int | None = None, effort: str | None = None,
                  max_output_tokens: int | None = None) -> ModelProfile:
    """A model that takes every setting (the embedded and scripted backends; `reasoning`
    lets a test play a reasoning model)."""
    return ModelProfile(model=model, reasoning=reasoning, effort=effort, default_effort=FALLBACK_EFFORT,
                        headroom_tokens=headroom, max_output_tokens=max_output_tokens, free=free)


def _configured_prices(cfg: Mapping[str, Any]) -> Prices | None:
    p_in, p_out = cfg.get("price_per_mtok_in"), cfg.get("price_per_mtok_out")
    if p_in is None and p_out is None:
        return None
    if p_in is None or p_out is None:
        raise ValueError("price_per_mtok_in and price_per_mtok_out: give both (USD per million "
                         "tokens), or neither to use litellm's price list")
    cached = cfg.get("price_per_mtok_cached_in")
    return Prices(prompt=float(p_in) / 1e6, completion=float(p_out) / 1e6,
                  cached_prompt=None if cached is None else float(cached) / 1e6, source="llm config")


def _litellm_facts(litellm: Any, model: str) -> tuple[str, dict[str, Any]]:
    """(provider, model info) from litellm's list; ({} when it does not know the model)."""
    try:
        _, provider, _, _ = litellm.get_llm_provider(model)
    except Exception:
        provider = model.split("/", 1)[0] if "/" in model else ""
    try:
        info = dict(litellm.get_model_info(model))
    except Exception:
        info = {}
    return str(provider or ""), info


def _sent_params(model: str, provider: str, **params: Any) -> dict[str, Any] | None:
    """What litellm's transformation for this model sends of `params` (None if it cannot
    say, e.g. an unknown provider)."""
    try:
        from litellm.utils import get_optional_params

        name = model.split("/", 1)[1] if provider and model.startswith(provider + "/") else model
        return dict(get_optional_params(model=name, custom_llm_provider=provider or None,
                                        drop_params=True, **params))
    except Exception:
        return None


def litellm_profile(cfg: Mapping[str, Any]) -> ModelProfile:
    """The profile of a litellm model from the config and litellm's knowledge (module doc)."""
    from memrl.llm.litellm_import import import_litellm

    model = str(cfg.get("model") or "")
    litellm = import_litellm()
    provider, info = _litellm_facts(litellm, model)
    notes: list[str] = []
    reasoning = cfg.get("reasoning")
    if reasoning is None:
        reasoning = bool(info.get("supports_reasoning"))
        if reasoning:
            notes.append("reasoning model (litellm's model list)")
    effort = cfg.get("reasoning_effort")
    max_out = cfg.get("max_output_tokens") or info.get("max_output_tokens") or None
    prices = _configured_prices(cfg)
    if prices is None:
        p_in = float(info.get("input_cost_per_token") or 0.0)
        p_out = float(info.get("output_cost_per_token") or 0.0)
        if p_in > 0 or p_out > 0:
            cached = info.get("cache_read_input_token_cost")
            prices = Prices(prompt=p_in, completion=p_out,
                            cached_prompt=None if cached is None else float(cached),
                            source="litellm's price list")
    sent = _sent_params(model, provider, temperature=0.0, top_p=0.5, stop=["\n"], max_tokens=8)
    honors_stop = takes_top_p = True
    fixed_temperature = None
    if sent is not None:
        honors_stop = "stop" in sent or "stop_sequences" in sent
        takes_top_p = "top_p" in sent
        if "temperature" not in sent:
            one = _sent_params(model, provider, temperature=1.0, max_tokens=8) or {}
            fixed_temperature = 1.0 if "temperature" in one else None
    return ModelProfile(model=model, provider=provider, reasoning=bool(reasoning),
                        effort=None if effort is None else str(effort),
                        default_effort=DEFAULT_EFFORT.get(provider, FALLBACK_EFFORT),
                        headroom_tokens=cfg.get("reasoning_headroom"),
                        max_output_tokens=None if max_out is None else int(max_out),
                        honors_stop=honors_stop, takes_top_p=takes_top_p,
                        fixed_temperature=fixed_temperature, prices=prices, notes=tuple(notes))
