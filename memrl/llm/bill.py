"""What a provider's reply means for the call that got it: the bill over its tries (every
reply the provider sent was paid for, usable or not; memrl.llm.accounting counts them), stop
sequences the provider dropped, applied here, the error of a budget that ran out, and the
most a try whose reply the client never read could have cost (`unseen_bound`).

Unseen tries (memrl.llm.retry `unseen_kind`: a cut body, a timeout after the request was
sent, a gateway's 504) may or may not have been billed, and no reply says for how much. They
are not in the spend's `usd`; the spend counts them (`unseen_tries`) with a bound on what
they can have cost together (`unseen_bound_usd`): each at most its prompt, counted as one
token per UTF-8 byte of its text plus 16 per message and 16 more (no tokenizer makes more
tokens than bytes, and the framing of a chat message is a few tokens), at the input rate
of the tier that size falls in, plus its whole completion budget at the output rate. A try
whose prompt holds an image, or whose model has no price, has no bound: it is counted in
`unseen_unbounded`. So the run paid at least `usd` and at most `usd + unseen_bound_usd`
(when `unseen_unbounded` is 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from memrl.llm.base import BudgetExhaustedError, LLMRequest, LLMResponse, content_text, has_images
from memrl.llm.profile import ModelProfile


def apply_stop(text: str, stop: Sequence[str]) -> str:
    """The text up to the first of the stop sequences (as a provider that takes them cuts it)."""
    cut = len(text)
    for s in stop:
        if s:
            i = text.find(s)
            if i >= 0:
                cut = min(cut, i)
    return text[:cut]


USAGE = ("prompt_tokens", "completion_tokens", "reasoning_tokens", "cached_prompt_tokens")


class Bill:
    """What the provider charged for the tries of one call (memrl.llm.accounting, "Billing")."""

    def __init__(self) -> None:
        self.attempts = 0
        self.usage = dict.fromkeys(USAGE, 0)
        self.cost = 0.0
        self.priced = True
        self.finish = ""  # the last try's finish reason

    def add(self, resp: LLMResponse) -> None:
        self.attempts += 1
        self.finish = resp.finish_reason
        for name in USAGE:
            self.usage[name] += int(getattr(resp, name))
        self.cost += resp.cost_usd
        self.priced = self.priced and resp.priced

    def onto(self, resp: LLMResponse) -> LLMResponse:
        """`resp` carrying the whole bill (its own try included)."""
        for name in USAGE:
            setattr(resp, name, self.usage[name])
        resp.cost_usd, resp.priced, resp.attempts = self.cost, self.priced, self.attempts
        return resp

    def as_response(self, model: str) -> LLMResponse:
        return self.onto(LLMResponse(text="", model=model, finish_reason=self.finish))


def exhausted(request: LLMRequest, resp: LLMResponse, p: ModelProfile, model_id: str,
              section: str = "llm") -> BudgetExhaustedError:
    """The error of a budget that ran out before the model wrote any text: the call's purpose,
    its budget (the answer's part and the headroom), the reasoning tokens spent, what to raise."""
    answer = request.answer_tokens if request.answer_tokens is not None else request.max_tokens
    headroom = request.max_tokens - answer
    what = f"{request.purpose or 'a'} call"
    spent = (f"{resp.reasoning_tokens} of its {resp.completion_tokens} completion tokens on "
             "reasoning" if resp.reasoning_tokens else f"{resp.completion_tokens} completion tokens")
    parts = f"{answer} for the answer + {headroom} reasoning headroom" if p.reasoning else \
        f"{answer} for the answer"
    fixes = [request.budget_key or "the call's max_tokens"]
    if p.reasoning:
        fixes += [f"{section}.reasoning_headroom"]
    fix = " or ".join(fixes) + (f" (or lower {section}.reasoning_effort)" if p.reasoning else "")
    return BudgetExhaustedError(
        f"{model_id}: the {what}'s completion budget ran out before the model "
        f"wrote any text: {request.max_tokens} tokens ({parts}), {spent} (finish_reason "
        f"length); raise {fix}")


# --------------------------------------------------------------------------- unseen tries
FRAMING_TOKENS = 16  # per message, and once per request


def prompt_bound(texts: Sequence[str], messages: int) -> int:
    """At least as many tokens as any provider counts for these texts (module doc)."""
    return sum(len(t.encode("utf-8", "surrogatepass")) for t in texts) + FRAMING_TOKENS * (messages + 1)


def unseen_bound(request: LLMRequest, p: ModelProfile) -> float | None:
    """The most a try of `request` whose reply was never read can have cost (module doc);
    None when it has no bound (an image in the prompt, an unpriced model)."""
    if p.free:
        return 0.0
    if p.prices is None or has_images(request.messages):
        return None
    prompt = prompt_bound([content_text(c) for _, c in request.messages], len(request.messages))
    return p.prices.cost(prompt, int(request.max_tokens), 0)


# --------------------------------------------------------------------------- spend
@dataclass(frozen=True)
class Spend:
    """What was paid: USD and tokens, and how many paid calls had no known price (their
    USD is unknown: `usd` is then a lower bound, never the whole spend); the tries whose reply
    was never read, with the most they can have cost (module doc; not in `usd`)."""

    usd: float = 0.0
    tokens: int = 0
    unpriced_calls: int = 0
    unseen_tries: int = 0
    unseen_bound_usd: float = 0.0
    unseen_unbounded: int = 0

    def __add__(self, other: "Spend") -> "Spend":
        return Spend(self.usd + other.usd, self.tokens + other.tokens,
                     self.unpriced_calls + other.unpriced_calls, self.unseen_tries + other.unseen_tries,
                     self.unseen_bound_usd + other.unseen_bound_usd, self.unseen_unbounded + other.unseen_unbounded)

    def __sub__(self, other: "Spend") -> "Spend":
        return Spend(self.usd - other.usd, self.tokens - other.tokens,
                     self.unpriced_calls - other.unpriced_calls, self.unseen_tries - other.unseen_tries,
                     self.unseen_bound_usd - other.unseen_bound_usd, self.unseen_unbounded - other.unseen_unbounded)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"usd": round(self.usd, 6), "tokens": int(self.tokens)}
        if self.unpriced_calls:
            out["unpriced_calls"] = int(self.unpriced_calls)
        if self.unseen_tries:
            out.update(unseen_tries=int(self.unseen_tries), unseen_bound_usd=round(self.unseen_bound_usd, 6))
            if self.unseen_unbounded:
                out["unseen_unbounded"] = int(self.unseen_unbounded)
        return out


