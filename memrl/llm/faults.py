"""What a run's model calls met, for the run card: provider faults by kind, empty replies,
and the episodes that ended errored.

`FaultTally` wraps the LLM client's backend (`FaultTally.attach(client)`): every attempt the
backend makes passes through it, so it sees each fault before the client decides to retry
it, including the ones a retry later cured. The client's own totals say how many of them
were retried (`retries`) and how many calls still failed after the retries (`failures`).

Kinds are the exception class names (litellm's: RateLimitError, InternalServerError,
ServiceUnavailableError, Timeout, APIConnectionError, BadRequestError, ...); a reply whose
text is empty or blank counts as `empty_reply`, a fault like the others (in `faults`): an
HTTP backend's empty reply is retried and never cached (memrl.llm.client), so it costs an
attempt, not an answer. The embedded model's empty completions are its answers (the client
keeps them): they are counted as `empty_answer`, not as faults.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any, Iterable, Mapping

EMPTY_REPLY = "empty_reply"
EMPTY_ANSWER = "empty_answer"


class FaultTally:
    """A `Backend` that forwards to another and counts the faults it raises, by kind."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model_id = inner.model_id  # unchanged: cache keys and run cards stay the same
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    @classmethod
    def attach(cls, client: Any) -> "FaultTally":
        """Put a tally between `client` (an LLMClient) and its backend; idempotent."""
        if isinstance(client.backend, FaultTally):
            return client.backend
        tally = cls(client.backend)
        client.backend = tally
        return tally

    def __getattr__(self, name: str) -> Any:
        # Anything else the backend offers (supports_images, ...) reads through.
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def generate(self, request: Any) -> Any:
        try:
            resp = self.inner.generate(request)
        except BaseException as exc:
            with self._lock:
                self._counts["attempts"] += 1
                self._counts[fault_kind(exc)] += 1
            raise
        with self._lock:
            self._counts["attempts"] += 1
            if not (resp.text or "").strip():
                fault = getattr(self.inner, "empty_reply_is_fault", False)
                self._counts[EMPTY_REPLY if fault else EMPTY_ANSWER] += 1
        return resp

    def counts(self) -> dict[str, int]:
        """attempts (backend calls, faulted or not) and one count per fault kind seen."""
        with self._lock:
            out = dict(sorted(self._counts.items()))
        out.setdefault("attempts", 0)
        out["faults"] = sum(v for k, v in out.items() if k not in ("attempts", EMPTY_ANSWER))
        return out


def fault_kind(exc: BaseException) -> str:
    """The name a fault is counted under: its exception class name."""
    return type(exc).__name__


def sum_counts(parts: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Add per-session fault counts."""
    total: Counter[str] = Counter()
    for part in parts:
        for k, v in (part or {}).items():
            if isinstance(v, int):
                total[k] += v
    return dict(sorted(total.items()))


def error_kind(message: str) -> str:
    """A short kind for an episode error line: the exception name inside an LLMError line
    ("LLMError at step 3: openai/x@...: Timeout: ..." -> "LLMError:Timeout"), else its head."""
    head = message.split(":", 1)[0].strip()
    if "LLMError" in head:
        # "LLMError at step N: <model>: <ExceptionName>: <text>"
        for part in message.split(": ")[1:]:
            part = part.strip()
            if part.isidentifier() and part[:1].isupper():
                return f"LLMError:{part}"
        return "LLMError"
    return head or "unknown"


_JUDGE_KEYS = ("calls", "cache_hits", "prompt_tokens", "completion_tokens", "cost_usd")


def episode_summary(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Recorded episodes, how many ended errored, and their first errors by kind."""
    n = errored = empty = writer = 0
    kinds: Counter[str] = Counter()
    judge: Counter[str] = Counter()
    judge_models: set[str] = set()
    for r in records:
        n += 1
        errors = r.get("errors") or []
        if errors:
            errored += 1
            kinds[error_kind(str(errors[0]))] += 1
        info = r.get("info") or {}
        empty += int(info.get("empty_actions", 0) or 0)
        writer += int(bool(info.get("writer_error")))
        if isinstance(info.get("judge"), Mapping):  # envs graded by a judge model (HLE)
            for key in _JUDGE_KEYS:
                judge[key] += info["judge"].get(key, 0) or 0
            judge_models.add(str(info["judge"].get("model", "")))
    out: dict[str, Any] = {"recorded": n, "errored": errored,
                           "errors_by_kind": dict(sorted(kinds.items())), "empty_actions": empty,
                           # memories stored without the model-written summary (memrl.memory.writer)
                           "writer_failures": writer}
    if judge_models:
        # the judge's own model use: not in the run's llm_totals, which count the solver client
        out["judge"] = {"models": sorted(judge_models),
                        **{k: (float(judge[k]) if k == "cost_usd" else int(judge[k])) for k in _JUDGE_KEYS}}
    return out
