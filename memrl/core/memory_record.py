"""A stored memory as a record: its parts (task, outcome, notes, trajectory) as fields, so
that a display (memrl.env.displays) is a function of the fields and never reads a stored text
apart.

A memory's text is written once, by a *stored layout* (`memrl_text`, `official_success`,
`official_failure`), which returns the text together with its `MemoryRecord`: where each
part lies in that text (character spans), the outcome, the kind of note and the form of the
trajectory. The record is small (a few numbers) and lives in the entry's `extra["record"]`,
so a memory's text is still stored once (memrl.memory.textstore) and everything that
carries an entry (the bank, the commit journal, exports) carries its record.

A display reads a memory's parts with `memrl.core.memory_parts.parts_of`: from its record,
or, for a text that has none (a bank written before records, an export, a method that stores
free text), with the reader of old text there.

The two stored layouts:

- `memrl`: ``Task: <task>`` / ``Outcome: <solved|failed>`` / notes (``Plan:`` /
  ``1. ...``, ``Reflection: ...``, ``Procedure:`` ...) / a heading line
  (``Successful trajectory:``) / the trajectory as ``> action`` / observation lines;
  every part optional but the task.
- `official` (MemTensor/MemRL @ 7c3beba, service/updater.py): ``Task: <task>`` + SCRIPT_MARK
  + script + TRAJECTORY_MARK + trajectory for a success; REFLECTION_HEAD + ``Task: <task>`` +
  WRONG_MARK + reflection + FAILED_MARK + trajectory + newline for a failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

# the official stored layout's section markers (the official displays' sections)
REFLECTION_HEAD = "TASK REFLECTION:\n"
SCRIPT_MARK = "\n\nSCRIPT:\n"
TRAJECTORY_MARK = "\n\nTRAJECTORY:\n"
WRONG_MARK = "\n\nWhat went wrong:\n"
FAILED_MARK = "\n\nFailed approach:\n"
TASK_HEAD = "Task: "
OUTCOME_HEAD = "Outcome: "
ACTION_PREFIX = "> "  # how a transcript line with an action starts (memrl.memory.writer)
OUTCOME_WORDS = {True: "solved", False: "failed"}

Span = tuple[int, int]
_SPANS = ("task", "notes", "note", "trajectory")




@dataclass(frozen=True)
class MemoryRecord:
    """Where a memory's parts lie in its text, and what they are.

    - `layout`: "memrl", "official" or "text" (no parts known: the text as a whole);
    - `length`: the length of the text it describes (a record is trusted only on that text);
    - `solved`: the outcome written into the text (None: none written);
    - `note_kind`: "plan", "script", "reflection", "procedure", "notes" or "" (none);
    - `actions`: the trajectory is a ``> action`` transcript (False: the env's own text);
    - spans (start, end) into the text, None when absent: `task` (the task as written),
      `notes` (the notes section as stored, its labels included), `note` (the model's note
      alone: the plan, script or reflection), `trajectory`;
    - `rest`: where the text after the task header starts; `section`: where the trajectory's
      section starts (its heading line or marker).
    """

    layout: str
    length: int
    solved: bool | None = None
    note_kind: str = ""
    actions: bool = False
    task: Span | None = None
    notes: Span | None = None
    note: Span | None = None
    trajectory: Span | None = None
    rest: int = 0
    section: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"layout": self.layout, "n": self.length, "rest": self.rest}
        if self.solved is not None:
            d["solved"] = self.solved
        if self.note_kind:
            d["note_kind"] = self.note_kind
        if self.actions:
            d["actions"] = True
        if self.section is not None:
            d["section"] = self.section
        for name in _SPANS:
            span = getattr(self, name)
            if span is not None:
                d[name] = [span[0], span[1]]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "MemoryRecord":
        spans = {name: (int(d[name][0]), int(d[name][1])) for name in _SPANS if d.get(name) is not None}
        section = d.get("section")
        return cls(layout=str(d["layout"]), length=int(d["n"]), solved=d.get("solved"),
                   note_kind=str(d.get("note_kind", "")), actions=bool(d.get("actions", False)),
                   rest=int(d.get("rest", 0)), section=None if section is None else int(section), **spans)


@dataclass(frozen=True)
class MemoryParts:
    """A memory's parts as text: what displays read (`parts_of`)."""

    text: str
    layout: str = "text"
    solved: bool | None = None
    note_kind: str = ""
    actions: bool = False
    task: str | None = None  # the task as its writer wrote it; None: the text names none
    notes: str = ""  # the notes section as stored (labels included)
    note: str = ""  # the model's note alone (plan, script, reflection)
    from_note: str | None = None  # the text from a reflection's start to the end (None: none)
    trajectory: str = ""
    rest: str = ""  # the text after its task header (the whole text without one)
    before_trajectory: str = ""  # the text up to the trajectory's section (all of it without one)


def parts_from(text: str, r: MemoryRecord) -> MemoryParts:
    def cut(span: Span | None) -> str | None:
        return None if span is None else text[span[0]:span[1]]

    return MemoryParts(text=text, layout=r.layout, solved=r.solved, note_kind=r.note_kind, actions=r.actions,
                       task=cut(r.task), notes=cut(r.notes) or "", note=cut(r.note) or "",
                       from_note=text[r.note[0]:] if r.note is not None and r.note_kind == "reflection" else None,
                       trajectory=cut(r.trajectory) or "", rest=text[r.rest:],
                       before_trajectory=text if r.section is None else text[:r.section])


class _Builder:
    """A text built piece by piece, with the spans of the named pieces."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.size = 0
        self.spans: dict[str, Span] = {}

    def add(self, text: str, name: str | None = None) -> "_Builder":
        if name is not None:
            self.spans[name] = (self.size, self.size + len(text))
        self.pieces.append(text)
        self.size += len(text)
        return self

    def text(self) -> str:
        return "".join(self.pieces)


def memrl_text(task: str, *, solved: bool | None = None, notes: str = "", note: str | None = None,
               note_kind: str = "", heading: str = "", trajectory: str = "",
               actions: bool = True) -> tuple[str, MemoryRecord]:
    """The `memrl` layout (module doc): the lines ``Task: <task>``, ``Outcome: ...`` (when
    `solved` is not None), `notes` (when not empty; `note`, the model's part, ends it), and
    `heading` then `trajectory` (when `trajectory` is not empty), joined by newlines. Returns
    the text and its record."""
    b = _Builder().add(TASK_HEAD).add(task, "task")
    rest = b.size
    if solved is not None:
        b.add("\n" + OUTCOME_HEAD + OUTCOME_WORDS[solved])
    if notes:
        b.add("\n").add(notes, "notes")
        if note is not None:
            if not notes.endswith(note):
                raise ValueError("memrl_text: the note must end the notes")
            b.spans["note"] = (b.size - len(note), b.size)
    section = None
    if trajectory:
        section = b.size
        b.add("\n" + heading + "\n" if heading else "\n").add(trajectory, "trajectory")
    text = b.text()
    return text, MemoryRecord(layout="memrl", length=len(text), solved=solved, note_kind=note_kind,
                              actions=actions and bool(trajectory), rest=rest + 1 if len(text) > rest else rest,
                              section=section, **b.spans)


def official_text(task: str, note: str, trajectory: str, *, solved: bool, actions: bool) -> tuple[str, MemoryRecord]:
    """The `official` layout (module doc): a success's script or a failure's reflection."""
    head, note_mark, traj_mark, tail = ("", SCRIPT_MARK, TRAJECTORY_MARK, "") if solved else \
        (REFLECTION_HEAD, WRONG_MARK, FAILED_MARK, "\n")
    b = _Builder().add(head).add(TASK_HEAD).add(task, "task")
    rest = b.size
    b.add(note_mark).add(note, "note")
    section = b.size
    b.add(traj_mark).add(trajectory, "trajectory").add(tail)
    b.spans["notes"] = (rest + 2, b.spans["note"][1])  # the section header ("SCRIPT:") and the note
    text = b.text()
    return text, MemoryRecord(layout="official", length=len(text), solved=solved,
                              note_kind="script" if solved else "reflection", actions=actions,
                              rest=rest, section=section, **b.spans)
