"""Every input a report names is used or refused (the report, `memrl report`, and the MemRL
page, `memrl view`, both read their runs through `admit`).

Refused by default, each with a message that names it (`Refused`, `memrl: ...`, exit 2):

- a path that does not exist, or that is neither a run directory nor a folder holding one
  (a mistyped `run_rga` is never dropped silently);
- a run that is not finished: its card's status is not `finished` (running, interrupted,
  failed, budget), it has no episode yet, or it holds fewer complete epochs than its
  `runner.epochs` planned. `include_unfinished=True` (`--include-unfinished`) reports it with
  what it completed, marked `[unfinished]` in every label (table rows, legends, titles);
- runs of one benchmark (and mode) played on different task lists (their cards' data
  fingerprints differ: another split, another `max_tasks`, changed data): their numbers are
  over different tasks. `mixed=True` (`--mixed`) reports them side by side, each group then
  named by its task list (`tasks=<fingerprint>`) and compared only with groups on the same
  list.

A run with no episode is never drawn, flag or not (there is nothing to draw); with the flag
it is named in the log. Runs of one benchmark that differ in other settings that change
results (model, embedder, env settings) are not refused: every label names those settings,
and the comparisons pair only groups that agree on them (memrl.report.grouping).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from memrl.core.rundir import RunDir

UNFINISHED = "unfinished"
FLAG_UNFINISHED = "--include-unfinished"
FLAG_MIXED = "--mixed"


class Refused(ValueError):
    """What the report refuses, every problem named (one per line)."""


@dataclass
class Admitted:
    """The run directories to read, and what to say about the inputs."""

    runs: list[RunDir]
    notes: list[str] = field(default_factory=list)
    empty: list[RunDir] = field(default_factory=list)  # runs with no episode yet (left out)


def _card(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def find_all(paths: Sequence[str | Path]) -> tuple[list[RunDir], list[RunDir], list[str]]:
    """(runs with episodes, runs without an episode yet, problems with the paths)."""
    problems: list[str] = []
    runs: list[RunDir] = []
    empty: set[Path] = set()
    for p in map(Path, paths):
        if not p.exists():
            problems.append(f"{p}: no such file or directory")
            continue
        found = RunDir.find([p])
        cards = ([p / RunDir.CARD] if (p / RunDir.CARD).is_file() else []) + \
            (list(p.rglob(RunDir.CARD)) if p.is_dir() else [])
        bare = {c.parent.resolve() for c in cards} - {rd.root for rd in found}
        if not found and not bare:
            problems.append(f"{p}: not a run directory ({RunDir.CARD} + {RunDir.EPISODES}), "
                            "and no run directory below it")
            continue
        runs += found
        empty |= bare
    seen: set[Path] = set()
    unique = [rd for rd in runs if not (rd.root in seen or seen.add(rd.root))]  # type: ignore[func-returns-value]
    return unique, [RunDir(p) for p in sorted(empty)], problems


def admit(paths: Sequence[str | Path], *, include_unfinished: bool = False,
          warn: Callable[[str], None] = print) -> Admitted:
    """The run directories under `paths`, or `Refused` naming every path that is not one and
    every run without an episode (module doc). Whether a run with episodes is finished and
    comparable needs its records: `check_runs`."""
    runs, empty, problems = find_all(paths)
    for rd in list(empty):
        card = _card(rd.card)
        if not isinstance(card.get("config"), dict):  # not a run's card (unreadable, or something else)
            warn(f"warning: {rd.card}: not a run card (no config); left out")
            empty.remove(rd)
            continue
        status = card.get("status") or "?"
        msg = f"{rd.root}: a run with no episode yet (status {status})"
        if include_unfinished:
            warn(f"warning: {msg}: nothing to report; left out")
        else:
            problems.append(f"{msg}; pass {FLAG_UNFINISHED} to report the others without it")
    if problems:
        raise Refused("\n  ".join(["cannot report these inputs:", *problems]))
    return Admitted(runs=runs, empty=empty)


def check_runs(runs: Sequence[Any], *, include_unfinished: bool = False, mixed: bool = False,
               warn: Callable[[str], None] = print) -> None:
    """Refuse (or, under the flags, mark) unfinished runs and runs on different task lists.
    `runs`: objects with `path`, `unfinished` (str | None), `mode`, `env`, `card` and a
    `marks` list (memrl.report.runs.Run, memrl.view.data.RunView)."""
    problems: list[str] = []
    for r in runs:
        why = r.unfinished
        if not why:
            continue
        if include_unfinished:
            if UNFINISHED not in r.marks:
                r.marks.append(UNFINISHED)
            warn(f"warning: {r.path}: not finished ({why}); reported with what it completed, "
                 "marked [unfinished]")
        else:
            problems.append(f"{r.path}: not finished ({why}); pass {FLAG_UNFINISHED} to report "
                            "it with what it completed, marked [unfinished]")
    families: dict[tuple[str, str], dict[str, list[Any]]] = {}
    for r in runs:
        fp = str(r.card.get("data_fingerprint") or "")
        families.setdefault((r.mode, r.env), {}).setdefault(fp, []).append(r)
    for (mode, env), by_fp in sorted(families.items()):
        known = {fp: rs for fp, rs in by_fp.items() if fp}
        if len(known) < 2:
            continue
        lists = "; ".join(f"{fp[:8]} ({_n_tasks(rs)} tasks): " + ", ".join(str(r.path) for r in rs)
                          for fp, rs in known.items())
        msg = f"{env} ({mode}) runs were played on {len(known)} different task lists: {lists}"
        if mixed:
            warn(f"warning: {msg}; reported side by side, each group named by its task list")
        else:
            problems.append(f"{msg}; their numbers are over different tasks (pass {FLAG_MIXED} to "
                            "report them side by side, each named by its task list)")
    if problems:
        raise Refused("\n  ".join(["cannot report these runs:", *problems]))


def _n_tasks(runs: Sequence[Any]) -> str:
    ns = sorted({int(r.card.get("n_tasks") or 0) for r in runs})
    return "/".join(map(str, ns))


def data_key(runs: Sequence[Any]) -> dict[int, str]:
    """id(run) -> its task list's short name, for runs of a (mode, env) family played on
    several task lists (none otherwise): the pseudo-key `tasks` of their groups."""
    out: dict[int, str] = {}
    fam: dict[tuple[str, str], set[str]] = {}
    for r in runs:
        fam.setdefault((r.mode, r.env), set()).add(str(r.card.get("data_fingerprint") or ""))
    for r in runs:
        fps = fam[(r.mode, r.env)] - {""}
        if len(fps) > 1:
            out[id(r)] = str(r.card.get("data_fingerprint") or "")[:8] or "?"
    return out
