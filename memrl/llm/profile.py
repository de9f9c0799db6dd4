"""What a model is, as the provider serves it: does it reason, which sampling settings reach
it, how much it may write, what a token costs. One home for these facts, and for the one
rule that sizes a call's completion budget.

Where the facts come from (`litellm_profile`): the `llm` section first (`reasoning`,
`reasoning_effort`, `max_output_tokens`, `price_per_mtok_in|cached_in|out`), then for prices
the project's own list (memrl.llm.price_list: models litellm cannot price, every price tier),
else litellm's own model list (`get_model_info`: `supports_reasoning`, `max_output_tokens`,
the prices) and litellm's transformation of a request for that model (`get_optional_params`:
which of `stop`, `top_p` and `temperature` it actually sends). The embedded and scripted
backends are plain models that take every setting and cost nothing.

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
card would name a setting the model never saw. When litellm cannot say what it sends (a
model whose provider it does not know) the guard cannot apply: the profile says so and why
(`guard_off`, in `describe()` as `settings_guard`, which the run card records), and the
client then cuts replies at the stop sequences itself too. Only what litellm raises for
such a model is caught; any other error of litellm propagates.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
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
LITELLM_PRICES = "litellm's price list"


@dataclass(frozen=True)
class Prices:
    """USD per token; `cached_in` for prompt tokens the provider served from its cache.
    `above`: (n, the prices of a call whose prompt has more than n tokens), for a provider
    that bills long prompts at other rates (Gemini 3 Pro above 200k: memrl.llm.price_list)."""

    prompt: float
    completion: float
    cached_prompt: float | None = None
    source: str = ""
    above: tuple[int, "Prices"] | None = None

    def for_prompt(self, prompt_tokens: float) -> "Prices":
        """The prices a call with this many prompt tokens is billed at."""
        if self.above is not None and prompt_tokens > self.above[0]:
            return self.above[1].for_prompt(prompt_tokens)
        return self

    def cost(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0,
             calls: float = 1) -> float:
        """USD of `calls` calls with these totals; the tier is the one of their mean prompt
        (one call: its own prompt)."""
        p = self.for_prompt(int(prompt_tokens) / max(calls, 1e-9))
        cached = min(max(0, int(cached_tokens)), int(prompt_tokens))
        rate = p.prompt if p.cached_prompt is None else p.cached_prompt
        return ((int(prompt_tokens) - cached) * p.prompt + cached * rate
                + int(completion_tokens) * p.completion)

    def per_mtok(self) -> dict[str, Any]:
        """The rates in USD per million tokens (the run card's and `memrl check`'s form)."""
        out: dict[str, Any] = {"per_mtok_in": round(self.prompt * 1e6, 6),
                               "per_mtok_cached_in": None if self.cached_prompt is None
                               else round(self.cached_prompt * 1e6, 6),
                               "per_mtok_out": round(self.completion * 1e6, 6)}
        if self.above is not None:
            out[f"prompts_over_{self.above[0]}_tokens"] = self.above[1].per_mtok()
        return out


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
    # why litellm could not say which settings reach the model (None: it could); then
    # `conflicts` knows none and the client applies stop sequences itself as well
    guard_off: str | None = None

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
        out["stop"] = "client" if not self.honors_stop else "provider and client" if self.client_stops \
            else "provider"
        if self.free:
            out["prices"] = "free (runs here)"
        elif self.prices is None:
            out["prices"] = "unpriced"
        else:
            out["prices"] = {**self.prices.per_mtok(), "source": self.prices.source}
        out["settings_guard"] = "applied" if self.guard_off is None else self.guard_off
        if self.notes:
            out["notes"] = list(self.notes)
        return out

    @property
    def client_stops(self) -> bool:
        """Whether the client cuts replies at the stop sequences itself: the provider drops
        them, or litellm could not say whether it does (`guard_off`)."""
        return not self.honors_stop or self.guard_off is not None


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


def _litellm_facts(litellm: Any, model: str) -> tuple[str, dict[str, Any], list[str]]:
    """(provider, model info, notes) from litellm: the provider its routing names (empty when
    it names none), its model list's entry ({} when the list lacks the model) and a note for
    each fact litellm could not give. Only what litellm raises for a model it does not know
    is caught (`BadRequestError` from its routing, `ModelNotMappedError` from its list);
    anything else is a fault and propagates."""
    from litellm.exceptions import BadRequestError, ModelNotMappedError

    notes: list[str] = []
    try:
        _, provider, _, _ = litellm.get_llm_provider(model)
    except BadRequestError as exc:
        provider = ""
        notes.append(f"litellm names no provider for {model!r} ({_first_line(exc)})")
    try:
        info = dict(litellm.get_model_info(model))
    except ModelNotMappedError:
        info = {}
        notes.append(f"litellm's model list does not know {model!r}: whether it reasons, its output "
                     "limit and its prices come from the llm config alone")
    return str(provider or ""), info, notes


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 160 else text[:160] + "..."


def _sent_params(model: str, provider: str, **params: Any) -> tuple[dict[str, Any] | None, str | None]:
    """(what litellm's transformation for this model sends of `params`, None), or (None, why
    it cannot say). It cannot for a model whose provider litellm does not know: its routing
    names none, or one outside its providers (its transformation would then pass every
    setting through, a guess rather than what the provider is sent). Only what litellm raises
    for such a model (`BadRequestError`, `UnsupportedParamsError`) is caught; anything else
    propagates, so the guard never turns itself off in silence."""
    from litellm.exceptions import BadRequestError, UnsupportedParamsError
    from litellm.types.utils import LlmProviders
    from litellm.utils import get_optional_params

    if not provider:
        return None, f"litellm names no provider for {model!r}"
    if provider not in {p.value for p in LlmProviders}:
        return None, f"litellm does not know the provider {provider!r} of {model!r}"
    name = model.split("/", 1)[1] if model.startswith(provider + "/") else model
    try:
        return dict(get_optional_params(model=name, custom_llm_provider=provider,
                                        drop_params=True, **params)), None
    except (BadRequestError, UnsupportedParamsError) as exc:
        return None, f"litellm could not map the settings of {model!r}: {type(exc).__name__}: {_first_line(exc)}"


def _listed_prices(model: str) -> Prices | None:
    """The project's own prices for the model (memrl.llm.price_list), every tier, or None."""
    from memrl.llm.price_list import table_for

    table = table_for(model)
    if table is None:
        return None
    prices: Prices | None = None  # built from the last tier down: each names the one above it
    for tier in reversed(table.tiers):
        tier_prices = Prices(prompt=tier.input / 1e6, completion=tier.output / 1e6,
                             cached_prompt=tier.cached_input / 1e6, source=table.source)
        if prices is not None and tier.up_to is not None:
            tier_prices = replace(tier_prices, above=(tier.up_to, prices))
        prices = tier_prices
    return prices


