"""Before a session's first batch: can every model the run uses be called as the run will
call it?

The models are the run's `llm` (the solver; memory writers use the same client), the
clients an env keeps of its own (`Env.model_clients()`: HLE's judge, `env.judge`) and an API
embedder. First every key variable is checked (`check_keys`, before anything is built on
them: a missing key is `memrl: ...`, exit 2, with nothing called). Then the preflight sends
what the run will send: one call per purpose (`ModelProbe`: the env's action, the memory
writer, the judge, a baseline's own calls), each with its real prompt shape, budget, stop
sequences and format, past the response cache (paid, and counted in the run's spend), plus
one embedding. A call that fails, comes back empty, or is cut at its budget
(`finish_reason: length`) refuses the run, naming the purpose, the budget, the reasoning
tokens spent and the key to raise. An embedded model (`probe_answer_tokens` on its backend:
it costs nothing and reports no cut, so a longer answer checks nothing more) answers its
probes with at most that many tokens: the model loads, takes each purpose's real prompt, stop
sequences and format, and decodes; the row keeps the run's budget and says the cap. A
finished run makes no call: the preflight runs when the first batch is about to start.
`memrl check <overrides>` runs only this and prints the table (memrl.cli.check).

It also returns what each model is (`identity`), for the run card's resume check: the
cache identity, how it was found and the base URL it is served from.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

from memrl.core.errors import ConfigError
from memrl.llm.base import BudgetExhaustedError, LLMError, ModelProbe
from memrl.llm.client import LLMClient

GENERIC_PURPOSE = "probe"  # the one-word question of a model no probe names


class PreflightError(ConfigError):
    """A model the run needs cannot be used as configured; nothing was run. `rows` are the
    calls the preflight made (their answers, problems and prices), for the run card."""

    def __init__(self, message: str, rows: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.rows = rows or []


def run_clients(llm: LLMClient | None, envs: Iterable[Any]) -> dict[str, LLMClient]:
    """The model clients of a run by the config key that sets each up (each client once)."""
    out: dict[str, LLMClient] = {}
    if llm is not None:
        out["llm"] = llm
    for i, env in enumerate(e for e in envs if e is not None):
        for role, client in (env.model_clients() or {}).items():
            if all(client is not c for c in out.values()):
                out[role if i == 0 else f"{role} (evaluation split)"] = client
    return out


def identity(client: LLMClient) -> dict[str, Any]:
    """What the client's model is (the backend's own account when it gives one)."""
    ident = getattr(client.backend, "identity", None)
    if callable(ident):
        return dict(ident())
    return {"model": client.model_id, "key": client.cache_identity, "source": "backend"}


def _cause(exc: BaseException) -> str:
    if isinstance(exc, BudgetExhaustedError):
        return str(exc)
    cause = exc.__cause__
    return f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)


def api_embedder(embedder: Any) -> Any | None:
    """The embedder behind its cache when it calls an API (else None: local, free)."""
    inner = getattr(embedder, "inner", embedder)
    return inner if hasattr(inner, "api_key_env") else None


def check_keys(clients: Mapping[str, LLMClient], embedder: Any = None) -> None:
    """Every model's key variable is set (no call made); PreflightError naming each missing one."""
    missing = []
    for role, client in clients.items():
        problem = getattr(client.backend, "key_problem", None)
        text = problem() if callable(problem) else None
        if text:
            missing.append(f"{role} ({client.model_id}): {text}")
    api = api_embedder(embedder)
    if api is not None:
        from memrl.llm.litellm_backend import key_problem

        text = key_problem(api.api_key_env)
        if text:
            missing.append(f"embedder ({api.model}): {text}")
    if missing:
        raise PreflightError("the API key of a model is missing: " + "; ".join(missing) +
                             "; set it and run the same command again")


@dataclass
class ProbeResult:
    """One row of the preflight's table."""

    role: str
    purpose: str
    model: str
    budget: int | None          # the completion budget sent (reasoning headroom included)
    answer_tokens: int | None   # of which the answer's
    budget_key: str = ""
    reasoning_tokens: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = ""
    cost_usd: float = 0.0
    priced: bool = True
    problem: str | None = None
    probe_cap: int | None = None  # the probe's answer was capped here (an embedded model: module doc)


@dataclass
class Preflight:
    identities: dict[str, dict[str, Any]] = field(default_factory=dict)
    results: list[ProbeResult] = field(default_factory=list)

    def rows(self) -> list[dict[str, Any]]:
        return [asdict(r) for r in self.results]


def default_probes(clients: Mapping[str, LLMClient], probes: Sequence[ModelProbe]) -> list[ModelProbe]:
    """`probes`, and a one-word question at its default budget for each client no probe names."""
    named = {p.role for p in probes}
    extra = [ModelProbe(role=role, purpose=GENERIC_PURPOSE, prompt="Reply with the single word: ok",
                        answer_tokens=None, budget_key=f"{role}.max_tokens")
             for role in clients if role not in named]
    return [*probes, *extra]


