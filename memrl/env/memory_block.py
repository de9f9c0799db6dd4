"""The block of injected memories that text-prompt agents (ALFWorld, BigCodeBench, Lifelong
OS/DB) put before the task: one shared wording, so a memory reads the same in every env.

Two layouts of one block: `format_memories` shows each memory's text as stored;
`format_memories_as_episodes` shows a memory that holds a trajectory in the episode's own
format (the task line, then the `> action` / observation lines), so that an earlier attempt
at the same task reads exactly like the current episode's history, and a model that continues
that history can copy from it (ALFWorld).

Both read a memory's parts from its record (`RetrievedMemory.parts`, memrl.core.memory_record),
never by taking its text apart.
"""

from __future__ import annotations

from typing import Callable, Sequence

from memrl.core.records import RetrievedMemory

MEMORY_OPEN = "=== Past experiences (from memory; use them only where they fit this task) ==="
MEMORY_CLOSE = "=== End of past experiences ==="


def shorten(text: str, limit: int | None) -> str:
    """`text` stripped; if longer than `limit`, its two ends around a `[...]` line."""
    text = text.strip()
    if limit is None or len(text) <= limit:
        return text
    half = limit // 2
    return text[:half] + "\n[...]\n" + text[-half:]


def own_task(mem: RetrievedMemory) -> str:
    """The task a memory was written for. `mem.intent` is the text of the key it is filed
    under, which is another task's when a near-duplicate joined that key
    (`memory.dedup_threshold`); the memory's own task is the one its record names
    (memrl.core.memory_record). A memory that names none: the key's text."""
    task = mem.parts().task
    return mem.intent if task is None else task.strip()


def format_memories(memories: Sequence[RetrievedMemory], max_chars_each: int | None = None,
                    max_intent_chars: int | None = None) -> str:
    """The block of injected memories, each under its own task (`own_task`); empty string
    when there are none."""
    if not memories:
        return ""
    lines = [MEMORY_OPEN]
    for i, mem in enumerate(memories, 1):
        lines.append(f"--- Experience {i} (earlier task: {shorten(own_task(mem), max_intent_chars)}) ---")
        lines.append(shorten(mem.experience, max_chars_each))
    lines.append(MEMORY_CLOSE)
    return "\n".join(lines)


def outcome_word(success: bool | None) -> str:
    return {True: "solved", False: "failed"}.get(success, "outcome not recorded")  # type: ignore[arg-type]


def format_memories_as_episodes(memories: Sequence[RetrievedMemory],
                                task_line: Callable[[str], str]) -> str:
    """The block of injected memories, each as an episode: its outcome in the heading, any
    notes (a plan or a reflection), then `task_line(own task)` and the trajectory exactly as the
    episode's own history is written. A memory without a trajectory: its task line, then its
    text as stored."""
    if not memories:
        return ""
    lines = [MEMORY_OPEN]
    for i, mem in enumerate(memories, 1):
        parts = mem.parts()
        task = own_task(mem)  # its own task, not the key's (a joined near-duplicate)
        trajectory = parts.trajectory.strip() if parts.actions else ""
        lines.append(f"--- Experience {i} ({outcome_word(mem.success)}) ---")
        if not trajectory:  # nothing to show as an episode: the task, then the text after it
            rest = parts.rest.strip()
            lines += [task_line(task), rest] if rest else [task_line(task)]
            continue
        notes = parts.notes.strip()
        if notes:  # a plan or a reflection first, so the trajectory follows its task line
            lines.append(notes)
        lines += [task_line(task), trajectory]
    lines.append(MEMORY_CLOSE)
    return "\n".join(lines)
