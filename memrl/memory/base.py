"""The memory seam (docs/design.md §3, "Memory module"): the calls every memory module answers
(`retrieve`, `select`, `digest`, `plan_update`, `apply`, `model_probes`), so a run differs only
by `memory=<name>`. `EntryMemory` holds the one recipe by which a module turns a batch's
episodes into new bank entries (`new_entries`); `BankedMemory` adds the Chroma bank and the
bank options (docs/design.md §3, `memory.bank`); `FrozenMemory` wraps a banked module whose bank
is frozen (retrieve only).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memrl.core.records import EpisodeResult, RetrievedMemory, Task
from memrl.core.rundir import RunDir
from memrl.memory.entry import BankUpdate, MemoryEntry

if TYPE_CHECKING:
    from memrl.llm.base import ModelProbe
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
    embedding: Any = field(default_factory=list)  # the task intent's embedding (a float32 row)


@dataclass
class NewMemory:
    """What a module stores for one episode; `EntryMemory.new_entries` makes the entry."""

    experience: str
    kind: str = ""
    q: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    record: dict[str, Any] | None = None  # where its parts lie in the text (memrl.core.memory_record)

    def entry_extra(self) -> dict[str, Any]:
        """`extra` as the entry keeps it: with the record, when there is one."""
        return {**self.extra, "record": self.record} if self.record is not None else self.extra


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
        return self.prepare(tasks, seed)

    def prepare(self, tasks: list[Task], seed: int) -> dict[str, Any]:
        """The module's own set-up (e.g. resolving `delta: auto`) and its facts."""
        return {}

    def entry_count(self) -> int | None:
        """How many entries the module's store holds (checked against the checkpoint when a
        run resumes, so a lost or replaced store is refused); None: the module keeps none."""
        return None

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
    def plan_update(self, items: list[LearnItem]) -> BankUpdate: ...

    def apply(self, update: BankUpdate) -> None:
        return None

    def hold(self) -> None:
        """What `apply` writes until `flush` need not be durable update by update: the commit
        protocol's grouped commits (memrl.journal.commit) journal each one first, and `flush`
        before their checkpoint. Default: nothing to do (every apply is durable)."""
        return None

    def flush(self) -> None:
        """Make what `apply` wrote durable, and end a `hold`; default: nothing to do."""
        return None

    def model_probes(self, task: Task) -> list["ModelProbe"]:
        """The model calls the module makes around an episode of `task` (writing, judging),
        one per purpose, as it makes them (memrl.control.preflight); default none."""
        return []

    def bank_state(self, ids: list[str] | None) -> dict[str, dict[str, Any]] | None:
        """{id: {"q", "visits", "intent", "experience"}} of the bank's entries `ids` (None: every
        entry), read for the bank-update log (memrl.journal.banklog); None for a module without a bank."""
        return None

    def bank_size(self) -> int | None:
        """How many entries the bank holds; None for a module without a bank."""
        return None

    def close(self) -> None:
        return None


class EntryMemory(MemoryModule):
    """A module that learns by storing one entry per episode. `new_entries` is the recipe
    every such module writes with, in task order:

    - an episode whose model call failed (`errored`) is skipped unless the settings'
      `learn_from_errors` (`skips`);
    - the module says what the episode stores (`_new_memory`; None: nothing);
    - the entry's id is `e<epoch:03d>:<task id>` (`_entry_id`);
    - its key is the task intent with the intent's embedding, the runner's when it has one,
      else computed here (`_entry_key`; MemRL's near-duplicate intents share a key there);
    - the entries are numbered on from the store's next insertion order (`_next_order`).
    """

    s: Any         # the module's settings (with `learn_from_errors`)
    embedder: Any

    def skips(self, errored: bool, crashed: bool = False) -> bool:
        """True for an errored episode the module must not learn from; a crashed one (the env
        raised) also when the settings say `learn_from_crashes: false`."""
        if crashed and not getattr(self.s, "learn_from_crashes", True):
            return True
        return errored and not self.s.learn_from_errors

    def new_entries(self, items: list[LearnItem]) -> list[MemoryEntry]:
        out: list[MemoryEntry] = []
        order = self._next_order()
        for it in items:
            if self.skips(it.errored, it.result.crashed):
                continue
            if it.digest is not None and "experience" in it.digest and it.digest["experience"] is None:
                continue  # the writer gave no memory (memrl.memory.writer, layout=official)
            memory = self._new_memory(it)
            if memory is None:
                continue
            intent, key = self._entry_key(it)
            out.append(MemoryEntry(
                memory_id=self._entry_id(it), intent=intent, experience=memory.experience,
                embedding=key, q=memory.q, visits=0, success=bool(it.result.success),
                epoch=it.epoch, task_id=it.task.task_id, kind=memory.kind,
                injected_ids=[m.memory_id for m in it.injected], order=order, extra=memory.entry_extra()))
            order += 1
        return out

    @abstractmethod
    def _new_memory(self, it: LearnItem) -> NewMemory | None:
        """What the episode stores, or None for nothing."""

    @abstractmethod
    def _next_order(self) -> int:
        """The insertion order of the next entry."""

    def _entry_id(self, it: LearnItem) -> str:
        return f"e{it.epoch:03d}:{it.task.task_id}"

    def _entry_key(self, it: LearnItem) -> tuple[str, list[float]]:
        """(intent text, key embedding) of the episode's new entry."""
        vec = it.embedding if len(it.embedding) else self.embedder.embed([it.task.intent])[0]
        return it.task.intent, [float(v) for v in vec]