GUARD_OFF = ("settings guard off: {why}; temperature and top_p are sent as configured without "
             "knowing whether they reach the model, and stop sequences are also applied by the client")


def litellm_profile(cfg: Mapping[str, Any]) -> ModelProfile:
    """The profile of a litellm model from the config and litellm's knowledge (module doc)."""
    from memrl.llm.litellm_import import import_litellm

    model = str(cfg.get("model") or "")
    litellm = import_litellm()
    provider, info, notes = _litellm_facts(litellm, model)
    reasoning = cfg.get("reasoning")
    if reasoning is None:
        reasoning = bool(info.get("supports_reasoning"))
        if reasoning:
            notes.append("reasoning model (litellm's model list)")
    effort = cfg.get("reasoning_effort")
    max_out = cfg.get("max_output_tokens") or info.get("max_output_tokens") or None
    prices = _configured_prices(cfg) or _listed_prices(model)
    if prices is None:
        p_in = float(info.get("input_cost_per_token") or 0.0)
        p_out = float(info.get("output_cost_per_token") or 0.0)
        if p_in > 0 or p_out > 0:
            cached = info.get("cache_read_input_token_cost")
            prices = Prices(prompt=p_in, completion=p_out,
                            cached_prompt=None if cached is None else float(cached),
                            source=LITELLM_PRICES)
    sent, why = _sent_params(model, provider, temperature=0.0, top_p=0.5, stop=["\n"], max_tokens=8)
    honors_stop = takes_top_p = True
    fixed_temperature = None
    if sent is not None:
        honors_stop = "stop" in sent or "stop_sequences" in sent
        takes_top_p = "top_p" in sent
        if "temperature" not in sent:
            one, why = _sent_params(model, provider, temperature=1.0, max_tokens=8)
            fixed_temperature = 1.0 if one is not None and "temperature" in one else None
    guard_off = None if why is None else GUARD_OFF.format(why=why)
    return ModelProfile(model=model, provider=provider, reasoning=bool(reasoning),
                        effort=None if effort is None else str(effort),
                        default_effort=DEFAULT_EFFORT.get(provider, FALLBACK_EFFORT),
                        headroom_tokens=cfg.get("reasoning_headroom"),
                        max_output_tokens=None if max_out is None else int(max_out),
                        honors_stop=honors_stop, takes_top_p=takes_top_p,
                        fixed_temperature=fixed_temperature, prices=prices, notes=tuple(notes),
                        guard_off=guard_off)
