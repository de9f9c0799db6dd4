"""Text that can always be written: the one place where strings from outside the harness (a
model's reply, a sandbox's output, an exception's message) are made safe before they reach
the journal, the records, the caches, the bank or the log.

Three kinds of text would break a write or a reader:

- a lone surrogate (U+D800..U+DFFF), which no UTF-8 encoder writes (Python makes them from
  undecodable bytes with `surrogateescape`, and an exception message can carry one): it
  becomes its escape, `\\udcff`;
- invalid UTF-8 in bytes: decoded with the same escapes (`\\xff`);
- control characters other than tab, newline and carriage return (NUL, ESC and its terminal
  sequences, DEL): they become `\\x1b` and the like, so a log or a terminal shows them
  instead of obeying them.

Everything else, all other Unicode included, is left as it is, so text that was safe reads
the same. `safe` walks dicts, lists, tuples and dataclasses (returning copies).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

_UNSAFE = re.compile(r"[\ud800-\udfff\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group(0))
    return f"\\u{code:04x}" if code > 0xFF else f"\\x{code:02x}"


def safe_str(text: str) -> str:
    """`text` with lone surrogates and control characters escaped (module doc)."""
    return text if _UNSAFE.search(text) is None else _UNSAFE.sub(_escape, text)


def safe_bytes(data: bytes) -> str:
    """Bytes as text: UTF-8 where they are, escapes where they are not."""
    return safe_str(data.decode("utf-8", "backslashreplace"))


def safe(obj: Any) -> Any:
    """`obj` with every string made safe: strings, bytes, dicts (keys too), lists, tuples and
    dataclass instances (copied field by field); anything else as it is."""
    if isinstance(obj, str):
        return safe_str(obj)
    if isinstance(obj, (bytes, bytearray)):
        return safe_bytes(bytes(obj))
    if isinstance(obj, dict):
        return {safe(k): safe(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [safe(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(safe(v) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: safe(getattr(obj, f.name))
                                           for f in dataclasses.fields(obj) if f.init})
    return obj
