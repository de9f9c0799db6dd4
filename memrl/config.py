"""Validation of the composed Hydra config, before anything is built or any model is called.

Each section is checked by a pydantic model; a bad value stops the run with one message per
problem, each naming the full key (e.g. `memory.lam: Input should be less than or equal to 1`).
Env and memory sections name their class in `_target_`; the class carries its `Settings`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from memrl.runner import RunnerSettings


class ConfigError(ValueError):
    """A configuration problem; the message names every offending key."""


class LLMSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    backend: Literal["litellm", "local", "scripted"]
    model: str | None = None
    api_base: str | None = None
    api_key_env: str | None = None  # name of the env var holding the key (never the key itself)
    timeout: float = Field(60.0, gt=0)
    max_concurrency: int = Field(8, ge=1)
    max_retries: int = Field(6, ge=0)
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(256, ge=1)
    cache: bool = True
    cache_path: str | None = None
    n_ctx: int = Field(4096, ge=256)
    n_threads: int | None = Field(None, ge=1)
    model_path: str | None = None
    script: str | None = None  # scripted backend: "package.module:function" (tests)
    backoff_base: float = Field(1.0, ge=0.0)
    backoff_max: float = Field(60.0, ge=0.0)
    # accepts images: true/false; null = litellm's model list (litellm), false (local)
    vision: bool | None = None
    # litellm: passed to litellm.completion as it is (e.g. {repeat_penalty: 1.0}); part of the
    # model id, hence of the cache key
    extra: dict[str, Any] = Field(default_factory=dict)
    # local: completion (plain text continued; base models) | chat (the file's chat template)
    mode: Literal["completion", "chat"] = "completion"
    # local: keep the KV cache of the shared prompt prefix in whole aligned blocks (outputs are
    # the same as without: memrl.llm.local); false = evaluate every prompt from scratch
    reuse_prefix: bool = True
    prefix_block: int = Field(64, ge=1)

    @model_validator(mode="after")
    def _check(self) -> "LLMSettings":
        if self.backend == "litellm" and not self.model:
            raise ValueError("a litellm backend needs `model` (e.g. openai/gpt-4o-mini)")
        if self.extra and self.backend != "litellm":
            raise ValueError("extra: settings passed to litellm; this backend is "
                             f"{self.backend!r}")
        if self.mode == "chat" and self.backend != "local":
            raise ValueError("mode: chat/completion is chosen by the model prefix for litellm "
                             "(openai/<m> chats, text-completion-openai/<m> continues text); "
                             "`mode` is for backend=local")
        if self.backend == "local" and self.model_path is None and self.model:
            from memrl.llm.local_models import PACKAGED

            if self.model not in PACKAGED:
                raise ValueError(f"model: unknown embedded model {self.model!r}; known: "
                                 f"{sorted(PACKAGED)} (or set model_path=<any .gguf>)")
        return self


class EmbedderSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    backend: Literal["minilm", "litellm", "hashing"]
    model: str | None = None
    api_base: str | None = None
    api_key_env: str | None = None
    cache: bool = True
    cache_path: str | None = None
    dim: int = Field(64, ge=2)


class AgentSettings(BaseModel):
    """The `agent` group. An agent that needs no LLM is an oracle (ALFWorld's expert, BCB's
    canonical solution, the Lifelong / HLE gold answer): it does not read memories, so the
    runner gives it none (`reads_memories`), and no memory's Q is updated by its episodes."""

    model_config = ConfigDict(extra="forbid")
    name: str
    needs_llm: bool = True

    @property
    def reads_memories(self) -> bool:
        return self.needs_llm


@dataclass
class Validated:
    env_cls: type
    env: BaseModel
    memory_cls: type
    memory: BaseModel
    llm: LLMSettings
    embedder: EmbedderSettings
    agent: AgentSettings
    runner: RunnerSettings
    seed: int


def _errors(section: str, exc: ValidationError) -> list[str]:
    out = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        got = f" (got {err['input']!r})" if "input" in err and not isinstance(err["input"], dict) else ""
        if not loc:  # a whole-model check names its field as "field: message"
            head, sep, rest = msg.partition(": ")
            if sep and head.isidentifier():
                loc, msg = head, rest
        key = f"{section}.{loc}" if loc else section
        out.append(f"{key}: {msg}{got}")
    return out


def _section(cfg: DictConfig, name: str) -> dict[str, Any]:
    node = cfg.get(name)
    if node is None:
        raise ConfigError(f"{name}: missing config group (choose one, e.g. {name}=<option>)")
    try:
        return OmegaConf.to_container(node, resolve=True, throw_on_missing=True)  # type: ignore[return-value]
    except MissingMandatoryValue as exc:
        key = exc.full_key or name
        hint = " (set ALFWORLD_DATA or env.data_root)" if key == "env.data_root" else ""
        raise ConfigError(f"{key}: a value is required{hint}") from exc
    except Exception as exc:  # an interpolation that cannot resolve
        raise ConfigError(f"{name}: {exc}") from exc


def _target(section: str, data: dict[str, Any], problems: list[str]) -> type | None:
    target = data.pop("_target_", None)
    if not target:
        problems.append(f"{section}._target_: missing (the class implementing this {section})")
        return None
    try:
        cls = get_class(target)
    except Exception as exc:
        problems.append(f"{section}._target_: cannot import {target!r} ({exc})")
        return None
    if not hasattr(cls, "Settings"):
        problems.append(f"{section}._target_: {target} has no Settings schema")
        return None
    return cls


def validate(cfg: DictConfig) -> Validated:
    problems: list[str] = []
    parsed: dict[str, Any] = {}
    classes: dict[str, type | None] = {}
    for section in ("env", "memory"):
        data = _section(cfg, section)
        classes[section] = cls = _target(section, data, problems)
        if cls is not None:
            try:
                parsed[section] = cls.Settings.model_validate(data)
            except ValidationError as exc:
                problems += _errors(section, exc)
    for section, model in (("llm", LLMSettings), ("embedder", EmbedderSettings),
                           ("agent", AgentSettings), ("runner", RunnerSettings)):
        try:
            parsed[section] = model.model_validate(_section(cfg, section))
        except ValidationError as exc:
            problems += _errors(section, exc)
    seed = cfg.get("seed", 0)
    if not isinstance(seed, int) or seed < 0:
        problems.append(f"seed: must be a non-negative integer (got {seed!r})")
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
    return Validated(env_cls=classes["env"], env=parsed["env"], memory_cls=classes["memory"],
                     memory=parsed["memory"], llm=parsed["llm"], embedder=parsed["embedder"],
                     agent=parsed["agent"], runner=parsed["runner"], seed=seed)
