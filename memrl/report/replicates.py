"""Replicates are checked, not assumed: two runs whose episodes are identical are one
replicate, whatever their seeds say.

At temperature 0 a seed often changes nothing (docs/reading-results.md, "What a seed
changes"): the second seed's run asks the same requests and the response cache answers them,
or the model answers them alike, and the run is a copy of the first. Counted as two
independent seeds, such copies draw zero-width intervals and multiply McNemar's discordant
pairs. So the report and the MemRL page compare runs episode by episode first:

- per (task, epoch) cell, an `Episode` digest: the outcome (success, outcome, steps, reward),
  the memories injected (id and Q), the memory written, the transcript (actions and
  observations) and the model calls' cache keys;
- two runs are copies when they hold the same cells and either every cell made the same
  model requests (the same cache keys, so the same answers) with the same outcome
  (`SAME_REQUESTS`), or every cell's outcome, memories and recorded transcript are the same
  (`SAME_EPISODES`; only when transcripts were recorded: outcomes alone are not evidence).

`distinct` keeps the first run of each set of copies (by seed) and names the others; the
report computes intervals and tests over the kept runs only and says which were dropped.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Callable, Generic, Iterable, Sequence, TypeVar

from memrl.core.records import EpisodeRecord

SAME_REQUESTS = "the same model requests (cache keys) and outcomes in every episode"
SAME_EPISODES = "identical episodes (outcomes, memories, transcripts) in every (task, epoch)"

Cell = tuple[str, int]
T = TypeVar("T")


def _hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Episodes:
    """The digest of a run's episodes, per (task id, epoch) cell (several records of a cell,
    e.g. Pass@k attempts, in their order)."""

    outcome: dict[Cell, str]
    transcript: dict[Cell, str | None]  # None: no transcript recorded
    calls: dict[Cell, tuple[str, ...]]

    @classmethod
    def of(cls, records: Iterable[EpisodeRecord]) -> "Episodes":
        outcome: dict[Cell, list[Any]] = {}
        transcript: dict[Cell, list[Any]] = {}
        calls: dict[Cell, list[str]] = {}
        for r in records:
            cell = (str(r.task_id), int(r.epoch))
            injected = [(str(m.get("id")), None if m.get("q") is None else round(float(m["q"]), 9))
                        for m in r.injected or [] if isinstance(m, dict)]
            outcome.setdefault(cell, []).append(
                [bool(r.success), r.outcome, int(r.steps), float(r.reward), injected, r.written])
            transcript.setdefault(cell, []).append(
                [[s.get("action"), s.get("observation")] for s in r.transcript or [] if isinstance(s, dict)])
            calls.setdefault(cell, []).extend(str(c.get("key")) for c in r.model_calls or []
                                              if isinstance(c, dict) and c.get("key"))
        return cls(outcome={c: _hash(v) for c, v in outcome.items()},
                   transcript={c: _hash(v) if any(v) else None for c, v in transcript.items()},
                   calls={c: tuple(v) for c, v in calls.items()})


def same_episodes(a: Episodes, b: Episodes) -> str | None:
    """Why two runs are copies of each other (`SAME_REQUESTS`, `SAME_EPISODES`), or None."""
    if not a.outcome or a.outcome.keys() != b.outcome.keys() or a.outcome != b.outcome:
        return None
    if all(a.calls.get(c) for c in a.outcome) and a.calls == b.calls:
        return SAME_REQUESTS
    if any(t is not None for t in a.transcript.values()) and a.transcript == b.transcript:
        return SAME_EPISODES
    return None


@dataclass(frozen=True)
class Copy(Generic[T]):
    """A run that repeats another's episodes (`of`), and why (`reason`)."""

    run: T
    of: T
    reason: str


def distinct(runs: Sequence[T], episodes: Callable[[T], Episodes]) -> tuple[list[T], list[Copy[T]]]:
    """The runs that are distinct replicates (the first of each set of copies, in the order
    given), and the copies left out."""
    kept: list[T] = []
    copies: list[Copy[T]] = []
    for r in runs:
        for k in kept:
            why = same_episodes(episodes(k), episodes(r))
            if why:
                copies.append(Copy(r, k, why))
                break
        else:
            kept.append(r)
    return kept, copies
