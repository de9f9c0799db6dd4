"""Single-task reflection (Reflexion-style, docs/design.md §6): each task sees only its own previous
attempt, never another task's.

- Memory: one entry per task, id `last:<task_id>`, replaced after every attempt (an upsert
  in the batch's `BankUpdate`, so a replayed journal writes the same entry again).
- After a failure the model writes a reflection on it (the project's experience writer:
  what went wrong, what to do differently) stored together with the failed attempt. After
  a success no model call is made: the successful attempt itself is kept.
- Retrieve: the task's own entry if there is one (none in epoch 1); no similarity search.
  The injected memory reports similarity 1 (it is the same task).
- An episode whose model call failed (`errored`) leaves the previous memory in place and
  writes no reflection, unless `learn_from_errors`.
- Q is never learned (stays 0); `visits` stays 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from memrl.core.records import EpisodeResult, RetrievedMemory, Task
from memrl.memory.bank import BankSettings
from memrl.memory.base import BankedMemory, LearnItem, NewMemory
from memrl.memory.entry import BankUpdate
from memrl.memory.memrl import WriterSettings
from memrl.core.memory_record import memrl_text
from memrl.memory.writer import ExperienceWriter, format_trajectory

if TYPE_CHECKING:
    from memrl.llm.client import EpisodeLLM
    from memrl.llm.embed import Embedder


class ReflectionSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "reflection"
    writer: WriterSettings = WriterSettings()  # include_trajectory: keep the failed attempt
    learn_from_errors: bool = False  # an episode whose model call failed keeps the previous memory
    bank: BankSettings = BankSettings()


def memory_id(task_id: str) -> str:
    return f"last:{task_id}"


def success_memory(intent: str, result: EpisodeResult, max_chars: int) -> tuple[str, dict[str, Any]]:
    """A success's stored text (the task, then the attempt) and its record."""
    traj = format_trajectory(result, max_chars)
    text, record = memrl_text(intent, solved=True, heading="Successful attempt:", trajectory=traj) if traj \
        else memrl_text(intent, solved=True, notes="Successful attempt:\n(no actions)")
    return text, record.to_dict()


class ReflectionMemory(BankedMemory):
    name = "reflection"
    needs_llm = True  # the reflection on a failure is written by the model
    Settings = ReflectionSettings

    def __init__(self, settings: ReflectionSettings, *, bank_dir: str | Path, embedder: "Embedder"):
        super().__init__(settings, bank_dir=bank_dir, embedder=embedder)
        self.writer = ExperienceWriter(**settings.writer.model_dump())

    def retrieve(self, task: Task, *, seed: int = 0) -> list[RetrievedMemory]:
        own = self.bank.get([memory_id(task.task_id)]).get(memory_id(task.task_id))
        if own is None or own.task_id != task.task_id:
            return []
        return [own.retrieved(1.0, 1.0)]

    def digest(self, task: Task, result: EpisodeResult, *, epoch: int,
               llm: "EpisodeLLM | None") -> dict[str, Any] | None:
        if self.skips(bool(result.errors)):
            return None  # plan() keeps the previous memory; no reflection is paid for
        if result.success:
            text, record = success_memory(task.intent, result, self.s.writer.max_trajectory_chars)
            return {"experience": text, "kind": "attempt", "error": None, "record": record}
        return self.writer.write(task.intent, result, llm)  # reflection + the failed attempt

    def model_probes(self, task: Task) -> list[Any]:
        return [self.writer.probe(task.intent)]

    def plan_update(self, items: list[LearnItem]) -> BankUpdate:
        return BankUpdate(add=self.new_entries(items))  # an entry replaces the task's previous one

    def _entry_id(self, it: LearnItem) -> str:
        return memory_id(it.task.task_id)

    def _new_memory(self, it: LearnItem) -> NewMemory | None:
        if it.digest is None:
            return None
        return NewMemory(it.digest["experience"], kind=it.digest.get("kind", ""), record=it.digest.get("record"))
