"""One client's running totals: what this process's model calls were and what they cost.

`Totals` counts, under its own lock, the requests (answered by the backend, `calls`, or by
the cache, `cache_hits`), retries, failures, polls on another process's claim
(`claim_waits`), probes, and every reply the provider sent (`bill`). `LLMClient.totals()`
(memrl.llm.client) reads `snapshot()` for the run card.

Accounting: the totals count what this process spent (backend calls, their tokens and cost;
cache hits separately). A cached response keeps the tokens and cost recorded when it was
first made, so an episode's `meter` reads the same on a replay as on the original run. A
response is counted when it arrives, before it is cached, so a paid answer that the cache
could not store is still counted (memrl.control.budget reads these totals).

Billing: every reply the provider sent (HTTP 200) was paid for, usable or not. Its tokens and
cost are counted here when it arrives, and the answer finally returned (or the `LLMError` of
a call that failed, as `billed`) carries the sum over its tries (memrl.llm.bill), so the
episode's meter, the run's spend, its budget and the plan all count retried and empty
replies. Reasoning and provider-cached prompt tokens are counted apart; a model without a
price (`priced: False`) is counted as `unpriced_calls`, never as $0. A try whose reply was
never read (a cut body, a timeout after sending) is counted as `unseen_tries`, with the most
it can have cost added to `unseen_bound_usd` (or `unseen_unbounded` when it has no bound):
memrl.llm.bill, "Unseen tries".
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from memrl.llm.base import LLMResponse
from memrl.llm.bill import USAGE

# the counts of `snapshot()`, in the run card's order
COUNTS = (
    "requests",
    "calls",
    "cache_hits",
    "retries",
    "failures",
    "claim_waits",
    "probes",
    "billed_replies",
    "empty_replies",
    "truncated_replies",
    "client_stops",
    "unpriced_calls",
    "unseen_tries",
    "unseen_unbounded",
    *USAGE,
)


class Totals:
    """Counts and cost of one client's calls (module doc); safe to share among threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._cost = 0.0
        self._unseen_bound = 0.0

    def add(self, **counts: int) -> None:
        """Add to the named counts, together (a reader sees all of them or none)."""
        with self._lock:
            for name, n in counts.items():
                self._counts[name] += n

    def bill(self, resp: LLMResponse) -> None:
        """Count one reply the provider sent (and charged for), usable or not."""
        with self._lock:
            self._counts["billed_replies"] += 1
            for name in USAGE:
                self._counts[name] += int(getattr(resp, name))
            self._cost += resp.cost_usd
            self._counts["unpriced_calls"] += int(not resp.priced)
            self._counts["empty_replies"] += int(not (resp.text or "").strip())
            self._counts["truncated_replies"] += int(resp.finish_reason == "length")
            self._counts["client_stops"] += int(resp.stop_applied)

    def unseen(self, bound: float | None) -> None:
        """Count one try whose reply was never read, with the most it can have cost (None:
        no bound)."""
        with self._lock:
            self._counts["unseen_tries"] += 1
            if bound is None:
                self._counts["unseen_unbounded"] += 1
            else:
                self._unseen_bound += bound

    def snapshot(self) -> dict[str, Any]:
        """Every count (`COUNTS`, as ints), `cost_usd` and `unseen_bound_usd`."""
        with self._lock:
            out: dict[str, Any] = {name: int(self._counts[name]) for name in COUNTS}
            out["cost_usd"] = self._cost
            out["unseen_bound_usd"] = self._unseen_bound
        return out
