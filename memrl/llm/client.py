"""The LLM client's call path: each request built, looked up in the response cache, sent at
most once at a time among the callers sharing that cache, retried with backoff, bounded in
concurrency, judged and counted. Its parts live beside it: error classification and
Retry-After (memrl.llm.retry), the per-episode handle and its meter (memrl.llm.episode), the
run's totals (memrl.llm.accounting), the bill of a call's tries (memrl.llm.bill).

Interface contract:

    client = build_client(settings)           # memrl.control.wiring: from the model's validated section
    resp = client.complete(LLMRequest(...))   # cached, retried, counted
    ep = client.episode(sample_prefix="seed0/e1/task-id", seed=123)
    text = ep.complete("prompt text" or [(role, content), ...], purpose="act", stop=("\\n",))
    ep.meter -> UsageMeter for this episode (each call's purpose and cache key in
                `model_calls`); client.totals() -> dict for the run card

Every failure of the backend (after retries for transient errors, at once for the others)
surfaces as `LLMError`, with the backend's exception as `__cause__`. Waits between tries grow
exponentially (backoff_base · 2^k, jitter seeded by the request so reruns wait alike); a
server's Retry-After is used instead when given (for a 429 with the adaptive limiter: what is
left of the shared pause). No single wait exceeds backoff_max.

Concurrency (memrl.llm.ratelimit): at most `max_concurrency` backend calls are in flight. With
`adaptive` (default) a 429 halves that limit (once per wave of rejections) and each success
adds 1/limit back; a 429's Retry-After holds every caller until it passes (the rejected
request's retry waits there with the others, instead of sleeping on its own and coming back
with them all at once). `rpm` / `tpm` pace requests to a provider's per-minute limits.
`adaptive=False` keeps a fixed limit (each caller then sleeps its own Retry-After).

Images: message content may be a tuple of `TextPart`/`ImagePart` (or OpenAI-style part dicts).
A request with an image for a backend whose `supports_images` is not true fails at once with
`UnsupportedContentError` (an `LLMError`), before the cache or the backend is consulted.

Logging: every retry is logged (logger `memrl.llm.client`, WARNING) when it happens, with
the error (a timeout shows as one), the try number and the wait; so is a call that fails for
good. The run card counts them too (`retries`, `failures`; memrl.llm.accounting).

Errors that stop the run (memrl.control.guards): a fatal provider error (memrl.llm.retry
`is_fatal`) and a response cache that cannot be read or written
(`memrl.core.storage.StorageError`) trip the client's `tripwire` when it has one; from then on
every call fails at once without reaching the backend, so the batch in flight ends quickly
and the runner stops before committing it.

Empty replies: a backend that says `empty_reply_is_fault` (an HTTP API, where a 200 with empty
content is a provider fault) has an empty or blank reply retried like a transient error
(`EmptyReplyError`), never cached; if it outlasts the retries the call fails. The embedded
model's empty completion is its answer and stays one. An empty reply whose finish reason is
`length` is different: the completion budget ran out (a reasoning model spent it on hidden
reasoning), so the same request would run out again. It raises `BudgetExhaustedError` at
once, never retried; it is fatal (the run stops on its first occurrence, naming the call's
purpose, its budget, the reasoning tokens spent and the key to raise).

Budgets and settings (memrl.llm.profile): `request()` builds every call's request, with the
completion budget of the profile's one rule (the answer's tokens plus reasoning headroom on a
reasoning model). A `stop` the provider does not take is applied here to the reply, before it
is cached (`stop_applied`). Every reply the provider sent is billed as it arrives
(memrl.llm.accounting, "Billing").

In-flight deduplication: with a cache, one request (one cache key) is sent at most once at a
time by all the callers sharing that cache: threads of this process wait on the first
caller's event, other processes on its claim in the cache (memrl.llm.response_cache), then read the
answer from the cache (counted as cache hits; `claim_waits` counts the polls). Runs launched
in parallel on one cache thus pay for a shared request once.

Cache keys use the backend's `cache_identity` (what the model is: the model name for hosted
APIs, the name plus what a self-hosted server reports, see memrl.llm.litellm_backend), else
its `model_id`. `probe()` makes one short uncached call (the run's preflight).
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from memrl.core.safe_text import safe, safe_str
from memrl.core.stops import MODEL, STORAGE, Tripwire
from memrl.core.storage import StorageError
from memrl.llm.accounting import Totals
from memrl.llm.base import (Backend, BudgetExhaustedError, Content, LLMError, LLMRequest, LLMResponse,
                            UnsupportedContentError, content_text, has_images)
from memrl.llm.bill import Bill as _Bill
from memrl.llm.bill import apply_stop, exhausted, unseen_bound
from memrl.llm.episode import EpisodeLLM
from memrl.llm.profile import ModelProfile, plain_profile
from memrl.llm.ratelimit import ConcurrencyLimiter
from memrl.llm.response_cache import ResponseCache, payload_key, request_key, request_payload
from memrl.llm.retry import (EmptyReplyError, is_fatal, is_rate_limit, is_transient, retry_after_seconds, short,
                             unseen_kind)

# The client's names, and those its callers have long imported from here (their home: memrl.llm.retry,
# memrl.llm.episode)
__all__ = ["EmptyReplyError", "EpisodeLLM", "LLMClient", "is_fatal", "is_rate_limit", "is_transient",
           "retry_after_seconds"]

log = logging.getLogger(__name__)


def _estimate_tokens(request: LLMRequest) -> int:
    """A request's tokens before it is sent (for the tpm window): characters / 4 + max_tokens."""
    chars = sum(len(content_text(content)) for _, content in request.messages)
    return chars // 4 + int(request.max_tokens)


