"""The block of injected memories that text-prompt agents (ALFWorld, BigCodeBench, Lifelong
OS/DB) put before the task: one shared wording, so a memory reads the same in every env.

Two layouts of one block: `format_memories` shows each memory's text as stored;
`format_memories_as_episodes` shows a memory that holds a trajectory in the episode's own
format (the task line, then the `> action` / observation lines), so that an earlier attempt
at the same task reads exactly like the current episode's history, and a model that continues
that history can copy from it (ALFWorld).
"""

from __future__ import annotations

from typing import Callable, Sequence

from memrl.core.records import RetrievedMemory
from memrl.memory.writer import REFLECTION_HEAD

MEMORY_OPEN = "=== Past experiences (from memory; use them only where they fit this task) ==="
MEMORY_CLOSE = "=== End of past experiences ==="


def shorten(text: str, limit: int | None) -> str:
    """`text` stripped; if longer than `limit`, its two ends around a `[...]` line."""
    text = text.strip()
    if limit is None or len(text) <= limit:
        return text
    half = limit // 2
    return text[:half] + "\n[...]\n" + text[-half:]


_OUTCOME_LINE = "\nOutcome: "  # what follows the task in memrl's layout (memrl.memory.writer)


def own_task(mem: RetrievedMemory) -> str:
    """The task a memory was written for. `mem.intent` is the text of the key it is filed
    under, which is another task's when a near-duplicate joined that key
    (`memory.dedup_threshold`); the memory's own task is the `Task: ...` header its writer put
    first (memrl's layout: up to the `Outcome:` line; the official layout: up to the first
    blank line). A memory without that header: the key's text."""
    text = mem.experience.lstrip()
    if text.startswith(REFLECTION_HEAD):
        text = text[len(REFLECTION_HEAD):]
    if not text.startswith("Task: "):
        return mem.intent
    body = text[len("Task: "):]
    for end in (_OUTCOME_LINE, "\n\n"):
        if end in body:
            return body[: body.index(end)].strip()
    return body.strip()


def _without_task_header(experience: str, task: str) -> str:
    """The experience without its leading `Task: <task>` header (which may span lines)."""
    text = experience.lstrip()
    head = f"Task: {task}"
    return text[len(head):].lstrip("\n") if task and text.startswith(head) else experience


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


ACTION_PREFIX = "> "  # how a trajectory line with an action starts (memrl.memory.writer)
_HEADER_KEYS = ("Task:", "Outcome:")


def split_trajectory(experience: str) -> tuple[str, str]:
    """(notes, trajectory) of a stored experience.

    The trajectory is everything from the first line that starts with `> ` (the text of
    `memrl.memory.writer.format_trajectory`); the notes are the lines before it without the
    `Task:` / `Outcome:` header lines and without the line that announces the trajectory
    (e.g. `Successful trajectory:`). No `> ` line: ("", "") when the text is empty, else the
    whole text as notes.
    """
    lines = experience.strip().splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith(ACTION_PREFIX)), None)
    if start is None:
        return experience.strip(), ""
    head = [ln for ln in lines[:start] if ln.strip() and not ln.startswith(_HEADER_KEYS)]
    if head and head[-1].rstrip().endswith(":"):
        head = head[:-1]
    return "\n".join(head).strip(), "\n".join(lines[start:]).strip()


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
        task = own_task(mem)  # its own task, not the key's (a joined near-duplicate)
        notes, trajectory = split_trajectory(_without_task_header(mem.experience, task))
        lines.append(f"--- Experience {i} ({outcome_word(mem.success)}) ---")
        if not trajectory:  # nothing to show as an episode: the task, then the text
            lines += [task_line(task), notes] if notes else [task_line(task)]
            continue
        if notes:  # a plan or a reflection first, so the trajectory follows its task line
            lines.append(notes)
        lines += [task_line(task), trajectory]
    lines.append(MEMORY_CLOSE)
    return "\n".join(lines)
