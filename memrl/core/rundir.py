"""The run directory: the one place that names the files of a run.

Every reader and writer of a run directory (runner, run card, metrics, plots, report, bank
tools, tests) takes its paths from a `RunDir`, so a file name exists once. Layout
(docs/design.md §8):

    <run>/
      run_card.json        what made the run and what it cost, per session (memrl.journal.runcard)
      episodes.jsonl       one record per training episode (memrl.core.records.EpisodeRecord)
      memories.jsonl       the text of every memory injected or written, by content hash
                           (memrl.journal.memtexts; records name texts by hash)
      eval_episodes.jsonl  transfer mode: the held-out evaluation after each epoch
      metrics.json         SR / Last / CSR / forgetting (memrl.metrics.compute)
      plots/               sr.png, csr.png, forgetting.png
      bank/                the memory bank (embedded Chroma, or a claim on a Chroma server)
      mem0/                memory=mem0 only: mem0's own store (vector store, history, ledger)
      bank_updates.jsonl   the log of bank updates (Q before -> after), one line per batch
                           (memrl.journal.banklog)
      memories.idx         the index of memories.jsonl (memrl.memory.textstore; derived, rebuilt
                           when it does not fit)
      state/               checkpoint.json, eval_checkpoint.json, journal.json, last_commit.json,
                           group.jsonl (runner.schedule=async: the journals of the commits since
                           the last checkpoint, memrl.journal.commit),
                           tally.json (the run's counts at its last epoch end, so a resumed run
                           reads only the records after it; memrl.control.live),
                           launches.jsonl (runner.schedule=async: each episode's retrieval,
                           logged before it starts; memrl.journal.launches),
                           lock (memrl.core.lock: held by the one process running the directory)
      .hydra/              Hydra's record of the composed config and the overrides
      run.log              Hydra's log of the job (the job is named after memrl/control/session.py)
      wandb/, wandb_run_id.txt   logger=wandb only
      report/              logger=wandb only: this run's report (figures logged as an artifact)
      inspect/             `memrl export inspect` without --out: Inspect AI eval logs
      view.html            `memrl view RUN` without --out: the run's page
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable


@dataclass(frozen=True)
class RunDir:
    """Paths of one run directory (nothing is created until a writer writes)."""

    root: Path

    # file names relative to the root: the only spelling of each in the code base
    CARD = "run_card.json"
    EPISODES = "episodes.jsonl"
    EVAL_EPISODES = "eval_episodes.jsonl"
    MEMORIES = "memories.jsonl"
    MEMORIES_INDEX = "memories.idx"
    METRICS = "metrics.json"
    PLOTS = "plots"
    BANK = "bank"
    BANK_UPDATES = "bank_updates.jsonl"
    MEM0 = "mem0"
    STATE = "state"
    CHECKPOINT = "checkpoint.json"
    EVAL_CHECKPOINT = "eval_checkpoint.json"
    JOURNAL = "journal.json"
    GROUP = "group.jsonl"
    LAST_COMMIT = "last_commit.json"
    LAUNCHES = "launches.jsonl"
    TALLY = "tally.json"
    LOCK = "lock"
    HYDRA = ".hydra"
    LOG = "run.log"
    WANDB = "wandb"
    WANDB_RUN_ID = "wandb_run_id.txt"
    REPORT = "report"
    INSPECT = "inspect"
    VIEW = "view.html"

    def __init__(self, root: str | os.PathLike[str] | "RunDir") -> None:
        path = root.root if isinstance(root, RunDir) else Path(root)
        object.__setattr__(self, "root", path)

    def __fspath__(self) -> str:
        return str(self.root)

    def __str__(self) -> str:
        return str(self.root)

    # ------------------------------------------------------------------ records and results
    @property
    def card(self) -> Path:
        return self.root / self.CARD

    @property
    def episodes(self) -> Path:
        return self.root / self.EPISODES

    @property
    def eval_episodes(self) -> Path:
        return self.root / self.EVAL_EPISODES

    @property
    def memories(self) -> Path:
        return self.root / self.MEMORIES

    @property
    def memories_index(self) -> Path:
        """The index of memories.jsonl (memrl.memory.textstore.index_path names it the same)."""
        return self.root / self.MEMORIES_INDEX

    @property
    def metrics(self) -> Path:
        return self.root / self.METRICS

    @property
    def plots(self) -> Path:
        return self.root / self.PLOTS

    # ------------------------------------------------------------------ memory
    @property
    def bank(self) -> Path:
        return self.root / self.BANK

    @property
    def bank_updates(self) -> Path:
        return self.root / self.BANK_UPDATES

    @property
    def mem0(self) -> Path:
        return self.root / self.MEM0

    # ------------------------------------------------------------------ runner state
    @property
    def state(self) -> Path:
        return self.root / self.STATE

    @property
    def checkpoint(self) -> Path:
        return self.state / self.CHECKPOINT

    @property
    def eval_checkpoint(self) -> Path:
        return self.state / self.EVAL_CHECKPOINT

    @property
    def journal(self) -> Path:
        return self.state / self.JOURNAL

    @property
    def group(self) -> Path:
        """The journals of the grouped commits since the last checkpoint (memrl.journal.commit)."""
        return self.state / self.GROUP

    @property
    def last_commit(self) -> Path:
        """The journal of the last committed batch, kept to repair a torn episodes.jsonl."""
        return self.state / self.LAST_COMMIT

    @property
    def launches(self) -> Path:
        """The launch log of an async run (memrl.journal.launches)."""
        return self.state / self.LAUNCHES

    @property
    def tally(self) -> Path:
        """The run's counts as of its last epoch end (memrl.control.live.RunTally)."""
        return self.state / self.TALLY

    @property
    def lock(self) -> Path:
        return self.state / self.LOCK

    # ------------------------------------------------------------------ tools around the run
    @property
    def hydra(self) -> Path:
        return self.root / self.HYDRA

    @property
    def log(self) -> Path:
        return self.root / self.LOG

    @property
    def wandb(self) -> Path:
        return self.root / self.WANDB

    @property
    def wandb_run_id(self) -> Path:
        return self.root / self.WANDB_RUN_ID

    @property
    def report(self) -> Path:
        return self.root / self.REPORT

    @property
    def inspect(self) -> Path:
        return self.root / self.INSPECT

    @property
    def view(self) -> Path:
        return self.root / self.VIEW

    # ------------------------------------------------------------------ finding runs
    def is_run(self) -> bool:
        """A run directory holds its run card and its episode records."""
        return self.card.is_file() and self.episodes.is_file()

    def mkdir(self) -> "RunDir":
        self.root.mkdir(parents=True, exist_ok=True)
        return self

    @classmethod
    def find(cls, paths: Iterable[str | os.PathLike[str]]) -> list["RunDir"]:
        """Every run directory at or below `paths` (a run directory itself, or any folder
        holding them, e.g. a Hydra multirun), resolved and sorted, each once."""
        found: set[Path] = set()
        for p in paths:
            p = Path(p)
            cards = [p / cls.CARD] if (p / cls.CARD).is_file() else []
            if p.is_dir():
                cards += list(p.rglob(cls.CARD))
            for card in cards:
                if (card.parent / cls.EPISODES).is_file():
                    found.add(card.parent.resolve())
        return [cls(p) for p in sorted(found)]
