"""Before a session's first batch: can every model the run uses be reached with its key?

The models are the run's `llm` (the solver; memory writers use the same client) and the
clients an env keeps of its own (`Env.model_clients()`: HLE's judge, `env.judge`). For
each, the key's environment variable must be set (checked for all before any call), then
one short call past the cache must succeed (`LLMClient.probe`: a bad key, an unknown model
or an unreachable server fails here, not as an errored episode for every task). A finished
run makes no call: the preflight runs when the first batch is about to start.

It also returns what each model is (`identity`), for the run card's resume check: the
cache identity, how it was found and the base URL it is served from.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from memrl.errors import ConfigError
from memrl.llm.base import LLMError
from memrl.llm.client import LLMClient


class PreflightError(ConfigError):
    """A model the run needs cannot be used as configured; nothing was run."""


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


def _cause(exc: LLMError) -> str:
    cause = exc.__cause__
    return f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)


def preflight(clients: Mapping[str, LLMClient]) -> dict[str, dict[str, Any]]:
    """Check keys, call each model once; returns {role: identity}. Raises PreflightError."""
    missing = []
    for role, client in clients.items():
        problem = getattr(client.backend, "key_problem", None)
        text = problem() if callable(problem) else None
        if text:
            missing.append(f"{role} ({client.model_id}): {text}")
    if missing:
        raise PreflightError("the API key of a model is missing: " + "; ".join(missing) +
                             "; set it and run the same command again")
    identities: dict[str, dict[str, Any]] = {}
    for role, client in clients.items():
        try:
            client.probe()
        except LLMError as exc:
            raise PreflightError(
                f"{role} ({client.model_id}): the preflight call failed ({_cause(exc)}); check "
                f"{role}.model, {role}.api_base and the key, then run the same command again") from exc
        identities[role] = identity(client)
    return identities
