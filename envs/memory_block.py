"""The block of injected memories that text-prompt agents (ALFWorld, BigCodeBench, Lifelong
OS/DB) put before the task: one shared wording, so a memory reads the same in every env."""

from __future__ import annotations

from typing import Sequence

from memrl.records import RetrievedMemory

MEMORY_OPEN = "=== Past experiences (from memory; use them only where they fit this task) ==="
MEMORY_CLOSE = "=== End of past experiences ==="


def shorten(text: str, limit: int | None) -> str:
    """`text` stripped; if longer than `limit`, its two ends around a `[...]` line."""
    text = text.strip()
    if limit is None or len(text) <= limit:
        return text
    half = limit // 2
    return text[:half] + "\n[...]\n" + text[-half:]


def format_memories(memories: Sequence[RetrievedMemory], max_chars_each: int | None = None,
                    max_intent_chars: int | None = None) -> str:
    """The block of injected memories; empty string when there are none."""
    if not memories:
        return ""
    lines = [MEMORY_OPEN]
    for i, mem in enumerate(memories, 1):
        lines.append(f"--- Experience {i} (earlier task: {shorten(mem.intent, max_intent_chars)}) ---")
        lines.append(shorten(mem.experience, max_chars_each))
    lines.append(MEMORY_CLOSE)
    return "\n".join(lines)
