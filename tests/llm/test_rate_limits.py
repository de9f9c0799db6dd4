"""Adaptive concurrency (memrl.llm.ratelimit) against a provider's rate limit.

The limiter's rules are checked on their own (halving once per wave, additive recovery, the
shared Retry-After pause, rpm / tpm pacing); then 64 threads at `max_concurrency=64` call the
fault server in its rate-limit mode (N requests per window, 429 + Retry-After beyond it)
through litellm and the real client, once with a fixed limit and once adaptive, and the
server's own count of 429s is compared."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from memrl.config.sections import LLMSettings
from memrl.llm.base import LLMRequest
from clients import make_client

from memrl.control.wiring import build_client
from memrl.llm.ratelimit import ConcurrencyLimiter
from memrl.llm.scripted import ScriptedBackend
from memrl.testing.fault_server import FaultPlan, FaultServer

pytestmark = pytest.mark.serial  # times or samples the host: runs alone (Makefile, test)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_wave_of_429s_halves_the_limit_once_and_successes_bring_it_back() -> None:
    lim = ConcurrencyLimiter(16, clock=Clock())
    slots = [lim.acquire() for _ in range(16)]
    for s in slots:  # all sixteen in flight come back 429: one cut, not four
        lim.release(s, ok=False, rate_limited=True)
    assert lim.limit == 8 and lim.stats()["decreases"] == 1 and lim.stats()["rate_limited"] == 16
    s = lim.acquire()  # a request of the new wave, rejected again: a second cut
    lim.release(s, ok=False, rate_limited=True)
    assert lim.limit == 4
    for _ in range(30):  # +1/limit per success: about one slot per round of `limit` calls
        lim.release(lim.acquire(), ok=True)
    assert lim.limit == 8
    for _ in range(1000):
        lim.release(lim.acquire(), ok=True)
    assert lim.limit == 16  # never above the configured maximum
    fixed = ConcurrencyLimiter(16, adaptive=False, clock=Clock())
    fixed.release(fixed.acquire(), ok=False, rate_limited=True)
    assert fixed.limit == 16


def test_the_limit_bounds_requests_in_flight() -> None:
    lim = ConcurrencyLimiter(3)
    inside, peak, guard = [0], [0], threading.Lock()

    def work(_: int) -> None:
        slot = lim.acquire()
        with guard:
            inside[0] += 1
            peak[0] = max(peak[0], inside[0])
        time.sleep(0.01)
        with guard:
            inside[0] -= 1
        lim.release(slot, ok=True)

    with ThreadPoolExecutor(12) as pool:
        list(pool.map(work, range(60)))
    assert peak[0] == 3


def test_retry_after_holds_every_caller_until_it_passes() -> None:
    lim = ConcurrencyLimiter(8)
    lim.release(lim.acquire(), ok=False, rate_limited=True, retry_after=0.3)
    t0 = time.monotonic()
    started: list[float] = []

    def call() -> None:
        slot = lim.acquire()
        started.append(time.monotonic() - t0)
        lim.release(slot, ok=True)

    threads = [threading.Thread(target=call) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(started) == 5 and min(started) >= 0.25
    assert lim.stats()["paused_s"] >= 0.25


def test_rpm_and_tpm_pace_requests_in_their_window() -> None:
    lim = ConcurrencyLimiter(64, rpm=5, window_s=0.4)
    t0 = time.monotonic()
    for _ in range(10):
        lim.release(lim.acquire(), ok=True)
    assert time.monotonic() - t0 >= 0.35  # the sixth waited for the first to leave the window
    lim = ConcurrencyLimiter(64, tpm=100, window_s=0.4)
    t0 = time.monotonic()
    for _ in range(4):  # 60 tokens each: two fit no window together
        lim.release(lim.acquire(60), ok=True, tokens=60)
    assert time.monotonic() - t0 >= 3 * 0.35
    big = ConcurrencyLimiter(4, tpm=10)
    big.release(big.acquire(500), ok=True)  # alone in an empty window: it goes (never stuck)
    with pytest.raises(ValueError):
        ConcurrencyLimiter(4, rpm=0)


def test_a_request_stays_in_the_rate_window_until_a_window_after_its_answer() -> None:
    clock = Clock()
    lim = ConcurrencyLimiter(8, rpm=1, window_s=10.0, clock=clock)
    slow = lim.acquire()  # sent at 100
    clock.now = 130.0  # and answered only now: it reached the provider at some time in [100, 130]
    lim.release(slow, ok=True)
    clock.now = 135.0  # 35 s after it was sent, but the provider may have counted it from 130
    assert lim._wait_s(clock.now, 0) == pytest.approx(5.0)
    clock.now = 140.0  # a window after its answer: it has left
    assert lim._wait_s(clock.now, 0) == 0.0
    busy = ConcurrencyLimiter(8, tpm=100, window_s=10.0, clock=clock)
    busy.acquire(80)  # in flight for good: it holds its tokens however long it takes
    clock.now = 1000.0
    assert busy._wait_s(clock.now, 50) > 0 and busy._wait_s(clock.now, 20) == 0.0


def test_a_client_waits_the_shared_pause_instead_of_its_own_sleep() -> None:
    class RateLimitError(Exception):  # looks like litellm's to the classifier
        __module__ = "litellm.exceptions"
        status_code = 429
        headers = {"retry-after": "0.2"}

    tries = [0]

    def fn(request: LLMRequest) -> str:
        tries[0] += 1
        if tries[0] == 1:
            raise RateLimitError("slow down")
        return "ok"

    slept: list[float] = []
    client = make_client(ScriptedBackend(fn), max_concurrency=4, sleep=slept.append)
    t0 = time.monotonic()
    assert client.complete(LLMRequest(messages=(("user", "x"),))).text == "ok"
    # it sleeps what is left of the shared pause, and the limiter holds it (and any other
    # caller) until the pause has passed even if that sleep was cut short
    assert len(slept) == 1 and 0.1 < slept[0] <= 0.2 and time.monotonic() - t0 >= 0.15
    t = client.totals()["limiter"]
    assert t["rate_limited"] == 1 and t["limit"] == 2 and t["adaptive"] is True


# ---------------------------------------------------------------------- against the server
N_REQUESTS = 160
LIMIT, WINDOW_S, LATENCY_S = 20, 1.0, 0.1  # the server answers 20 a second


def _storm(adaptive: bool, paced: bool = False) -> tuple[dict, dict, float]:
    """N_REQUESTS distinct requests from 64 threads at max_concurrency=64 against a server
    answering at most LIMIT per WINDOW_S; returns (server counts, client totals, seconds)."""
    plan = FaultPlan(latency_s=LATENCY_S, limit_requests=LIMIT, limit_window_s=WINDOW_S)
    with FaultServer(plan) as server:
        client = build_client(LLMSettings(name="fault", backend="litellm", model="openai/fault",
                                          api_base=server.api_base, api_key_env="MEMRL_RATE_TEST_KEY", cache=False,
                                          max_concurrency=64, max_retries=50, backoff_max=5.0,
                                          adaptive_concurrency=adaptive, timeout=30))
        if paced:  # the provider's limit configured (llm.rpm, here with the server's window)
            client.limiter = ConcurrencyLimiter(64, rpm=LIMIT, window_s=WINDOW_S)
        reqs = [LLMRequest(messages=(("user", f"request {i}"),), max_tokens=8) for i in range(N_REQUESTS)]
        t0 = time.monotonic()
        with ThreadPoolExecutor(64) as pool:
            texts = list(pool.map(lambda r: client.complete(r).text, reqs))
        elapsed = time.monotonic() - t0
        counts = server.counts()
    assert len(texts) == N_REQUESTS  # every request answered in the end
    return counts, client.totals(), elapsed


@pytest.fixture(autouse=False)
def key_env(monkeypatch):
    monkeypatch.setenv("MEMRL_RATE_TEST_KEY", "unused")


def test_adaptive_concurrency_keeps_429s_bounded_where_a_fixed_limit_storms(key_env) -> None:
    fixed, fixed_totals, fixed_s = _storm(adaptive=False)
    adaptive, totals, adaptive_s = _storm(adaptive=True)
    print(f"\nfixed:    {fixed['over_limit']} x 429 for {N_REQUESTS} requests, {fixed_s:.1f} s, "
          f"{fixed_totals['retries']} retries")
    print(f"adaptive: {adaptive['over_limit']} x 429 for {N_REQUESTS} requests, {adaptive_s:.1f} s, "
          f"{totals['retries']} retries, limiter {totals['limiter']}")
    assert fixed["ok"] == adaptive["ok"] == N_REQUESTS
    # bounded by windows, not by requests x concurrency: the first wave (64 sent, LIMIT
    # answered) and then a few per window while the limit probes upwards again
    windows = -(-N_REQUESTS // LIMIT)
    assert adaptive["over_limit"] <= (64 - LIMIT) + 8 * windows
    # fewer than the fixed limit's storm (how many fewer moves with the machine's load: a loaded
    # client sends slower and storms less, 158 against 91 in one CI-like run, 2x+ when idle)
    assert adaptive["over_limit"] < fixed["over_limit"]
    assert totals["limiter"]["decreases"] >= 1 and totals["limiter"]["paused_s"] > 0
    # bounded wait, without timing the machine (wall seconds swing 2x on a loaded CI box, so
    # the seconds are printed, and the benchmark figures live in results/plan_and_rate_limits):
    # the limit comes back to at least the concurrency the server's rate needs, and the shared
    # Retry-After pauses sum to less than the windows the work itself takes at that rate
    assert totals["limiter"]["limit"] >= LIMIT * LATENCY_S
    assert totals["limiter"]["paused_s"] <= windows * WINDOW_S
    paced, paced_totals, paced_s = _storm(adaptive=True, paced=True)
    print(f"paced:    {paced['over_limit']} x 429 for {N_REQUESTS} requests, {paced_s:.1f} s")
    # the client counts a request until a window after its answer, the server from its arrival
    # (in between): however late requests reach the server, none lands in a full window
    assert paced["over_limit"] == 0 and paced["ok"] == N_REQUESTS