class LLMClient:
    """Wraps a `Backend` with a cache, retries, a concurrency bound and usage totals."""

    CLAIM_POLL_S = 0.05  # first wait for another process's answer (grows to 1 s)

    def __init__(
        self,
        backend: Backend,
        cache: ResponseCache | None = None,
        *,
        max_concurrency: int,
        max_retries: int,
        backoff_base: float,
        backoff_max: float,
        adaptive: bool,
        rpm: int | None,
        tpm: int | None,
        defaults: Mapping[str, Any],
        sleep: Callable[[float], None] = time.sleep,
        tripwire: Tripwire | None = None,
        section: str = "llm",
    ) -> None:
        """Every setting comes from the model's validated section (memrl.control.wiring.build_client:
        the schema, memrl.config.sections.ModelSettings, owns each default); `defaults` holds
        the sampling settings a caller may leave unnamed (temperature, top_p, max_tokens)."""
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        missing = sorted({"temperature", "top_p", "max_tokens"} - set(defaults))
        if missing:
            raise ValueError(f"defaults: the client's sampling defaults lack {missing}")
        self.backend = backend
        self.cache = cache
        self.max_concurrency = max_concurrency
        self.max_retries = max(0, int(max_retries))
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self.defaults: dict[str, Any] = dict(defaults)
        self._sleep = sleep
        # the in-flight bound: halves on 429s, recovers additively, pauses every caller for
        # a Retry-After, paced by rpm / tpm when given (memrl.llm.ratelimit)
        self.limiter = ConcurrencyLimiter(max_concurrency, adaptive=adaptive, rpm=rpm, tpm=tpm)
        self._lock = threading.Lock()  # guards _flights
        self._flights: dict[str, threading.Event] = {}  # keys being called in this process
        self.counts = Totals()  # what this process's calls were and cost (memrl.llm.accounting)
        # the run's stop signal (memrl.control.guards): tripped by a fatal error seen here
        self.tripwire = tripwire
        self._profile: ModelProfile | None = None
        self.section = section  # the config key of its model section ("llm", "env.judge"), for messages

    @property
    def model_id(self) -> str:
        return self.backend.model_id

    @property
    def profile(self) -> ModelProfile:
        """What the model is (memrl.llm.profile): the backend's, else a plain free model."""
        if self._profile is None:
            own = getattr(self.backend, "profile", None)
            self._profile = own if isinstance(own, ModelProfile) else plain_profile(self.model_id)
        return self._profile

    def request(self, messages: tuple[tuple[str, Content], ...], *, purpose: str,
                max_tokens: int | None = None, stop: Sequence[str] = (),
                temperature: float | None = None, response_format: str | None = None,
                sample_id: str = "", seed: int | None = None, budget_key: str = "") -> LLMRequest:
        """The request of one call: the client's defaults where the caller names nothing, and
        the completion budget of the profile's rule (memrl.llm.profile)."""
        d = self.defaults
        answer = int(max_tokens if max_tokens is not None else d["max_tokens"])
        if temperature is None:
            temperature = d.get("temperature")
        if temperature is None:  # the model's own: its one temperature, else greedy
            temperature = self.profile.fixed_temperature if self.profile.fixed_temperature is not None else 0.0
        return LLMRequest(
            messages=safe(messages),  # a prompt quotes sandbox output: made safe once (memrl.core.safe_text)
            max_tokens=self.profile.budget(answer),
            temperature=float(temperature),
            top_p=float(d["top_p"]),
            stop=tuple(stop),
            sample_id=sample_id,
            seed=seed,
            response_format=response_format,
            purpose=purpose,
            answer_tokens=answer,
            budget_key=budget_key or (f"{self.section}.max_tokens" if max_tokens is None else ""),
        )

    @property
    def cache_identity(self) -> str:
        """What the cache keys this client's answers by: the backend's model identity."""
        return getattr(self.backend, "cache_identity", None) or self.backend.model_id

    def _trip(self, kind: str, message: str) -> None:
        if self.tripwire is not None:
            self.tripwire.trip(kind, message)

    @property
    def supports_images(self) -> bool:
        """Whether the backend takes image content (backends that do not say: no)."""
        return bool(getattr(self.backend, "supports_images", False))

    # -- one request --------------------------------------------------------------------
    def key(self, request: LLMRequest) -> str:
        """The request's cache key: memrl.llm.response_cache.payload_key of its payload for this
        backend's model identity (`cache_identity`), the request as the cache sees it
        (`_as_keyed`)."""
        return payload_key(request_payload(self.cache_identity, self._as_keyed(request)))

    def complete(self, request: LLMRequest) -> LLMResponse:
        """The answer (cached, retried, counted); `resp.key` is the request's cache key. The
        request itself is kept in the cache's prompt store before the model is asked."""
        if has_images(request.messages) and not self.supports_images:
            raise UnsupportedContentError(
                f"{self.backend.model_id} takes text only, and this request holds an image; "
                "use a model that takes images (for an API model whose capability litellm does "
                "not know, set `vision: true` in its llm config) or keep image tasks out")
        trip = self.tripwire.tripped if self.tripwire is not None else None
        if trip is not None:
            raise LLMError(f"{self.backend.model_id}: not called, the run is stopping ({trip.message})")
        keyed = self._as_keyed(request)
        payload = request_payload(self.cache_identity, keyed)
        key = payload_key(payload)  # == self.key(request)
        if self.cache is not None:
            try:
                self.cache.put_request(key, payload)
                hit = self.cache.get(key)
                if hit is None and keyed is not request:
                    # an entry written before greedy answers were keyed without their seed
                    hit = self.cache.get(request_key(self.cache_identity, request))
                    if hit is not None:
                        self.cache.put(key, hit)
            except StorageError as exc:
                self._storage_failed(exc)
            if hit is not None:
                return self._served(hit, key)
            # one call per key at a time, in this process and across processes sharing the
            # cache: a caller that finds the key in flight waits for that answer instead
            shared, claimed = self._lead_or_wait(key)
            if shared is not None:
                return self._served(shared, key)
            try:
                return self._call(request, key)
            finally:
                self._end_flight(key, claimed)
        return self._call(request, key)

    def _served(self, hit: LLMResponse, key: str) -> LLMResponse:
        self.counts.add(requests=1, cache_hits=1)
        hit.key = key
        return hit

    def _cached(self, key: str) -> LLMResponse | None:
        assert self.cache is not None
        try:
            return self.cache.get(key)
        except StorageError as exc:
            self._storage_failed(exc)

    def _lead_or_wait(self, key: str) -> tuple[LLMResponse | None, bool]:
        """(an answer another caller made for `key` while this one waited, False), or (None,
        claimed) when this caller is to call the model; `claimed`: it holds the key's claim
        in the cache (memrl.llm.response_cache), to be released by `_end_flight`."""
        assert self.cache is not None
        while True:
            with self._lock:
                flight = self._flights.get(key)
                if flight is None:
                    self._flights[key] = threading.Event()
            if flight is not None:  # another thread of this process is on it
                flight.wait()
                hit = self._cached(key)
                if hit is not None:
                    return hit, False
                continue  # its call failed: this one tries (or waits for the next one)
            break
        try:
            wait = self.CLAIM_POLL_S
            while True:
                try:
                    if self.cache.claim(key):
                        break
                except StorageError as exc:
                    self._storage_failed(exc)
                hit = self._cached(key)  # another process holds it: wait for its answer
                if hit is not None:
                    self._end_flight(key, False)
                    return hit, False
                trip = self.tripwire.tripped if self.tripwire is not None else None
                if trip is not None:
                    raise LLMError(f"{self.backend.model_id}: not called, the run is stopping ({trip.message})")
                self.counts.add(claim_waits=1)
                time.sleep(wait)
                wait = min(1.0, wait * 1.5)
            hit = self._cached(key)  # answered just before the claim was free
            if hit is not None:
                self._end_flight(key, True)
                return hit, False
        except BaseException:
            self._end_flight(key, False)
            raise
        return None, True

    def _end_flight(self, key: str, claimed: bool) -> None:
        """This caller is done with `key`: its claim released, this process's waiters woken."""
        try:
            if claimed and self.cache is not None:
                try:
                    self.cache.release(key)
                except StorageError as exc:
                    self._trip(STORAGE, str(exc))
        finally:
            with self._lock:
                flight = self._flights.pop(key, None)
            if flight is not None:
                flight.set()

    def _call(self, request: LLMRequest, key: str) -> LLMResponse:
        """The backend's answer (retried), counted, then cached."""
        try:
            resp = self._call_with_retries(request, key)
        except Exception as exc:
            self.counts.add(requests=1, failures=1)
            log.warning("%s: model call failed (%s): %s: %s", self.backend.model_id,
                        request.sample_id or "no sample id", type(exc).__name__, short(exc))
            if isinstance(exc, BudgetExhaustedError):
                self._trip(MODEL, f"{exc}; then run the same command to continue")
                raise exc
            message = f"{self.backend.model_id}: {type(exc).__name__}: {exc}"
            if is_fatal(exc):
                self._trip(MODEL, f"model error that no retry cures: {message}; fix the model "
                                  "settings (llm.model, llm.api_base, the key) and run the same "
                                  "command to continue")
            err = LLMError(message)
            err.billed = getattr(exc, "billed", None)
            raise err from exc
        resp.cached = False
        resp.model = resp.model or self.backend.model_id
        resp.key = key
        self.counts.add(requests=1, calls=1)  # its tokens were counted as each try arrived (paid for)
        if self.cache is not None:
            try:
                self.cache.put(key, resp)
            except StorageError as exc:
                self._storage_failed(exc)
        return resp

    def _storage_failed(self, exc: StorageError) -> NoReturn:
        self._trip(STORAGE, str(exc))
        raise LLMError(f"{self.backend.model_id}: {exc}") from exc

    def probe(self, request: LLMRequest | None = None) -> LLMResponse:
        """One call past the cache (the preflight sends what the run will send: memrl.control.preflight),
        retried like any call and counted (paid). Raises LLMError when the model cannot be
        called; a budget that ran out raises BudgetExhaustedError (the run is not started, so
        nothing is tripped). Without a request: a one-word question at the default budget."""
        if request is None:
            request = self.request((("user", "Reply with the single word: ok"),), purpose="preflight")
        request = dataclasses.replace(request, sample_id=request.sample_id or "preflight")
        try:
            return self._call_with_retries(request, "preflight")
        except Exception as exc:
            self.counts.add(requests=1, failures=1)
            if isinstance(exc, LLMError):
                raise
            err = LLMError(f"{self.backend.model_id}: {type(exc).__name__}: {exc}")
            err.billed = getattr(exc, "billed", None)
            raise err from exc
        finally:
            self.counts.add(probes=1)

    def _as_keyed(self, request: LLMRequest) -> LLMRequest:
        """The request as the cache sees it. A backend whose greedy answers (temperature 0)
        do not depend on the seed (`greedy_ignores_seed`, e.g. the embedded llama.cpp model)
        is keyed without it, so the same prompt in another epoch or episode is a cache hit."""
        if request.temperature == 0 and getattr(self.backend, "greedy_ignores_seed", False):
            return dataclasses.replace(request, seed=None)
        return request

    def _attempt(self, request: LLMRequest, bill: _Bill) -> LLMResponse:
        # The slot is held only while the backend works, not while backing off.
        slot = self.limiter.acquire(_estimate_tokens(request))
        try:
            resp = self.backend.generate(request)
        except BaseException as exc:
            if unseen_kind(exc) is not None:  # sent, never read: perhaps billed (memrl.llm.bill)
                self.counts.unseen(unseen_bound(request, self.profile))
            limited = is_rate_limit(exc)
            self.limiter.release(slot, ok=False, rate_limited=limited,
                                 retry_after=self._asked(exc) if limited else None)
            raise
        self.limiter.release(slot, ok=True, tokens=resp.prompt_tokens + resp.completion_tokens)
        resp.text = safe_str(resp.text or "")  # a reply is cached, parsed and recorded: made safe once
        if request.stop and self.profile.client_stops:
            resp.text, resp.stop_applied = apply_stop(resp.text or "", request.stop), True
        self.counts.bill(resp)  # the provider charged for this reply, whatever happens to it now
        bill.add(resp)
        if not (resp.text or "").strip():
            if resp.finish_reason == "length":
                raise exhausted(request, resp, self.profile, self.backend.model_id, self.section)
            if resp.finish_reason == "content_filter":  # the same prompt is withheld again
                raise LLMError(f"{self.backend.model_id}: the provider's content filter withheld the "
                               f"reply to this {request.purpose or 'call'} (finish_reason content_filter)")
            if getattr(self.backend, "empty_reply_is_fault", False):
                raise EmptyReplyError(f"the server answered with empty content ({resp.completion_tokens} "
                                      "completion tokens)")
        return resp

    def _asked(self, exc: BaseException) -> float | None:
        """The server's Retry-After for this error, capped at backoff_max."""
        asked = retry_after_seconds(exc)
        return None if asked is None else min(asked, self.backoff_max)

    def _wait(self, key: str) -> Callable[[RetryCallState], float]:
        def wait(state: RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome is not None else None
            asked = self._asked(exc) if exc is not None else None
            if asked is not None:
                # adaptive: the limiter holds every caller until the shared pause ends (this
                # retry sleeps what is left of it); fixed: this caller sleeps on its own
                if self.limiter.adaptive and is_rate_limit(exc):
                    return min(asked, self.limiter.paused_for())
                return asked
            # Exponential backoff with jitter in [0.5, 1.0) of the step, seeded by the
            # request and attempt so a rerun waits the same way.
            step = min(self.backoff_max, self.backoff_base * 2 ** (state.attempt_number - 1))
            jitter = random.Random(f"{key}:{state.attempt_number}").random()
            return step * (0.5 + 0.5 * jitter)

        return wait

    def _on_retry(self, state: RetryCallState) -> None:
        self.counts.add(retries=1)
        exc = state.outcome.exception() if state.outcome is not None else None
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        log.warning("%s: try %d of %d failed (%s: %s); retrying in %.1f s", self.backend.model_id,
                    state.attempt_number, self.max_retries + 1, type(exc).__name__, short(exc), wait)

    def _call_with_retries(self, request: LLMRequest, key: str) -> LLMResponse:
        """The answer, carrying what every billed try cost (module doc); a failure carries
        it as `billed`."""
        retrying = Retrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=self._wait(key),
            retry=retry_if_exception(is_transient),
            before_sleep=self._on_retry,
            sleep=self._sleep,
            reraise=True,
        )
        bill = _Bill()
        try:
            return bill.onto(retrying(self._attempt, request, bill))
        except BaseException as exc:
            if bill.attempts and isinstance(exc, Exception):
                try:
                    exc.billed = bill.as_response(self.backend.model_id)  # type: ignore[attr-defined]
                except AttributeError:  # an exception type that takes no attributes
                    pass
            raise

    # -- accounting ---------------------------------------------------------------------
    def totals(self) -> dict[str, Any]:
        """For the run card: the counts and cost (memrl.llm.accounting), the model, the
        limiter's stats, and the backend's own (a backend that measures its work)."""
        out = self.counts.snapshot()
        out["model"] = self.backend.model_id
        out["limiter"] = self.limiter.stats()
        stats = getattr(self.backend, "stats", None)
        if callable(stats):  # backends that measure their own work (the embedded model)
            out["backend"] = stats()
        return out

    def episode(self, sample_prefix: str, seed: int | None = None) -> EpisodeLLM:
        return EpisodeLLM(self, sample_prefix, seed)

