"""Every source of randomness derives from the run seed through stable hashes (not Python's
salted `hash`), so a run is repeatable across processes and machines."""

from __future__ import annotations

import hashlib



def derive_seed(*parts: object) -> int:
    """A 31-bit seed from any parts, stable across processes."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF
