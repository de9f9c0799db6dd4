"""Code from a model's reply: a ```python block, or bare code (what a base model writes when it
continues the prompt's opened fence), checked to parse before anything runs."""

from __future__ import annotations

import re
from dataclasses import dataclass

# an opening fence (optional language tag) and its body up to a closing fence or the end
_BLOCK = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)(?:\n?```|\Z)", re.S)
_PY_TAGS = {"", "python", "py", "python3"}


@dataclass(frozen=True)
class Extracted:
    """The program to test and where it came from.

    source: "fenced" (a code block), "bare" (no block: the reply up to the first closing
    fence), "empty" (no code at all). `syntax_error` is set when the code does not parse.
    """

    code: str
    source: str
    syntax_error: str | None = None

    @property
    def ok(self) -> bool:
        return bool(self.code.strip()) and self.syntax_error is None


def _parse_error(code: str) -> str | None:
    try:
        compile(code, "<solution>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        return f"SyntaxError: {exc.msg} (line {exc.lineno})"
    except (ValueError, MemoryError, RecursionError) as exc:  # null bytes, absurd nesting
        return f"{type(exc).__name__}: {exc}"
    return None


def defines(code: str, name: str) -> bool:
    """True if `code` has a top-level `def name(` (sync or async)."""
    return re.search(rf"^(?:async\s+)?def\s+{re.escape(name)}\s*\(", code, re.M) is not None


def _blocks(text: str) -> list[str]:
    return [body for tag, body in _BLOCK.findall(text) if tag.lower() in _PY_TAGS and body.strip()]


def _choose(blocks: list[str], entry_point: str) -> str:
    """The last block that defines the entry point, else the longest block."""
    defining = [b for b in blocks if defines(b, entry_point)]
    return defining[-1] if defining else max(blocks, key=len)


def extract_code(reply: str, entry_point: str, prefix: str = "") -> Extracted:
    """The solution in `reply`.

    The prompt ends inside an opened ```python fence, so text before the first ``` that parses
    is a bare continuation; otherwise the code blocks are used. `prefix` (the function header of
    the complete split) is put in front of code that does not define `entry_point` itself.
    """
    text = (reply or "").replace("\r\n", "\n")
    head = text.split("```", 1)[0]
    blocks = _blocks(text[len(head):]) if "```" in text else []
    bare = _with_prefix(head, entry_point, prefix) if head.strip() else ""
    if bare and (_parse_error(bare) is None or not blocks):
        code, source = bare, "bare"
    elif blocks:
        code, source = _with_prefix(_choose(blocks, entry_point), entry_point, prefix), "fenced"
    else:
        return Extracted(code="", source="empty", syntax_error="the reply holds no code")
    return Extracted(code=code, source=source, syntax_error=_parse_error(code))


def _with_prefix(code: str, entry_point: str, prefix: str) -> str:
    code = code.strip("\n")
    if prefix and not defines(code, entry_point):
        code = prefix.rstrip("\n") + "\n" + code
    return code.rstrip() + "\n"
