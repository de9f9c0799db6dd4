"""Reopening a run directory by its tail: the committed files are checked and repaired where
a crash can have changed them, at their end, without reading or rewriting what came before.

Every commit's journal (memrl.journal.commit) records where the commit's lines begin in
`episodes.jsonl` and `bank_updates.jsonl` (`at`), and it holds those lines' content (the
records, the bank-update line). The journal of the last commit is kept (`last_commit.json`),
so on start the end of each file is known exactly: its last commit's lines must sit at `at`.
`inspect` compares only that region (and what follows it):

- the lines are there and nothing follows: nothing to do;
- they are there and lines of uncommitted batches follow (an append cut by a crash before its
  checkpoint): the file is cut back to the end of the last commit (`cut`);
- the file ends inside them (the last commit's append was torn after its checkpoint): the
  commit's lines are written again from its journal (`restore`), as `repair_records` does;
- anything else (the region differs, a line after it claims a committed batch, the journal
  predates `at`): `None`, and the caller reads the whole file as before (memrl.journal.recovery),
  which repairs what it can and refuses the rest.

A resumed or relaunched run thus reads the end of its files, never their whole history, and
never rewrites committed lines.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

_MAX_TAIL = 256 << 20  # past the last commit, more than this is not a crash's leftover


def record_lines(records: Sequence[dict[str, Any]]) -> list[str]:
    """Episode records as their lines (without newlines), as commits append them."""
    return [json.dumps(r, ensure_ascii=False, sort_keys=True) for r in records]


def encoded(lines: Sequence[str]) -> bytes:
    return b"".join((line + "\n").encode("utf-8") for line in lines)


def size_of(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


@dataclass(frozen=True)
class TailFix:
    """What reopening does to one file (module doc)."""

    path: Path
    action: Literal["ok", "cut", "restore"]
    start: int
    lines: bytes

    def apply(self) -> None:
        if self.action == "ok":
            return
        with open(self.path, "rb+") as fh:
            if self.action == "cut":
                fh.truncate(self.start + len(self.lines))
            else:
                fh.truncate(self.start)
                fh.seek(self.start)
                fh.write(self.lines)
            fh.flush()
            os.fsync(fh.fileno())


def inspect(path: Path, start: int, lines: bytes, committed: Callable[[int, int], bool]) -> TailFix | None:
    """How to bring `path` back to its last commit, whose `lines` begin at byte `start`; None
    when its tail does not say (module doc)."""
    size = size_of(path)
    if size < start or size - start > len(lines) + _MAX_TAIL:
        return None
    if start and not path.exists():
        return None
    region = b""
    if path.exists():
        with open(path, "rb") as fh:
            if start:
                fh.seek(start - 1)
                if fh.read(1) != b"\n":
                    return None  # the commit does not begin on a line of its own
            fh.seek(start)
            region = fh.read()
    if len(region) >= len(lines):
        if region[:len(lines)] != lines:
            return None
        extra = region[len(lines):]
        if not extra:
            return TailFix(path, "ok", start, lines)
        complete = extra.split(b"\n")[:-1]  # a last piece without its newline is a torn line
        for raw in complete:
            try:
                row = json.loads(raw)
                if committed(int(row["epoch"]), int(row["batch"])):
                    return None  # a committed batch twice: for the full check to refuse
            except (ValueError, KeyError, TypeError):
                return None
        return TailFix(path, "cut", start, lines)
    if lines.startswith(region):
        return TailFix(path, "restore", start, lines)
    return None
