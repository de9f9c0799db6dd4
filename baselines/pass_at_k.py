"""Pass@k (DESIGN §5, §6): k independent attempts per task with no memory; only the CSR
(fraction of tasks solved at least once) is reported.

One attempt per epoch, so k is the number of epochs: configs/memory/pass_at_k.yaml sets
`k: ${runner.epochs}` and the two cannot disagree (set `runner.epochs`, not `memory.k`).
A task solved once is not attempted again: the runner carries its success forward with no
model call (`skip_solved`), so SR_t is the running Pass@t and Last = CSR = Pass@k.

Nothing is retrieved or written and no extra model call is made. The attempts differ only
through sampling: with temperature 0 (and a deterministic model) all k attempts are the same
attempt, so run Pass@k with `llm.temperature` > 0 (each epoch's sample has its own identity
in the response cache, so the attempts stay distinct and replay exactly).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from memrl.memory.base import LearnItem, MemoryModule
from memrl.memory.entry import BankUpdate
from memrl.records import Task


class PassAtKSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "pass_at_k"
    k: int = Field(10, ge=1, description="attempts per task; equals runner.epochs")


class PassAtK(MemoryModule):
    name = "pass_at_k"
    needs_llm = False
    skip_solved = True
    Settings = PassAtKSettings

    def __init__(self, settings: PassAtKSettings | None = None) -> None:
        self.settings = settings or PassAtKSettings()

    def prepare(self, tasks: list[Task], seed: int) -> dict[str, Any]:
        return {"k": self.settings.k}

    def plan(self, items: list[LearnItem]) -> BankUpdate:
        return BankUpdate()
