"""The memory seam. MemRL and every baseline implement the same calls, so a run differs
only by `memory=<name>`.

The two calls of DESIGN §3 are `retrieve(task)` and `learn(episodes)`. `learn` is split in
three so a batch can be journaled and a crashed run resumed exactly:

- `select`  per episode, in the worker thread, before the episode: model-side filtering of
            what `retrieve` returned (Self-RAG); default keeps all.
- `digest`  per episode, in the episode's worker thread: model work that depends only on
            the episode (e.g. writing a script or a reflection). No bank access.
- `plan`    per batch, in task order: the bank changes as absolute values (`BankUpdate`).
            Reads the bank as of batch start; writes nothing.
- `apply`   writes a planned update. Idempotent.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memrl.records import EpisodeResult, RetrievedMemory, Task

from .entry import BankUpdate

if TYPE_CHECKING:
    from memrl.llm.client import EpisodeLLM, LLMClient


@dataclass
class LearnItem:
    """One finished episode as the memory module sees it when learning."""

    task: Task
    result: EpisodeResult
    injected: list[RetrievedMemory]
    epoch: int
    digest: dict[str, Any] | None = None
    errored: bool = False
    embedding: list[float] = field(default_factory=list)  # the task intent's embedding


class MemoryModule(ABC):
    name: str = "base"
    needs_llm: bool = False  # True when learning itself calls the model (e.g. writing)

    @classmethod
    def build(cls, settings: Any, *, run_dir: Path, embedder: Any) -> "MemoryModule":
        """Construct from validated settings; modules with a bank keep it under run_dir."""
        return cls(settings)

    def attach_llm(self, llm: "LLMClient | None") -> None:
        """The run's LLM client, for a module whose `apply` itself calls the model (Mem0:
        mem0's extraction runs when a batch is committed). Default: not needed."""
        return None

    def setup(self, tasks: list[Task], seed: int = 0) -> dict[str, Any]:
        """Called once per run with the run's tasks; returns facts for the run card."""
        return {}

    # Pass@k-style modules: a task solved in an earlier epoch is not attempted again; its
    # success is carried forward (recorded with info.carried = true and no model calls).
    skip_solved: bool = False

    def retrieve(self, task: Task, *, seed: int = 0) -> list[RetrievedMemory]:
        return []

    def select(self, task: Task, candidates: list[RetrievedMemory], *,
               llm: "EpisodeLLM | None") -> list[RetrievedMemory]:
        """Model-side filtering of retrieved memories (Self-RAG), run in the episode's worker
        thread just before the episode. Default: keep everything retrieved."""
        return candidates

    def digest(self, task: Task, result: EpisodeResult, *, epoch: int,
               llm: "EpisodeLLM | None") -> dict[str, Any] | None:
        return None

    @abstractmethod
    def plan(self, items: list[LearnItem]) -> BankUpdate: ...

    def apply(self, update: BankUpdate) -> None:
        return None

    def learn(self, items: list[LearnItem]) -> None:
        self.apply(self.plan(items))

    def snapshot(self) -> list[dict[str, Any]]:
        """A comparable dump of the module's state (the bank), for tests and resume checks."""
        return []

    def close(self) -> None:
        return None


class BankedMemory(MemoryModule):
    """A module whose state is one `ChromaBank` under `<run_dir>/bank`, opened from the
    `bank` block of its settings. Writes go through `apply` only (journaled, idempotent).

    Two bank options work the same for every banked module (transfer, e.g. cross-model as
    in the paper's App. C.1, or a merged bank):
    - `bank.init_from`: before anything else, an empty run bank is seeded with a copy of
      another bank (`bankio.seed_once`: once per run; a resumed run keeps its own bank);
      `bank.init_q: reset` starts the copies at the module's `q_init` with no visits;
    - `bank.frozen`: retrieve only. `plan` returns an empty update, `digest` writes nothing
      (no model call), `apply` writes nothing, whatever the subclass does otherwise.
    """

    @classmethod
    def build(cls, settings: Any, *, run_dir: Path, embedder: Any) -> "BankedMemory":
        return cls(settings, bank_dir=Path(run_dir) / "bank", embedder=embedder)

    def __init__(self, settings: Any, *, bank_dir: str | Path, embedder: Any):
        self.s = settings
        self.embedder = embedder
        self.bank = settings.bank.open(bank_dir)
        self.bank_facts: dict[str, Any] = {}
        if settings.bank.init_from:
            from .bankio import seed_once

            self.bank_facts["init_from"] = seed_once(
                self.bank, bank_dir, settings.bank.init_from, embedder,
                init_q=settings.bank.init_q, q_init=float(getattr(settings, "q_init", 0.0)))
        self.frozen = bool(settings.bank.frozen)
        if self.frozen:
            self.bank_facts["frozen"] = True
            # Instance attributes win over the subclass's methods, so one switch here freezes
            # every banked module without each of them having to check it.
            self.plan = self._frozen_plan  # type: ignore[method-assign]
            self.digest = self._frozen_digest  # type: ignore[method-assign]
            self.apply = self._frozen_apply  # type: ignore[method-assign]
        if self.bank_facts:
            own_setup = self.setup

            def setup(tasks: list[Task], seed: int = 0) -> dict[str, Any]:
                return {**own_setup(tasks, seed=seed), "bank": dict(self.bank_facts)}

            self.setup = setup  # type: ignore[method-assign]

    def _frozen_plan(self, items: list[LearnItem]) -> BankUpdate:
        return BankUpdate()

    def _frozen_digest(self, task: Task, result: EpisodeResult, *, epoch: int,
                       llm: "EpisodeLLM | None") -> dict[str, Any] | None:
        return None

    def _frozen_apply(self, update: BankUpdate) -> None:
        return None

    def apply(self, update: BankUpdate) -> None:
        self.bank.apply(update)  # an added id that exists is replaced (upsert)

    def snapshot(self) -> list[dict[str, Any]]:
        return self.bank.snapshot()
