"""Wiring: validated settings → objects. No logic beyond construction."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from memrl.config.validate import Validated
from memrl.core.errors import ConfigError
from memrl.env.base import Env, EnvSettings
from memrl.llm.client import LLMClient
from memrl.llm.embed import build_embedder
from memrl.llm.factory import build_client
from memrl.memory.base import MemoryModule


@dataclass
class Wired:
    env: Env
    memory: MemoryModule
    llm: LLMClient | None
    embedder: Any
    eval_env: Env | None = None  # transfer protocol: the held-out split


def eval_settings(v: Validated) -> EnvSettings:
    """The env settings of a transfer run's held-out split: `runner.eval_split` in the field
    the env's settings name for it (`EVAL_SPLIT_FIELD`), `runner.eval_max_tasks` tasks."""
    settings: EnvSettings = v.env  # type: ignore[assignment]
    try:
        return v.env_cls.Settings.model_validate(
            {**settings.model_dump(), settings.EVAL_SPLIT_FIELD: v.runner.eval_split,
             "max_tasks": v.runner.eval_max_tasks})
    except ValidationError as exc:
        raise ConfigError(f"runner.eval_split: {exc.errors()[0]['msg']}") from exc


def wire(v: Validated, run_dir: Path) -> Wired:
    embedder = build_embedder(v.embedder)
    memory = v.memory_cls.build(v.memory, run_dir=run_dir, embedder=embedder)
    env = v.env_cls(v.env, agent=v.agent.name)
    llm = build_client(v.llm) if (v.policy.needs_llm or memory.needs_llm) else None
    memory.attach_llm(llm)
    eval_env = None
    if v.runner.mode == "transfer":
        eval_env = v.env_cls(eval_settings(v), agent=v.agent.name)
    return Wired(env=env, memory=memory, llm=llm, embedder=embedder, eval_env=eval_env)
