"""Every source of randomness derives from the run seed through stable hashes (not Python's
salted `hash`), so a run is repeatable across processes and machines."""

from __future__ import annotations

import hashlib
from typing import Sequence, TypeVar

T = TypeVar("T")


def derive_seed(*parts: object) -> int:
    """A 31-bit seed from any parts, stable across processes."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def seeded_order(items: Sequence[T], seed: int) -> list[T]:
    """`items` permuted by `seed` (`runner.task_order=seeded`): each item ranked by a stable
    hash of (seed, "order", its place), so a seed gives one order on every machine and the
    same order every time."""
    return [items[i] for i in sorted(range(len(items)), key=lambda i: (derive_seed(seed, "order", i), i))]
