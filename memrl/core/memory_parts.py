"""How a stored memory is read into its parts (`parts_of`): from its record
(memrl.core.memory_record) when it has one that fits its text, else as old text.

The reader of old text (`legacy_parts`) reads the parts of a text that has no record: a bank
written before memories were records, an export, or a method that stores free text. It is
the one place that reads a stored text apart, and it finds the parts the way the displays
found them before records:

- the task: after a first ``Task: `` header (after ``TASK REFLECTION:`` in the official
  failure layout), up to the official layout's next section marker, else up to the memrl
  layout's ``Outcome:`` line, else up to a blank line;
- the trajectory: in the official layout, after its section marker (the last one); in any
  other text, from the first line that starts with ``> `` (the notes are the lines between
  the header and it, without ``Task:`` / ``Outcome:`` lines and without the heading line that
  announces the trajectory);
- the note: the official section's text, else what follows a ``Reflection:`` line (any case);
- a failure's reflection section ends where ``failed approach:`` (any case) or the memrl
  writer's ``Failed attempt:`` line starts.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from memrl.core.memory_record import (ACTION_PREFIX, FAILED_MARK, REFLECTION_HEAD, SCRIPT_MARK, TASK_HEAD,
                                      TRAJECTORY_MARK, WRONG_MARK, MemoryParts, MemoryRecord,
                                      parts_from)

_REFLECTION = re.compile(r"(?is)(?:^|\n)reflection\s*:\s*(.*)$")
_HEADER_KEYS = ("Task:", "Outcome:")
_OUTCOME_LINE = "\nOutcome: "
FAILED_APPROACH = "failed approach:"  # the official failure's section, matched in any case
MEMRL_FAILED_ATTEMPT = "\nFailed attempt:"  # the memrl writer's failure heading


def parts_of(text: str, record: Mapping[str, Any] | MemoryRecord | None) -> MemoryParts:
    """The parts of a stored text: from its record when it has one that fits the text, else
    read from the text as old text (`legacy_parts`, module doc)."""
    if isinstance(record, Mapping):
        try:
            record = MemoryRecord.from_dict(record)
        except (KeyError, TypeError, ValueError, IndexError):
            record = None
    if record is None or record.length != len(text):
        return legacy_parts(text)
    return parts_from(text, record)


def legacy_parts(text: str) -> MemoryParts:
    """The parts of an old text (module doc)."""
    task = own_task(text)
    rest = _without_task_header(text, task) if task is not None else text
    notes, trajectory = split_trajectory(rest)
    official = _official_sections(text)
    layout = "official" if official is not None else ("memrl" if task is not None else "text")
    note, from_note = "", None
    if official is not None:
        note, trajectory = official
    elif (m := _REFLECTION.search(text)) is not None:
        from_note = m.group(1)
        note = from_note
    before = _cut_failed_attempt(text)
    solved = True if official is not None and SCRIPT_MARK in text else None
    if official is not None and solved is None:
        solved = False
    elif task is not None:
        solved = {"solved": True, "failed": False}.get(_outcome_word(text))
    return MemoryParts(text=text, layout=layout, solved=solved,
                       note_kind="reflection" if before is not None else "",
                       actions=trajectory.startswith(ACTION_PREFIX), task=task, notes=notes if trajectory else "",
                       note=note, from_note=from_note, trajectory=trajectory,
                       rest=rest, before_trajectory=text if before is None else before)


def own_task(text: str) -> str | None:
    """The task of an old text's ``Task:`` header (module doc); None without one."""
    body = text.lstrip()
    if body.startswith(REFLECTION_HEAD):
        body = body[len(REFLECTION_HEAD):]
    if not body.startswith(TASK_HEAD):
        return None
    body = body[len(TASK_HEAD):]
    for ends in ((SCRIPT_MARK, WRONG_MARK), (_OUTCOME_LINE,), ("\n\n",)):
        cuts = [body.index(end) for end in ends if end in body]
        if cuts:
            return body[: min(cuts)].strip()
    return body.strip()


def _without_task_header(text: str, task: str) -> str:
    stripped = text.lstrip()
    if stripped.startswith(REFLECTION_HEAD):
        stripped = stripped[len(REFLECTION_HEAD):]
    head = f"{TASK_HEAD}{task}"
    return stripped[len(head):].lstrip("\n") if task and stripped.startswith(head) else text


def split_trajectory(text: str) -> tuple[str, str]:
    """(notes, trajectory): the trajectory from the first line that starts with ``> ``; the
    notes the lines before it without header lines and without the heading that announces
    the trajectory. No such line: (the text stripped, "")."""
    lines = text.strip().splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith(ACTION_PREFIX)), None)
    if start is None:
        return text.strip(), ""
    head = [ln for ln in lines[:start] if ln.strip() and not ln.startswith(_HEADER_KEYS)]
    if head and head[-1].rstrip().endswith(":"):
        head = head[:-1]
    return "\n".join(head).strip(), "\n".join(lines[start:]).strip()


def _official_sections(text: str) -> tuple[str, str] | None:
    """(note, trajectory) of an official-layout text, None for any other."""
    mark = TRAJECTORY_MARK if TRAJECTORY_MARK in text else FAILED_MARK if FAILED_MARK in text else None
    if mark is None:
        return None
    header, trajectory = text.split(mark, 1)
    for key in (SCRIPT_MARK.strip(), WRONG_MARK.strip()):
        if key in header:
            return header.split(key, 1)[1].strip(), trajectory
    return None


def _cut_failed_attempt(text: str) -> str | None:
    cuts = [i for i in (text.lower().find(FAILED_APPROACH), text.find(MEMRL_FAILED_ATTEMPT)) if i != -1]
    return text[: min(cuts)] if cuts else None


def _outcome_word(text: str) -> str:
    i = text.find(_OUTCOME_LINE)
    if i < 0:
        return ""
    line = text[i + len(_OUTCOME_LINE):].split("\n", 1)[0]
    return line.strip()