class BankedMemory(EntryMemory):
    """A module whose state is one `ChromaBank` under `<run_dir>/bank`, opened from the
    `bank` block of its settings. Writes go through `apply` only (journaled, idempotent).

    Two bank options work the same for every banked module (transfer, e.g. cross-model as
    in the paper's App. C.1, or a merged bank):
    - `bank.init_from`: before anything else, an empty run bank is seeded with a copy of
      another bank (`init_from.seed_once`: once per run; a resumed run keeps its own bank);
      `bank.init_q: reset` starts the copies at the module's `q_init` with no visits;
    - `bank.frozen`: retrieve only. `build` wraps the module in `FrozenMemory`: no planned update, no
      digest (no model call), no apply, whatever the module does otherwise.
    """

    @classmethod
    def build(cls, settings: Any, *, run_dir: Path, embedder: Any) -> "MemoryModule":
        module = cls(settings, bank_dir=RunDir(run_dir).bank, embedder=embedder)
        return FrozenMemory(module) if settings.bank.frozen else module

    def __init__(self, settings: Any, *, bank_dir: str | Path, embedder: Any):
        self.s = settings
        self.embedder = embedder
        # a run's bank (`<run>/bank`) keeps its texts in the run's memories.jsonl, which the
        # commit log writes too: each text is stored once (memrl.memory.bank)
        bank_dir = Path(bank_dir)
        texts = RunDir(bank_dir.parent).memories if bank_dir.name == RunDir.BANK else None
        self.bank = settings.bank.open(bank_dir, texts=texts)
        self.bank_facts: dict[str, Any] = {}
        if settings.bank.init_from:
            from memrl.memory.init_from import seed_once

            self.bank_facts["init_from"] = seed_once(
                self.bank, bank_dir, settings.bank.init_from, embedder,
                init_q=settings.bank.init_q, q_init=float(getattr(settings, "q_init", 0.0)))

    def close(self) -> None:
        """Release the bank's client (its files and index), so that runs one after another
        in one process (a Hydra sweep) do not keep every earlier bank open."""
        self.bank.close()

    def setup(self, tasks: list[Task], seed: int = 0) -> dict[str, Any]:
        facts = self.prepare(tasks, seed)
        return {**facts, "bank": dict(self.bank_facts)} if self.bank_facts else facts

    def _next_order(self) -> int:
        return self.bank.next_order

    def entry_count(self) -> int | None:
        return self.bank.count()

    def apply(self, update: BankUpdate) -> None:
        self.bank.apply(update)  # an added id that exists is replaced (upsert)

    def hold(self) -> None:
        self.bank.hold()

    def flush(self) -> None:
        self.bank.flush()

    def bank_state(self, ids: list[str] | None) -> dict[str, dict[str, Any]] | None:
        entries = self.bank.iter_entries() if ids is None else self.bank.get(ids).values()
        return {e.memory_id: {"q": float(e.q), "visits": int(e.visits), "intent": e.intent,
                              "experience": e.experience} for e in entries}

    def bank_size(self) -> int | None:
        return self.bank.count()


class FrozenMemory(MemoryModule):
    """A banked module with its bank frozen (`bank.frozen`): it retrieves (and selects) as
    the module does, and learns nothing: `plan_update` is empty, `digest` makes no model call,
    `apply` writes nothing. Everything else is the wrapped module's."""

    def __init__(self, inner: BankedMemory) -> None:
        self.inner = inner
        self.name, self.needs_llm, self.skip_solved = inner.name, inner.needs_llm, inner.skip_solved

    def __getattr__(self, attr: str) -> Any:  # the wrapped module's own attributes (bank, s, ...)
        if attr == "inner":
            raise AttributeError(attr)
        return getattr(self.inner, attr)

    def attach_llm(self, llm: "LLMClient | None") -> None:
        self.inner.attach_llm(llm)

    def setup(self, tasks: list[Task], seed: int = 0) -> dict[str, Any]:
        facts = self.inner.setup(tasks, seed=seed)
        return {**facts, "bank": {**facts.get("bank", {}), "frozen": True}}

    def retrieve(self, task: Task, *, seed: int = 0) -> list[RetrievedMemory]:
        return self.inner.retrieve(task, seed=seed)

    def select(self, task: Task, candidates: list[RetrievedMemory], *,
               llm: "EpisodeLLM | None") -> list[RetrievedMemory]:
        return self.inner.select(task, candidates, llm=llm)

    def digest(self, task: Task, result: EpisodeResult, *, epoch: int,
               llm: "EpisodeLLM | None") -> dict[str, Any] | None:
        return None

    def plan_update(self, items: list[LearnItem]) -> BankUpdate:
        return BankUpdate()

    def apply(self, update: BankUpdate) -> None:
        return None

    def hold(self) -> None:
        self.inner.hold()

    def flush(self) -> None:
        self.inner.flush()

    def entry_count(self) -> int | None:
        return self.inner.entry_count()

    def bank_state(self, ids: list[str] | None) -> dict[str, dict[str, Any]] | None:
        return self.inner.bank_state(ids)

    def bank_size(self) -> int | None:
        return self.inner.bank_size()

    def close(self) -> None:
        self.inner.close()
