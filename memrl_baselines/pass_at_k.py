"""Pass@k (docs/design.md §5, §6): k independent attempts per task with no memory; only the CSR
(fraction of tasks solved at least once) is reported.

One attempt per epoch, so k is the number of epochs: set `runner.epochs` (there is no
separate k to disagree with it).
A task solved once is not attempted again: the runner carries its success forward with no
model call (`skip_solved`), so SR_t is the running Pass@t and Last = CSR = Pass@k.

Nothing is retrieved or written and no extra model call is made. The attempts differ only
through sampling: with temperature 0 (and a deterministic model) all k attempts are the same
attempt, so run Pass@k with `llm.temperature` > 0 (each epoch's sample has its own identity
in the response cache, so the attempts stay distinct and replay exactly).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from memrl.memory.base import LearnItem, MemoryModule
from memrl.memory.entry import BankUpdate


class PassAtKSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # `k` (= runner.epochs) was a field until k became runner.epochs alone; older run cards
    # still hold it, and a resume or the report ignores it (memrl.config.keys.retired)
    RETIRED_FIELDS: ClassVar[tuple[str, ...]] = ("k",)

    name: str = "pass_at_k"


class PassAtK(MemoryModule):
    name = "pass_at_k"
    needs_llm = False
    skip_solved = True
    Settings = PassAtKSettings

    def __init__(self, settings: PassAtKSettings | None = None) -> None:
        self.settings = settings or PassAtKSettings()

    def plan_update(self, items: list[LearnItem]) -> BankUpdate:
        return BankUpdate()
