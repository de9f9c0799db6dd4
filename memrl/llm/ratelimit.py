"""How many model requests may be in flight at once: a limit that adapts to rate limits.

`ConcurrencyLimiter` is the LLM client's gate (memrl.llm.client). Each backend call holds
one of its slots while the backend works. With `adaptive` (the default) the number of
slots follows the provider:

- a 429 (rate limit) halves the limit (not below 1), once per wave: requests that were
  already in flight when the limit was cut do not cut it again when they, too, come back
  429, so one burst of rejections halves the limit once, not down to 1;
- every successful call adds 1/limit to it (about +1 per round of `limit` calls, the
  additive increase of AIMD), up to the configured maximum (`llm.max_concurrency`);
- a server's Retry-After pauses every caller until then (`pause_until`): no request is sent
  before it passes, so the callers that were rejected do not each come back on their own
  schedule and meet the limit again; when the pause ends only the (halved) number of slots
  may go.

Provider limits, when configured, bound the rate as well as the count: `rpm` (requests per
minute) admits a request only while fewer than `rpm` requests are in the window; `tpm`
(tokens per minute) only while the tokens of the requests in the window (their estimate —
prompt characters / 4 + max_tokens — until their real count is known) leave room for this
one's estimate. A request larger than `tpm` by itself waits for an empty window and then
goes alone. A request is in the window from when it is sent until 60 s after its answer came
back. The provider counts it from when it arrived, which the client cannot see and which lies
between the two; counting from the send would let a request that waited on the way (a loaded
machine, a slow network) land in the same provider window as the next one, counting from the
answer never does.

`adaptive=False` is the fixed limiter (a semaphore of `max_concurrency`, still bounded by
rpm / tpm): what the client did before, kept for comparison (tests/llm/test_rate_limits.py).
`stats()` says how it went (the run card's `llm.limiter`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

WINDOW_S = 60.0  # rpm / tpm are per minute


@dataclass
class Slot:
    """One admitted request: when it started, under which wave of the limit, its token
    reservation in the tpm window."""

    started: float
    wave: int
    entry: list[float] = field(default_factory=list)  # [answered at (inf in flight), tokens]


class ConcurrencyLimiter:
    def __init__(self, max_concurrency: int, *, adaptive: bool = True, rpm: int | None = None,
                 tpm: int | None = None, clock: Callable[[], float] = time.monotonic,
                 window_s: float = WINDOW_S) -> None:
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        if rpm is not None and rpm < 1 or tpm is not None and tpm < 1:
            raise ValueError("rpm and tpm must be >= 1 (or None: no limit)")
        self.max_concurrency = int(max_concurrency)
        self.adaptive = bool(adaptive)
        self.rpm, self.tpm = rpm, tpm
        self.window_s = float(window_s)
        self._clock = clock
        self._cond = threading.Condition()
        self._limit = float(max_concurrency)
        self._in_flight = 0
        self._wave = 0
        self._pause_until = 0.0
        self._window: list[list[float]] = []  # rpm / tpm window: [answered at (inf in flight), tokens]
        self._stats = {"rate_limited": 0, "decreases": 0, "paused_s": 0.0, "min_limit": float(max_concurrency),
                       "waits_for_rate": 0}

    # -- state ----------------------------------------------------------------------
    @property
    def limit(self) -> int:
        """Slots open now (the adaptive limit, rounded down; at least 1)."""
        with self._cond:
            return self._slots()

    def _slots(self) -> int:
        return max(1, int(self._limit)) if self.adaptive else self.max_concurrency

    def stats(self) -> dict[str, float | int | bool]:
        with self._cond:
            out: dict[str, float | int | bool] = dict(self._stats)
            out.update(adaptive=self.adaptive, limit=self._slots(), max_concurrency=self.max_concurrency)
            out["paused_s"] = round(float(out["paused_s"]), 3)
            out["min_limit"] = max(1, int(float(out["min_limit"])))
        return out

    # -- admission ------------------------------------------------------------------
    def _trim(self, now: float) -> None:
        horizon = now - self.window_s
        self._window = [e for e in self._window if e[0] > horizon]

    def _wait_s(self, now: float, tokens: int) -> float:
        """0 when a request may start now, else how long at most to wait before looking again."""
        if now < self._pause_until:
            return self._pause_until - now
        if self._in_flight >= self._slots():
            return 1.0  # woken by a release
        self._trim(now)
        if not self._window:
            return 0.0
        # the first entry to leave the window (1 s when all are in flight: woken by a release)
        leaves = min(min(e[0] for e in self._window) + self.window_s - now, 1e9)
        if self.rpm is not None and len(self._window) >= self.rpm:
            return leaves if leaves < 1e9 else 1.0
        if self.tpm is not None:
            used = sum(t for _, t in self._window)
            if used + min(tokens, self.tpm) > self.tpm:
                return leaves if leaves < 1e9 else 1.0
        return 0.0

    def acquire(self, tokens: int = 0) -> Slot:
        """Wait for a slot (and for the rate windows to admit a request of about `tokens`)."""
        with self._cond:
            counted = False
            while True:
                now = self._clock()
                wait = self._wait_s(now, tokens)
                if wait <= 0:
                    break
                if not counted and now >= self._pause_until and self._in_flight < self._slots():
                    self._stats["waits_for_rate"] += 1
                    counted = True
                self._cond.wait(timeout=max(0.001, wait))
            self._in_flight += 1
            slot = Slot(started=now, wave=self._wave)
            if self.rpm is not None or self.tpm is not None:
                slot.entry = [float("inf"), float(tokens)]
                self._window.append(slot.entry)
            return slot

    def release(self, slot: Slot, *, ok: bool, rate_limited: bool = False,
                retry_after: float | None = None, tokens: int | None = None) -> None:
        """The request is back: `ok` (answered), `rate_limited` (a 429; `retry_after` seconds
        if the server said), `tokens` its real token count (for the tpm window)."""
        with self._cond:
            self._in_flight -= 1
            if slot.entry:
                slot.entry[0] = self._clock()  # in the window until window_s after the answer
                if tokens is not None:
                    slot.entry[1] = float(tokens)
            if rate_limited:
                self._stats["rate_limited"] += 1
                if self.adaptive and retry_after is not None and retry_after > 0:
                    until = self._clock() + retry_after
                    if until > self._pause_until:
                        self._stats["paused_s"] += until - max(self._pause_until, self._clock())
                        self._pause_until = until
                if self.adaptive and slot.wave == self._wave:  # once per wave
                    self._wave += 1
                    self._limit = max(1.0, self._limit / 2)
                    self._stats["decreases"] += 1
                    self._stats["min_limit"] = min(self._stats["min_limit"], self._limit)
            elif ok and self.adaptive and self._limit < self.max_concurrency:
                self._limit = min(float(self.max_concurrency), self._limit + 1.0 / self._limit)
            self._cond.notify_all()

    def pause(self, seconds: float) -> None:
        """Hold every caller back for `seconds` (a Retry-After seen outside a slot)."""
        with self._cond:
            self._pause_until = max(self._pause_until, self._clock() + seconds)
            self._cond.notify_all()

    def paused_for(self) -> float:
        """Seconds until the shared pause ends (0 when none)."""
        with self._cond:
            return max(0.0, self._pause_until - self._clock())
