"""What a plan's pilot will cost, before it runs, and what it cost, after (`memrl plan` asks
between the two: memrl/cli/plan.py).

Before (`quote`): the pilot plays `tasks` tasks for up to `epochs` epochs (a memory method may
need a second epoch to see injections: memrl.control.plan). No model is called: the prompts
are the env's own (`Env.model_probes`, the first task's first step as the agent asks it) and
MemRL's writer's (its probe, plus a whole trajectory), their tokens counted as characters /
`chars_per_token` (an env that lists no probe: its first task's text, one reply per turn). The
assumption, said with the figure: every episode uses all `env.max_steps` turns, each turn's
prompt the first one's plus two answers' worth of tokens per earlier turn (the reply and its
observation), each answer its full budget; one writer call per episode when memories are
model-written. That is an upper-range estimate, priced at the model's prices
(memrl.llm.profile: the config's, else litellm's list). A model that runs here (the embedded
one, a scripted one without prices) costs nothing and is not asked about.

After (`spent`): the pilot's run card, as the run recorded it: its model calls, the ones the
response cache answered, tokens and cost.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memrl.core.rundir import RunDir


@dataclass
class PilotQuote:
    tasks: int
    epochs: int
    calls: int
    prompt_tokens: int
    completion_tokens: int
    model: str
    bills: bool              # the model is paid for (a hosted or served model, or one given prices)
    cost_usd: float | None   # None: no price known (unpriced), or nothing to price
    assumption: str

    def line(self) -> str:
        if not self.bills:
            return (f"the pilot plays {self.tasks} tasks x up to {self.epochs} epochs on {self.model}, which runs "
                    "here: no charge")
        cost = f"about ${self.cost_usd:,.4f}" if self.cost_usd is not None else \
            "cost unknown (no price for the model: llm.price_per_mtok_in / _out)"
        return (f"the pilot plays {self.tasks} tasks x up to {self.epochs} epochs on {self.model}: at most "
                f"{self.calls:,} model calls, {self.prompt_tokens:,} prompt + {self.completion_tokens:,} completion "
                f"tokens, {cost} ({self.assumption}; answers already in the response cache are free)")


def _chars(prompt: Any) -> int:
    if isinstance(prompt, str):
        return len(prompt)
    return sum(len(str(c)) for _, c in prompt) if isinstance(prompt, (list, tuple)) else len(str(prompt))


def bills(llm: Any) -> bool:
    """Whether calls to this model section are paid for."""
    return llm.backend == "litellm" or llm.price_per_mtok_in is not None


def quote(v: Any, tasks: int, epochs: int, *, chars_per_token: float = 4.0) -> PilotQuote:
    """The pilot's cost before it runs (module doc); `v`: the run's validated config."""
    from memrl.control.plan import model_prices
    from memrl.control.wiring import build_client

    llm = v.llm
    model = str(llm.model or llm.name)
    uses_model = bool(getattr(v.policy, "needs_llm", True)) or (
        getattr(v.memory, "write_memories", False) and getattr(v.memory, "write_mode", "") == "llm")
    if not uses_model or not bills(llm):
        return PilotQuote(tasks, epochs, 0, 0, 0, model, False, None, "")
    env = v.env_cls(v.env, agent=v.agent.name)
    try:
        first = env.tasks()[0]
        client = build_client(llm)
        probes = [p for p in env.model_probes(first, client.episode("plan", None)) if p.role == "llm"]
    finally:
        env.close()
    if not any(p.purpose == "act" for p in probes):  # an env that lists no probe: its task, one reply a turn
        from memrl.llm.base import ModelProbe

        probes.append(ModelProbe(role="llm", purpose="act", prompt=first.intent, answer_tokens=None,
                                 budget_key="llm.max_tokens"))
    steps = int(getattr(v.env, "max_steps", 1) or 1)
    prompt = completion = calls = 0
    for p in probes:
        base = _chars(p.prompt) / chars_per_token
        answer = int(p.answer_tokens or llm.max_tokens)
        turns = steps if p.purpose == "act" else 1
        calls += turns
        prompt += sum(base + 2 * answer * t for t in range(turns))
        completion += answer * turns
    writer = getattr(v.memory, "writer", None)
    writes = getattr(v.memory, "write_mode", "") == "llm" and getattr(v.memory, "write_memories", True)
    others = ""
    if writer is not None and writes:  # MemRL's writer: its prompt with a whole trajectory
        from memrl.memory.writer import ExperienceWriter

        probe = ExperienceWriter(**writer.model_dump()).probe(first.intent)
        calls += 1
        prompt += (_chars(probe.prompt) + writer.max_trajectory_chars) / chars_per_token
        completion += writer.max_tokens
    elif getattr(v.memory, "name", "none") not in ("none", "pass_at_k", "rag"):
        others = f"; {v.memory.name}'s own model calls are not counted"
    n = tasks * epochs
    calls, prompt, completion = calls * n, round(prompt * n), round(completion * n)
    prices = model_prices(llm)
    if prices is None and llm.price_per_mtok_in is not None:
        prices = _given_prices(llm)
    cost = prices.cost(prompt, completion) if prices is not None else None
    how = (f"every episode {steps} turn{'s' if steps != 1 else ''}, each answer its full budget, "
           f"prompts from the env's first step at {chars_per_token:g} characters per token{others}")
    return PilotQuote(tasks, epochs, calls, prompt, completion, model, True, cost, how)


def _given_prices(llm: Any) -> Any:
    """The prices a model section states (a model litellm does not run, e.g. a scripted one)."""
    from memrl.llm.profile import _configured_prices

    return _configured_prices(llm.model_dump())


def spent(pilot_dir: Path) -> str:
    """What the pilot in `pilot_dir` cost, from its run card, in one line."""
    try:
        card = json.loads(RunDir(pilot_dir).card.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return f"the pilot's cost is unknown (no readable run card in {pilot_dir})"
    t = card.get("llm_totals") or {}
    calls, hits = int(t.get("calls", 0) or 0), int(t.get("cache_hits", 0) or 0)
    tokens = int(t.get("prompt_tokens", 0) or 0) + int(t.get("completion_tokens", 0) or 0)
    unpriced = card.get("unpriced")
    paid = float(t.get("cost_usd", 0.0) or 0.0)
    cost = "cost unpriced (" + ", ".join(unpriced) + ")" if unpriced else f"${paid:,.4f}"
    return (f"the pilot made {calls:,} model calls ({hits:,} answered from the response cache, free), "
            f"{tokens:,} tokens, {cost} (its run card: {RunDir(pilot_dir).card})")
