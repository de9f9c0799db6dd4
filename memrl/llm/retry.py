"""How a failed model call is read: whether a retry may cure it (`is_transient`), whether it
stops the run (`is_fatal`), whether it is a provider's rate limit, and how long the server
asked us to wait (`retry_after_seconds`). The client (memrl.llm.client) retries on these.

litellm / openai exception classes are recognised by name and module along the MRO, so
litellm need not be imported when the backend is something else.

Errors that stop the run (memrl.control.guards): a non-transient provider error (`is_fatal`:
bad or missing key, no permission, no such model, a request the provider rejects, a prompt
past the context window; not a content-policy refusal, which belongs to one prompt) and a
budget that ran out (`BudgetExhaustedError`).

A try whose reply the client never read (`unseen_kind`): "unreadable", a reply arrived but its
body could not be parsed (a cut 200: a JSON decoding error in the exception's chain; litellm
maps it to a 500 for OpenAI and to a 422 BadRequestError for Gemini), and "lost", the request
was sent but no reply was read (a read timeout, a connection dropped mid-reply, a gateway's
504). The provider may have billed either (the accounting counts them with a bound:
memrl.llm.bill `unseen_bound`); both are transient, never fatal. A try that never reached the
provider (a refused or timed-out connect) is neither.
"""

from __future__ import annotations

import email.utils
import json
import time
from typing import Any, Iterator

from memrl.llm.base import BudgetExhaustedError, MissingKeyError

# Exception class names (litellm's, and the openai SDK's they derive from) worth retrying.
_TRANSIENT_NAMES = frozenset(
    {
        "RateLimitError",
        "InternalServerError",
        "ServiceUnavailableError",
        "BadGatewayError",
        "Timeout",
        "APITimeoutError",
        "APIConnectionError",
    }
)
_TRANSIENT_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})

# Errors no retry cures and no other prompt avoids: the run stops (is_fatal).
_FATAL_NAMES = frozenset(
    {
        "AuthenticationError",          # 401: bad key
        "PermissionDeniedError",        # 403
        "NotFoundError",                # 404: no such model (or endpoint)
        "BadRequestError",              # 400: a request the provider will never take
        "ContextWindowExceededError",   # the prompt is past the model's context window
        "UnprocessableEntityError",     # 422
        "PaymentRequiredError",         # 402: no credit left
        "BudgetExceededError",          # a proxy's budget
    }
)
# Subclasses of BadRequestError that belong to one prompt, not to the run's set-up.
_PER_REQUEST_NAMES = frozenset({"ContentPolicyViolationError", "ImageFetchError"})
_FATAL_STATUS = frozenset({400, 401, 402, 403, 404, 422})


class EmptyReplyError(Exception):
    """An HTTP 200 whose reply holds no text (retried like a transient fault)."""


_SENT_NOT_READ = frozenset({"ReadTimeout", "ReadError", "RemoteProtocolError", "WriteTimeout", "WriteError"})
_NEVER_SENT = frozenset({"ConnectTimeout", "ConnectError", "PoolTimeout"})
_TIMEOUTS = frozenset({"Timeout", "APITimeoutError"})


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception and its causes / contexts, each once."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


def unseen_kind(exc: BaseException) -> str | None:
    """"unreadable", "lost" or None (module doc: a try whose reply the client never read)."""
    chain = list(_chain(exc))
    if any(isinstance(e, json.JSONDecodeError) for e in chain):
        return "unreadable"
    names = {type(e).__name__ for e in chain if (type(e).__module__ or "").startswith(("httpx", "httpcore"))}
    if names & _NEVER_SENT:
        return None
    if names & _SENT_NOT_READ or getattr(exc, "status_code", None) == 504 \
            or any(c.__name__ in _TIMEOUTS for c in _provider_classes(exc)):
        return "lost"
    return None


def _provider_classes(exc: BaseException) -> list[type]:
    return [c for c in type(exc).__mro__ if (c.__module__ or "").startswith(("litellm", "openai"))]


def is_fatal(exc: BaseException) -> bool:
    """True for errors that stop the run: authentication, permission, not found, bad
    request, context window (litellm / openai classes by name along the MRO; the most
    specific decides), and a missing key."""
    if isinstance(exc, (MissingKeyError, BudgetExhaustedError)):
        return True
    if unseen_kind(exc) == "unreadable":  # a cut reply (for Gemini litellm says 422 BadRequest)
        return False
    for cls in _provider_classes(exc):
        if cls.__name__ in _PER_REQUEST_NAMES:
            return False
        if cls.__name__ in _FATAL_NAMES:
            return True
        if cls.__name__ == "APIError" and getattr(exc, "status_code", None) in _FATAL_STATUS:
            return True
    return False


def is_transient(exc: BaseException) -> bool:
    """True for errors a retry may cure: rate limits, server errors, timeouts, lost
    connections, empty replies.

    litellm / openai classes are recognised by name and module along the MRO, so litellm need
    not be imported when the backend is something else.
    """
    if isinstance(exc, (TimeoutError, ConnectionError, EmptyReplyError)) or unseen_kind(exc) is not None:
        return True
    for cls in type(exc).__mro__:
        module = cls.__module__ or ""
        if not module.startswith(("litellm", "openai")):
            continue
        if cls.__name__ in _TRANSIENT_NAMES:
            return True
        if cls.__name__ == "APIError" and getattr(exc, "status_code", None) in _TRANSIENT_STATUS:
            return True
    return False


def _header(headers: Any, name: str) -> str | None:
    if headers is None:
        return None
    try:
        items = headers.items()
    except AttributeError:
        return None
    for key, value in items:
        if str(key).lower() == name:
            return str(value)
    return None


def is_rate_limit(exc: BaseException) -> bool:
    """True for a provider's rate limit (HTTP 429; litellm / openai `RateLimitError`)."""
    if getattr(exc, "status_code", None) == 429:
        return True
    return any(c.__name__ == "RateLimitError" for c in _provider_classes(exc))


def retry_after_seconds(exc: BaseException) -> float | None:
    """Seconds the server asked us to wait (Retry-After / retry-after-ms), if it said."""
    response = getattr(exc, "response", None)
    # litellm keeps the provider's headers in `litellm_response_headers`; the openai SDK in
    # `response.headers`
    for headers in (getattr(exc, "headers", None), getattr(exc, "litellm_response_headers", None),
                    getattr(response, "headers", None)):
        ms = _header(headers, "retry-after-ms")
        if ms is not None:
            try:
                return max(0.0, float(ms) / 1000.0)
            except ValueError:
                pass
        value = _header(headers, "retry-after")
        if value is None:
            continue
        try:
            return max(0.0, float(value))
        except ValueError:
            pass
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            continue
        return max(0.0, when.timestamp() - time.time())
    return None


def short(exc: BaseException | None, limit: int = 300) -> str:
    """An error's message on one line, cut at `limit` characters (for log lines)."""
    text = " ".join(str(exc).split()) if exc is not None else ""
    return text if len(text) <= limit else text[:limit] + "..."
