"""Checks of a run directory's committed state before a run continues from it.

The commit protocol (memrl.journal.commit) leaves, after each batch, a checkpoint naming the
last committed batch and how many entries the memory bank then held, and the batch itself
in `state/last_commit.json` (the journal, kept once the commit is done). Before a run goes
on, these are checked against what the directory holds:

- state files that do not parse name the file and what to do (`read_state`);
- the episode records must hold every episode of every committed batch, once. A torn or
  cut last batch is restored from its copy (`repair_records`); anything else that is
  missing or doubled (an edited file, two processes that wrote one run) is refused;
- the bank must hold as many entries as the committed batches left (`check_bank`): a bank
  that was deleted or replaced would otherwise be recreated empty and the run would go on
  learning from nothing.

A refusal (`memrl.core.stops.RunRefused`) names both sides and what to do; nothing is changed.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from memrl.core.records import iter_jsonl
from memrl.core.rundir import RunDir
from memrl.core.stops import RunRefused

log = logging.getLogger(__name__)

NEW_DIR = "start the run again in a new directory (hydra.run.dir=...)"
CHECKPOINT_FIX = ("it is written atomically, so something outside memrl damaged it, and without "
                  "it the run cannot tell which batches are committed: restore it from a backup, "
                  f"or {NEW_DIR}")
JOURNAL_FIX = ("it holds the batch that was being committed when the run stopped: delete it to "
               "replay that batch (memrl then refuses if the bank already holds part of it), "
               f"or {NEW_DIR}")
LAST_COMMIT_FIX = ("it is a copy of the last committed batch, read only to repair a damaged "
                   f"{RunDir.EPISODES}: delete it if {RunDir.EPISODES} is intact")
LAST_COMMIT_PATH = f"{RunDir.STATE}/{RunDir.LAST_COMMIT}"


def read_state(path: Path, what: str, fix: str) -> dict[str, Any] | None:
    """A JSON state file (None when absent); a file that does not parse is refused."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise RunRefused(f"{what} {path} is corrupt ({type(exc).__name__}: {exc}); {fix}") from exc
    except OSError as exc:
        raise RunRefused(f"cannot read {what} {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise RunRefused(f"{what} {path} is corrupt (not a JSON object); {fix}")
    return data


def committed_cells(after: Any, batches: Sequence[Sequence[Any]], epochs: int) -> dict[tuple[int, int], list[str]]:
    """(epoch, batch) -> task ids, for every batch `after(epoch, batch)` says is committed."""
    out: dict[tuple[int, int], list[str]] = {}
    for epoch in range(1, epochs + 1):
        for b, batch in enumerate(batches):
            if after(epoch, b):
                out[(epoch, b)] = [t.task_id for t in batch]
    return out


def async_cells(records: Sequence[Mapping[str, Any]], copy: Mapping[str, Any] | None,
                last: tuple[int, int] | None, n_tasks: int) -> dict[tuple[int, int], list[str]]:
    """`committed_cells` for an async run (runner.schedule=async), whose commits are one
    episode each, numbered within the epoch in completion order: positions 0..n_tasks-1 of
    every epoch before the checkpoint's, 0..its last position in its epoch. The task at a
    position is the one its record names (the last commit's copy for the last position);
    a position nothing names is reported missing by `repair_records`. A task committed at
    two positions of one epoch is refused here (two writers, or an edited file)."""
    if last is None:
        return {}
    named: dict[tuple[int, int], str] = {}
    for r in records:
        named.setdefault((int(r["epoch"]), int(r["batch"])), str(r["task_id"]))
    if copy is not None and copy.get("records"):
        named.setdefault((int(copy["epoch"]), int(copy["batch"])), str(copy["records"][0]["task_id"]))
    out: dict[tuple[int, int], list[str]] = {}
    last_epoch, last_pos = last
    for epoch in range(1, last_epoch + 1):
        size = n_tasks if epoch < last_epoch else last_pos + 1
        seen: dict[str, int] = {}
        for pos in range(size):
            task = named.get((epoch, pos), f"<commit {pos}>")
            if task in seen:
                raise RunRefused(
                    f"the episode records commit task {task} twice in epoch {epoch} (commits "
                    f"{seen[task]} and {pos}): two processes wrote this run directory, or the "
                    f"file was edited; {NEW_DIR}")
            seen[task] = pos
            out[(epoch, pos)] = [task]
    return out


def _shown(cells: Iterable[tuple[int, int, str]], n: int = 6) -> str:
    cells = sorted(cells)
    text = ", ".join(f"{t}@epoch{e}/batch{b}" for e, b, t in cells[:n])
    return text + (f" and {len(cells) - n} more" if len(cells) > n else "")


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every record of an episodes file; a torn last line is left out (see iter_jsonl), a
    line that does not parse elsewhere is refused."""
    try:
        return list(iter_jsonl(path))
    except ValueError as exc:
        raise RunRefused(f"{exc}: the episode records are damaged in the middle of the file, "
                         f"which no crash does; restore {path.name} from a backup, or {NEW_DIR}") from exc


def repair_records(path: Path, records: list[dict[str, Any]], cells: Mapping[tuple[int, int], list[str]],
                   last: tuple[int, int] | None, copy: Mapping[str, Any] | None) -> tuple[list[dict[str, Any]], int]:
    """The committed records to keep: `records` of committed cells only, with the last
    committed batch (`last`) restored from its `copy` (its journal) if some of it is
    missing. Returns (records, how many were restored); anything else missing or doubled is
    refused."""
    keep = [r for r in records if (int(r["epoch"]), int(r["batch"])) in cells]
    seen = Counter((int(r["epoch"]), int(r["batch"]), str(r["task_id"])) for r in keep)
    expected = {(e, b, t) for (e, b), ids in cells.items() for t in ids}
    doubled = [c for c, n in seen.items() if n > 1]
    strange = [c for c in seen if c not in expected]
    if doubled or strange:
        raise RunRefused(
            f"{path} holds episodes no single run writes ({_shown(doubled or strange)}"
            f"{' recorded twice' if doubled else ' not in any committed batch'}): two processes "
            f"wrote this run directory, or the file was edited; {NEW_DIR}")
    missing = expected - set(seen)
    if not missing:
        return keep, 0
    if last is not None and copy is not None and (int(copy.get("epoch", -1)), int(copy.get("batch", -1))) == last \
            and all((e, b) == last for e, b, _ in missing):
        restored = list(copy["records"])
        keep = [r for r in keep if (int(r["epoch"]), int(r["batch"])) != last] + restored
        log.warning("%s lacked %d record(s) of the last committed batch (epoch %d, batch %d): "
                    "restored from its journal", path, len(missing), *last)
        return keep, len(missing)
    raise RunRefused(
        f"{path} lacks the records of {len(missing)} committed episode(s) ({_shown(missing)}), "
        f"and only the last committed batch can be restored (from {LAST_COMMIT_PATH}): the "
        f"file was cut or edited; restore it from a backup, or {NEW_DIR}")


def check_bank(count: int | None, expected: int | None, *, where: Path, last: tuple[int, int],
               low: int = 0, high: int = 0) -> None:
    """The bank must hold `expected` entries (what the last commit left), give or take a
    journaled update that may be partly applied (`low` entries fewer, `high` more)."""
    if count is None or expected is None:
        return
    through = f"the committed batches (through epoch {last[0]}, batch {last[1]})"
    if count < expected - low:
        raise RunRefused(
            f"the memory bank ({where}) holds {count} entries, but {through} left {expected}: "
            "it was deleted or replaced, and continuing would learn from a bank that lost its "
            f"memories; restore the bank directory from a backup, or {NEW_DIR}")
    if count > expected + high:
        raise RunRefused(
            f"the memory bank ({where}) holds {count} entries, but {through} left {expected}: it "
            "was written after the last commit (by another process, or by a batch whose journal "
            f"is gone); restore the bank directory from a backup, or {NEW_DIR}")
