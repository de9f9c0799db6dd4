"""No memory: nothing is retrieved, nothing is written, no extra model calls."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from memrl.memory.base import LearnItem, MemoryModule
from memrl.memory.entry import BankUpdate


class NoMemorySettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = "none"


class NoMemory(MemoryModule):
    name = "none"
    Settings = NoMemorySettings

    def __init__(self, settings: NoMemorySettings | None = None) -> None:
        self.settings = settings or NoMemorySettings()

    def plan_update(self, items: list[LearnItem]) -> BankUpdate:
        return BankUpdate()
