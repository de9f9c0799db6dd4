"""Runs as the report sees them: found under the given paths, read from their records.

A run directory is any folder holding both its run card and its episode records
(`memrl.core.rundir.RunDir.is_run`); the report finds them recursively under the paths it is
given (single runs or Hydra multirun folders). Everything is recomputed from the episode
records (`memrl.metrics.compute`).

Epochs. A run whose last epoch is incomplete (still running, or killed) is cut back to its
last complete epoch; a cell missing inside the kept range counts as a failure. Both are
reported as warnings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from memrl.core.records import EpisodeRecord, read_episodes
from memrl.core.rundir import RunDir
from memrl.journal.banklog import BankHistory
from memrl.metrics.compute import success_matrix


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


def load_run(path: str | Path) -> Run | None:
    """A Run, or None when the directory has no episode yet."""
    rd = RunDir(path)
    path = rd.root
    card = json.loads(rd.card.read_text(encoding="utf-8"))
    # the report never reads transcripts or model calls: they are dropped as each line is read
    records = read_episodes(rd.episodes, light=True)
    evals = read_episodes(rd.eval_episodes, light=True) if rd.eval_episodes.is_file() else []
    if not records:
        return None
    task_ids, epochs, S, notes = complete_matrix(records)
    return Run(path=path, config=card.get("config") or {}, records=records, task_ids=task_ids,
               epochs=epochs, S=S, warnings=notes, eval_records=evals, model=card.get("model"),
               history=BankHistory.read(rd))
