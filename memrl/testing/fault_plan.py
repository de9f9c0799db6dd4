"""What the fault server (memrl.testing.fault_server) injects: the fault classes, a plan of
their rates per request (`FaultPlan`) and what identifies "the same request" for the
repeatable draw (`content_key`). The module doc of fault_server describes each fault.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

ROUTES = ("chat", "gemini", "embeddings")
TRANSIENT_FAULTS = ("rate_limit_retry_after", "rate_limit", "server_error", "unavailable", "hang",
                    "truncated_json", "empty_content", "no_action")
FATAL_FAULTS = ("auth_error", "permission_denied", "model_not_found", "bad_request", "context_window")
FAULTS = TRANSIENT_FAULTS + FATAL_FAULTS
NO_ACTION_REPLY = "  >  "


@dataclass
class FaultPlan:
    """What the server injects. `rates` maps a fault name (FAULTS) to a probability per request;
    the rates must sum to at most 1."""

    rates: dict[str, float] = field(default_factory=dict)
    latency_s: float = 0.0          # added to every request before it is answered
    retry_after_s: float = 1.0      # the Retry-After value of `rate_limit_retry_after`
    hang_s: float = 30.0            # how long a `hang` keeps the request open
    seed: int = 0
    sticky: list[tuple[tuple[str, ...], str]] = field(default_factory=list)
    cure_after: int | None = None   # the n-th and later tries of one request are never faulted
    limit_requests: int | None = None  # a rate limit: requests answered per window (module doc)
    limit_window_s: float = 1.0
    routes: tuple[str, ...] = ROUTES  # the routes faults are drawn on (the others are never faulted)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.rates) - set(FAULTS))
        if unknown:
            raise ValueError(f"unknown fault names {unknown}; known: {FAULTS}")
        if any(r < 0 for r in self.rates.values()) or sum(self.rates.values()) > 1 + 1e-9:
            raise ValueError(f"fault rates must be >= 0 and sum to <= 1, got {self.rates}")
        for subs, name in self.sticky:
            if name not in FAULTS:
                raise ValueError(f"sticky fault {name!r} is not one of {FAULTS}")
            if not subs:
                raise ValueError("a sticky rule needs at least one substring")
        if self.limit_requests is not None and (self.limit_requests < 1 or self.limit_window_s <= 0):
            raise ValueError("limit_requests must be >= 1 and limit_window_s > 0")
        if not set(self.routes) <= set(ROUTES):
            raise ValueError(f"routes must be among {ROUTES}, got {self.routes}")
        if self.latency_s < 0 or self.hang_s < 0 or self.retry_after_s < 0:
            raise ValueError("latency_s, hang_s and retry_after_s must be >= 0")

    @classmethod
    def mixed(cls, fault_rate: float, **kw: Any) -> "FaultPlan":
        """`fault_rate` spread evenly over every transient fault class."""
        return cls(rates={name: fault_rate / len(TRANSIENT_FAULTS) for name in TRANSIENT_FAULTS}, **kw)

    def choose(self, content_key: str, attempt: int, last_message: str, route: str = "chat") -> str | None:
        """The fault for this request, or None for a normal reply."""
        if route not in self.routes:
            return None
        for subs, name in self.sticky:
            if all(s in last_message for s in subs):
                return name
        if self.cure_after is not None and attempt >= self.cure_after:
            return None
        digest = hashlib.sha256(f"{self.seed}:{content_key}:{attempt}".encode()).digest()
        u = int.from_bytes(digest[:8], "big") / 2**64
        acc = 0.0
        for name in FAULTS:
            acc += self.rates.get(name, 0.0)
            if u < acc:
                return name
        return None


def content_key(body: dict[str, Any], emulated: bool = False) -> str:
    """What identifies 'the same request' for the repeatable fault draw (for an emulated
    provider's request also its own fields: Gemini's contents, reasoning effort, ...)."""
    keep = {k: body.get(k) for k in ("model", "messages", "max_tokens", "stop", "temperature",
                                     "top_p", "seed")}
    if emulated:
        keep.update({k: body[k] for k in _MORE_KEYS if k in body})
    return hashlib.sha256(json.dumps(keep, sort_keys=True, default=str).encode()).hexdigest()


_MORE_KEYS = ("max_completion_tokens", "reasoning_effort", "contents", "system_instruction",
              "systemInstruction", "generationConfig", "input", "dimensions")
# the error faults: HTTP status, message, OpenAI error code
FAULT_ERRORS = {
    "rate_limit_retry_after": (429, "rate limit reached (injected)", "rate_limit_exceeded"),
    "rate_limit": (429, "rate limit reached (injected)", "rate_limit_exceeded"),
    "server_error": (500, "internal server error (injected)", "server_error"),
    "unavailable": (503, "service unavailable (injected)", "server_error"),
    "auth_error": (401, "Incorrect API key provided (injected)", "invalid_api_key"),
    "permission_denied": (403, "this key may not use this model (injected)", "permission_denied"),
    "model_not_found": (404, "The model `{model}` does not exist (injected)", "model_not_found"),
    "bad_request": (400, "Unrecognized request argument (injected)", "invalid_request_error"),
    "context_window": (400, "This model's maximum context length is 4096 tokens. However, your "
                            "messages resulted in 9000 tokens. (injected)", "context_length_exceeded"),
    "hang": (504, "hung request (injected)", "timeout"),
}
