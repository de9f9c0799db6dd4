"""Runs as the report sees them: found under the given paths, read from their records.

A run directory is any folder holding both its run card and its episode records
(`memrl.core.rundir.RunDir.is_run`); the report finds them recursively under the paths it is
given (single runs or Hydra multirun folders). Everything is recomputed from the episode
records (`memrl.metrics.compute`).

Epochs. A run whose last epoch is incomplete (still running, or killed) is cut back to its
last complete epoch; a cell missing inside the kept range counts as a failure. Both are
reported as warnings. Whether a run may be reported at all (finished, every planned epoch,
comparable with the others) is memrl.report.inputs's to decide; `Run.unfinished` says why
not.

Each run keeps the digest of its episodes (memrl.report.replicates.Episodes), taken before
the transcripts are freed, so that copies of one run under another seed are found.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from memrl.core.records import EpisodeRecord, iter_jsonl, read_episodes
from memrl.core.rundir import RunDir
from memrl.journal.banklog import BankHistory
from memrl.metrics.compute import success_matrix
from memrl.report.replicates import Episodes


@dataclass
class Run:
    path: Path
    config: dict[str, Any]
    records: list[EpisodeRecord]
    task_ids: list[str]
    epochs: list[int]
    S: np.ndarray  # (E, N) success matrix over complete epochs
    warnings: list[str] = field(default_factory=list)
    eval_records: list[EpisodeRecord] = field(default_factory=list)  # transfer evaluation
    model: str | None = None  # the run card's model id
    history: BankHistory = field(default_factory=BankHistory)  # bank_updates.jsonl (may be empty)
    card: dict[str, Any] = field(default_factory=dict)  # the run card, without its config
    episodes: Episodes | None = None  # digest of the episodes (memrl.report.replicates)
    marks: list[str] = field(default_factory=list)  # why it is reported only under a flag

    @property
    def status(self) -> str:
        return str(self.card.get("status") or "?")

    @property
    def planned_epochs(self) -> int:
        return int((self.config.get("runner") or {}).get("epochs") or 0)

    @property
    def unfinished(self) -> str | None:
        """Why the run is not a finished run (status, or fewer complete epochs than planned),
        or None."""
        why = []
        if self.status != "finished":
            why.append(f"status {self.status}")
        done = complete_epochs(self.records, int(self.card.get("n_tasks") or 0))
        if self.planned_epochs and done < self.planned_epochs:
            why.append(f"{done} of {self.planned_epochs} epochs complete")
        return ", ".join(why) or None

    @property
    def env(self) -> str:
        return str((self.config.get("env") or {}).get("name", "?"))

    @property
    def memory(self) -> str:
        return str((self.config.get("memory") or {}).get("name", "?"))

    @property
    def seed(self) -> int:
        return int(self.config.get("seed", 0) or 0)

    @property
    def mode(self) -> str:
        return str((self.config.get("runner") or {}).get("mode") or "train")

    @property
    def identity(self) -> dict[str, str]:
        """env, method, model, seed (memrl.journal.runcard.identity)."""
        from memrl.journal.runcard import identity

        return identity(self.config, self.model)

    def final(self) -> dict[str, int]:
        """Final-epoch success per task id."""
        return {t: int(v) for t, v in zip(self.task_ids, self.S[-1])}


def find_runs(paths: Iterable[str | Path]) -> list[Path]:
    """Every run directory (run card + episode records) at or below `paths`."""
    return [rd.root for rd in RunDir.find(paths)]


def complete_matrix(records: Sequence[EpisodeRecord]) -> tuple[list[str], list[int], np.ndarray, list[str]]:
    """Success matrix over complete epochs: trailing incomplete epochs are dropped, a cell
    missing inside the kept range counts as a failure. Returns (tasks, epochs, S, warnings)."""
    task_ids, epochs, S = success_matrix(records, allow_missing=True)
    present = {(r.task_id, int(r.epoch)) for r in records}
    full = [all((t, e) in present for t in task_ids) for e in epochs]
    keep = len(epochs)
    while keep > 0 and not full[keep - 1]:
        keep -= 1
    notes = []
    if keep == 0:
        keep = 1  # nothing complete: keep epoch 1, missing cells as failures
        notes.append("no complete epoch; missing cells of epoch 1 count as failures")
    elif keep < len(epochs):
        notes.append(f"epochs {epochs[keep]}..{epochs[-1]} incomplete: cut back to epoch {epochs[keep - 1]}")
    gaps = sum(1 for e in epochs[:keep] for t in task_ids if (t, e) not in present)
    if gaps and keep > 1:
        notes.append(f"{gaps} missing (task, epoch) cells count as failures")
    return task_ids, epochs[:keep], S[:keep], notes


def complete_epochs(records: Sequence[EpisodeRecord], n_tasks: int = 0) -> int:
    """How many epochs, from the first, have a record for every task of the run (`n_tasks`:
    the run card's count, which a run stopped inside its first epoch has not all played)."""
    if not records:
        return 0
    tasks = {r.task_id for r in records}
    by_epoch: dict[int, set[str]] = {}
    for r in records:
        by_epoch.setdefault(int(r.epoch), set()).add(r.task_id)
    n = 0
    while by_epoch.get(n + 1) == tasks and len(tasks) >= n_tasks:
        n += 1
    return n


def digested_records(path: Path) -> tuple[list[EpisodeRecord], Episodes]:
    """A run's records without their transcripts and model calls (which tables, metrics and
    pages never read), and the digest of its episodes taken from them first (whether two seeds
    played the same episodes, memrl.report.replicates): one line at a time, so a run's records
    are never all held whole."""
    records: list[EpisodeRecord] = []

    def stripped() -> Iterable[EpisodeRecord]:
        for d in iter_jsonl(path):
            r = EpisodeRecord.from_dict(d)
            yield r
            r.transcript, r.model_calls = [], []
            records.append(r)

    digest = Episodes.of(stripped())
    return records, digest


def load_run(path: str | Path) -> Run | None:
    """A Run, or None when the directory has no episode yet."""
    rd = RunDir(path)
    path = rd.root
    card = json.loads(rd.card.read_text(encoding="utf-8"))
    records, digest = digested_records(rd.episodes)
    evals = read_episodes(rd.eval_episodes, light=True) if rd.eval_episodes.is_file() else []
    if not records:
        return None
    task_ids, epochs, S, notes = complete_matrix(records)
    return Run(path=path, config=card.get("config") or {}, records=records, task_ids=task_ids,
               epochs=epochs, S=S, warnings=notes, eval_records=evals, model=card.get("model"),
               history=BankHistory.read(rd), card={k: v for k, v in card.items() if k != "config"},
               episodes=digest)
