"""What the provider emulation (memrl.testing.provider) counts and bills: its token count (4
characters a token, a prompt at least 1), the prompt as it counts and caches it, automatic
prefix caching, and the ledger of what was billed.

The ledger keeps, per model and in total: `requests` = `replies` (billed: HTTP 200, or a reply
the provider made and never delivered) + `refused` (4xx, rate limits included) + `errors`
(5xx). `unseen_replies` / `unseen_tokens` / `unseen_usd` are the part of `replies` / prompt
and completion tokens / `usd` the client could never read: a 200 whose body was cut (the
fault server's `truncated_json`) and a hang (`hang`: the emulation bills the reply it made,
as a provider that finished the work would, and the client gets a gateway timeout instead).
So what a client that counts every reply it read should record is `usd - unseen_usd`.
"""

from __future__ import annotations

import hashlib
import math
import threading
from typing import Any, Mapping, Sequence

from memrl.testing.replies import text_of

CHARS_PER_TOKEN = 4
CACHE_BLOCK = 128  # prompt caching works in blocks of this many tokens


def prompt_tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def output_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def serialize(messages: Sequence[Mapping[str, Any]]) -> str:
    """The prompt as the emulation counts and caches it: the messages in order, role and content."""
    return "".join(f"<|{m.get('role', 'user')}|>\n{text_of(m.get('content'))}\n" for m in messages)


def spread(lo: int, hi: int, u: float, log: bool) -> int:
    """A point between lo and hi for u in [0, 1): log-uniform (uniform when lo is 0)."""
    if log and lo > 0:
        return int(round(lo * (hi / lo) ** u))
    return int(round(lo + (hi - lo) * u))


class PromptCache:
    """Automatic prefix caching: per model, hashes of every prompt's prefix at each 128-token
    boundary (prompts of at least the model's minimum only)."""

    def __init__(self) -> None:
        self._seen: dict[str, set[bytes]] = {}
        self._lock = threading.Lock()

    def cached_tokens(self, model: str, prompt: str, min_tokens: int) -> int:
        """The cached part of this prompt (0 below the minimum), and remember its prefixes."""
        if prompt_tokens(prompt) < min_tokens:
            return 0
        block = CACHE_BLOCK * CHARS_PER_TOKEN
        h, digests = hashlib.blake2b(digest_size=16), []
        for k in range(len(prompt) // block):
            h.update(prompt[k * block:(k + 1) * block].encode("utf-8", "surrogatepass"))
            digests.append(h.copy().digest())
        with self._lock:
            seen = self._seen.setdefault(model, set())
            hit = next((k for k, d in enumerate(digests) if d not in seen), len(digests))
            seen.update(digests)
        cached = hit * CACHE_BLOCK
        return cached if cached >= min_tokens else 0

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()


LEDGER_KEYS = ("requests", "replies", "refused", "errors", "prompt_tokens", "cached_tokens",
               "completion_tokens", "reasoning_tokens", "empty_replies", "cut_replies", "unseen_replies",
               "unseen_tokens")


class Ledger:
    """What the emulated provider billed, per model and in total (module doc)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by: dict[str, dict[str, float]] = {}

    def _row(self, model: str) -> dict[str, float]:
        return self._by.setdefault(model, {**{k: 0 for k in LEDGER_KEYS}, "usd": 0.0, "unseen_usd": 0.0})

    def bill(self, model: str, *, prompt: int, cached: int = 0, completion: int = 0, reasoning: int = 0,
             empty: bool = False, cut: bool = False, usd: float, delivered: bool = True) -> None:
        """One billed reply; `delivered` false: the client never read it (module doc)."""
        with self._lock:
            row = self._row(model)
            for k, v in (("requests", 1), ("replies", 1), ("prompt_tokens", prompt), ("cached_tokens", cached),
                         ("completion_tokens", completion), ("reasoning_tokens", reasoning),
                         ("empty_replies", int(empty)), ("cut_replies", int(cut)), ("usd", usd),
                         ("unseen_replies", int(not delivered)),
                         ("unseen_tokens", 0 if delivered else prompt + completion),
                         ("unseen_usd", 0.0 if delivered else usd)):
                row[k] += v

    def unbilled(self, model: str, status: int) -> None:
        with self._lock:
            row = self._row(model)
            row["requests"] += 1
            row["refused" if 400 <= status < 500 else "errors"] += 1

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            by = {m: dict(row) for m, row in sorted(self._by.items())}
        total: dict[str, Any] = {k: sum(int(r[k]) for r in by.values()) for k in LEDGER_KEYS}
        total["usd"] = sum(r["usd"] for r in by.values())
        total["unseen_usd"] = sum(r["unseen_usd"] for r in by.values())
        return {**total, "by_model": by}

    def reset(self) -> None:
        with self._lock:
            self._by.clear()