def _probe(role: str, client: LLMClient, probe: ModelProbe) -> ProbeResult:
    prompt = probe.prompt
    messages = (("user", prompt),) if isinstance(prompt, str) else tuple(
        (str(r), c) for r, c in prompt)
    request = client.request(messages, purpose=probe.purpose, max_tokens=probe.answer_tokens,
                             stop=probe.stop, temperature=probe.temperature,
                             response_format=probe.response_format,
                             sample_id=f"preflight/{probe.purpose}", budget_key=probe.budget_key)
    row = ProbeResult(role=role, purpose=probe.purpose, model=client.model_id, budget=request.max_tokens,
                      answer_tokens=request.answer_tokens, budget_key=request.budget_key)
    cap = getattr(client.backend, "probe_answer_tokens", None)
    if cap is not None and request.max_tokens > int(cap):
        request = replace(request, max_tokens=int(cap))
        row.probe_cap = int(cap)
    try:
        resp = client.probe(request)
    except LLMError as exc:
        billed = exc.billed
        if billed is not None:
            row.reasoning_tokens, row.cost_usd = billed.reasoning_tokens, billed.cost_usd
            row.prompt_tokens, row.completion_tokens = billed.prompt_tokens, billed.completion_tokens
            row.priced = billed.priced
        row.finish_reason = "length" if isinstance(exc, BudgetExhaustedError) else "error"
        row.problem = f"the call failed ({_cause(exc)})"
        return row
    row.reasoning_tokens, row.finish_reason = resp.reasoning_tokens, resp.finish_reason
    row.prompt_tokens, row.completion_tokens = resp.prompt_tokens, resp.completion_tokens
    row.cost_usd, row.priced = resp.cost_usd, resp.priced
    if resp.finish_reason == "length":
        row.problem = (f"the reply was cut at its budget of {request.max_tokens} tokens "
                       f"({resp.reasoning_tokens} on reasoning); raise "
                       f"{probe.budget_key or 'its max_tokens'}"
                       + (f" or {client.section}.reasoning_headroom" if client.profile.reasoning else ""))
    elif not (resp.text or "").strip() and getattr(client.backend, "empty_reply_is_fault", False):
        row.problem = "the reply was empty"  # (an embedded model's empty completion is its answer)
    return row


def _embed(embedder: Any) -> ProbeResult | None:
    api = api_embedder(embedder)
    if api is None:
        return None
    row = ProbeResult(role="embedder", purpose="embed", model=api.model, budget=None, answer_tokens=None,
                      budget_key="")
    try:
        vectors = api.embed(["memrl preflight"])
        before = dict(getattr(api, "last_usage", {}) or {})
        row.prompt_tokens = int(before.get("prompt_tokens", 0))
        row.cost_usd = float(before.get("cost_usd", 0.0))
        row.priced = bool(before.get("priced", True))
        row.finish_reason = "stop" if len(vectors) == 1 else "error"
    except Exception as exc:
        row.finish_reason, row.problem = "error", f"the call failed ({type(exc).__name__}: {exc})"
    return row


def preflight(clients: Mapping[str, LLMClient], probes: Sequence[ModelProbe] = (),
              embedder: Any = None, *, refuse: bool = True) -> Preflight:
    """Check keys, send each purpose's call once (module doc). Raises PreflightError naming
    every call that failed (`refuse=False`: report only, for `memrl check`)."""
    check_keys(clients, embedder)
    out = Preflight()
    for probe in default_probes(clients, probes):
        client = clients.get(probe.role)
        if client is not None:
            out.results.append(_probe(probe.role, client, probe))
    row = _embed(embedder)
    if row is not None:
        out.results.append(row)
    bad = [r for r in out.results if r.problem]
    if bad and refuse:
        raise PreflightError("; ".join(
            f"{r.role} ({r.model}): the preflight's {r.purpose} call: {r.problem}" for r in bad) +
            "; fix it (the key, the model settings, the budget), then run the same command again",
            rows=out.rows())
    for role, client in clients.items():
        out.identities[role] = identity(client)
    return out


def table(result: Preflight) -> str:
    """The preflight as a table: per purpose, the model, the budget the run sends (and the
    probe's cap on an embedded model's answer), reasoning tokens, finish reason and the price of
    the call."""
    head = (f"{'role':<10} {'purpose':<16} {'model':<30} {'budget':>14} {'reasoning':>9} "
            f"{'finish':<7} {'price/call':>11}  problem")
    lines = [head]
    for r in result.results:
        if r.budget is None:
            budget = "-"
        elif r.answer_tokens is not None and r.budget != r.answer_tokens:
            budget = f"{r.answer_tokens}+{r.budget - r.answer_tokens}"
        else:
            budget = str(r.budget)
        if r.probe_cap is not None:
            budget += f" (probe {r.probe_cap})"
        price = f"${r.cost_usd:.6f}" if r.priced else "unpriced"
        lines.append(f"{r.role:<10} {r.purpose:<16} {r.model[:30]:<30} {budget:>14} "
                     f"{r.reasoning_tokens:>9} {r.finish_reason or '-':<7} {price:>11}  {r.problem or ''}")
    return "\n".join(lines)