def spend_of_totals(totals: Mapping[str, Any]) -> Spend:
    """Spend in an LLM client's `totals()` (or a run card's `llm` section)."""
    return Spend(usd=float(totals.get("cost_usd", 0.0) or 0.0),
                 tokens=int(totals.get("prompt_tokens", 0) or 0) + int(totals.get("completion_tokens", 0) or 0),
                 unpriced_calls=int(totals.get("unpriced_calls", 0) or 0),
                 unseen_tries=int(totals.get("unseen_tries", 0) or 0),
                 unseen_bound_usd=float(totals.get("unseen_bound_usd", 0.0) or 0.0),
                 unseen_unbounded=int(totals.get("unseen_unbounded", 0) or 0))


def clients_spend(clients: Iterable[Any]) -> Spend:
    """What these LLM clients spent in this process (each client once)."""
    total, seen = Spend(), set()
    for c in clients:
        if c is None or id(c) in seen:
            continue
        seen.add(id(c))
        total = total + spend_of_totals(c.totals())
    return total


def sessions_spend(sessions: Iterable[Mapping[str, Any]]) -> Spend:
    """What the recorded sessions of a run spent."""
    total = Spend()
    for s in sessions:
        if isinstance(s.get("spend"), Mapping):
            sp = s["spend"]
            total = total + Spend(float(sp.get("usd", 0.0)), int(sp.get("tokens", 0)),
                                  int(sp.get("unpriced_calls", 0)), int(sp.get("unseen_tries", 0)),
                                  float(sp.get("unseen_bound_usd", 0.0)), int(sp.get("unseen_unbounded", 0)))
        elif isinstance(s.get("llm"), Mapping):
            total = total + spend_of_totals(s["llm"])
    return total
