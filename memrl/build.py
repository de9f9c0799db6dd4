"""Wiring: validated settings → objects. No logic beyond construction."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from memrl.config import ConfigError, Validated
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
    eval_env: Any = None  # transfer protocol: the held-out split


def build(v: Validated, run_dir: Path) -> Built:
    embedder = build_embedder(v.embedder.model_dump())
    memory = v.memory_cls.build(v.memory, run_dir=run_dir, embedder=embedder)
    env_kwargs = v.env.model_dump(exclude={"name"})
    env = v.env_cls(**env_kwargs, agent=v.agent.name)
    llm = build_client(v.llm.model_dump()) if (v.agent.needs_llm or memory.needs_llm) else None
    memory.attach_llm(llm)
    eval_env = None
    if v.runner.mode == "transfer":
        try:
            eval_settings = v.env_cls.Settings.model_validate(
                {**v.env.model_dump(), getattr(v.env_cls, "EVAL_SPLIT_FIELD", "split"): v.runner.eval_split,
                 "max_tasks": v.runner.eval_max_tasks})
        except ValidationError as exc:
            raise ConfigError(f"runner.eval_split: {exc.errors()[0]['msg']}") from exc
        eval_env = v.env_cls(**eval_settings.model_dump(exclude={"name"}), agent=v.agent.name)
    return Built(env=env, memory=memory, llm=llm, embedder=embedder, eval_env=eval_env)
