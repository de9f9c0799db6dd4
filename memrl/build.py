"""Wiring: validated settings → objects. No logic beyond construction."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memrl.config import Validated
from memrl.embed import build_embedder
from memrl.llm.client import LLMClient
from memrl.llm.factory import build_client
from memrl.memory.base import MemoryModule


@dataclass
class Built:
    env: Any
    memory: MemoryModule
    llm: LLMClient | None
    embedder: Any


def build(v: Validated, run_dir: Path) -> Built:
    embedder = build_embedder(v.embedder.model_dump())
    memory = v.memory_cls.build(v.memory, run_dir=run_dir, embedder=embedder)
    env_kwargs = v.env.model_dump(exclude={"name"})
    env = v.env_cls(**env_kwargs, agent=v.agent.name)
    llm = build_client(v.llm.model_dump()) if (v.agent.needs_llm or memory.needs_llm) else None
    return Built(env=env, memory=memory, llm=llm, embedder=embedder)
