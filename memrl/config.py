"""Validation of the composed Hydra config, before anything is built or any model is called.

Each section is checked by a pydantic model; a bad value stops the run with one message per
problem, each naming the full key (e.g. `memory.lam: Input should be less than or equal to 1`).
Env and memory sections name their class in `_target_`; the class carries its `Settings`.
The agent must be one of the env's policies (`POLICIES`); whether it needs a model is the
policy's `needs_llm`.

Importing this module registers the config resolver `memrl.paper_delta` (see `paper_delta`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from memrl.errors import ConfigError
from memrl.result_keys import no_effect
from memrl.runner import RunnerSettings

if TYPE_CHECKING:
    from memrl_envs.base import Policy

# The embedding model the paper's per-benchmark similarity gates δ (v2, Table 8) were chosen
# for; a similarity threshold does not carry over to another model's geometry.
PAPER_EMBEDDER = "text-embedding-3-large"


def paper_delta(delta: Any, *, _root_: DictConfig) -> Any:
    """`${memrl.paper_delta:<Table 8 δ>}` in an env config: that δ when the configured
    embedder is the paper's (any provider prefix, e.g. openai/), else "auto" (recomputed for
    the configured embedder at start, see `MemRLMemory.prepare`)."""
    model = str(OmegaConf.select(_root_, "embedder.model", default="") or "")
    return delta if model.rsplit("/", 1)[-1] == PAPER_EMBEDDER else "auto"


OmegaConf.register_new_resolver("memrl.paper_delta", paper_delta, replace=True)


# configs/ of the checkout (the package is installed editable, so it sits beside memrl/)
CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"


class ModelService(BaseModel):
    """What the LLM and the embedder sections share: which model, the name of the
    environment variable holding its key, and its on-disk cache. Where the model is served
    (`api_base`) each declares itself: a chat model's identity is checked with its server
    (so its URL does not change results), an embedder's is not (its URL still does)."""

    model_config = ConfigDict(extra="forbid")
    name: str
    model: str | None = None
    # name of the env var holding the key (never the key itself)
    api_key_env: str | None = no_effect(None)
    # a cache replays answers (or embeddings); it does not change them
    cache: bool = no_effect(True)
    cache_path: str | None = no_effect(None)


class ModelSettings(ModelService):
    """A chat model's section: the run's `llm` and a benchmark's judge (envs/hle)."""

    backend: Literal["litellm", "local", "scripted"]
    # where the model is served, not what it is: the cache and the resume check key on the
    # model's identity (memrl.llm.litellm_backend), so a server may move to another port
    api_base: str | None = no_effect(None)
    # which model this is, for a self-hosted server that does not say (or to tell apart two
    # models served under one name): part of the cache key and of the resume check
    model_fingerprint: str | None = None
    timeout: float = no_effect(60.0, gt=0)
    max_concurrency: int = no_effect(8, ge=1)
    # the in-flight limit halves on rate limits and recovers additively (memrl.llm.ratelimit);
    # false: a fixed limit. The provider's per-minute limits pace requests (null = none).
    adaptive_concurrency: bool = no_effect(True)
    rpm: int | None = no_effect(None, ge=1, description="requests per minute; null = no limit")
    tpm: int | None = no_effect(None, ge=1, description="tokens per minute; null = no limit")
    max_retries: int = no_effect(6, ge=0)
    # null: the model's own (a model that takes only one temperature, e.g. o3-mini's 1, gets that
    # one; any other 0, greedy)
    temperature: float | None = Field(0.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(256, ge=1)
    n_ctx: int = Field(4096, ge=256)
    # CPU threads of the embedded model (not part of the response cache key either)
    n_threads: int | None = no_effect(None, ge=1)
    model_path: str | None = None
    script: str | None = None  # scripted backend: "package.module:function" (tests)
    backoff_base: float = no_effect(1.0, ge=0.0)
    backoff_max: float = no_effect(60.0, ge=0.0)
    # accepts images: true/false; null = litellm's model list (litellm), false (local)
    vision: bool | None = None
    # litellm: passed to litellm.completion as it is (e.g. {repeat_penalty: 1.0}); part of the
    # model's identity, hence of the cache key (memrl.llm.litellm_backend)
    extra: dict[str, Any] = Field(default_factory=dict)
    # local: completion (plain text continued; base models) | chat (the file's chat template)
    mode: Literal["completion", "chat"] = "completion"
    # local: keep the KV cache of the shared prompt prefix in whole aligned blocks; the answers
    # are the same as without (memrl.llm.local); false = evaluate every prompt from scratch
    reuse_prefix: bool = no_effect(True)
    prefix_block: int = no_effect(64, ge=1)
    # --- what the model is (memrl.llm.profile) ---------------------------------------------
    # a reasoning model spends hidden tokens from each call's completion budget; null = what
    # litellm's model list says (false for the embedded models)
    reasoning: bool | None = None
    # sent to the provider only when set; null = the provider's default (OpenAI: medium)
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = None
    # tokens added to every call's answer budget on a reasoning model; null = by effort
    # (memrl.llm.profile.REASONING_HEADROOM); 0 = the budgets are totals (the official presets)
    reasoning_headroom: int | None = Field(None, ge=0)
    # the most the model may write in one reply (a reasoning budget is capped there); null = litellm's
    max_output_tokens: int | None = Field(None, ge=1)
    # prices by hand, USD per million tokens, for a model litellm cannot price (null = litellm's
    # list); a model priced by neither is recorded as unpriced, never as $0
    price_per_mtok_in: float | None = no_effect(None, ge=0.0)
    price_per_mtok_cached_in: float | None = no_effect(None, ge=0.0)
    price_per_mtok_out: float | None = no_effect(None, ge=0.0)

    @model_validator(mode="after")
    def _check(self) -> "ModelSettings":
        if self.backend == "litellm" and not self.model:
            raise ValueError("a litellm backend needs `model` (e.g. openai/gpt-4o-mini)")
        if self.extra and self.backend != "litellm":
            raise ValueError("extra: settings passed to litellm; this backend is "
                             f"{self.backend!r}")
        if self.mode == "chat" and self.backend != "local":
            raise ValueError("mode: chat/completion is chosen by the model prefix for litellm "
                             "(openai/<m> chats, text-completion-openai/<m> continues text); "
                             "`mode` is for backend=local")
        if (self.price_per_mtok_in is None) != (self.price_per_mtok_out is None):
            raise ValueError("price_per_mtok_in: give both price_per_mtok_in and price_per_mtok_out "
                             "(USD per million tokens), or neither")
        if self.backend == "local" and (self.reasoning or self.reasoning_effort):
            raise ValueError("reasoning: the embedded models do not reason (backend local)")
        if self.backend == "local" and self.model_path is None and self.model:
            from memrl.llm.local_models import PACKAGED

            if self.model not in PACKAGED:
                raise ValueError(f"model: unknown embedded model {self.model!r}; known: "
                                 f"{sorted(PACKAGED)} (or set model_path=<any .gguf>)")
        return self


class LLMSettings(ModelSettings):
    """The run's model (solver and memory writer), with the run's spend limits: the run
    stops at a commit boundary before a batch would pass one (memrl.budget). A budget decides
    when a run stops, never what it computes: the same command with a higher one continues."""

    budget_usd: float | None = no_effect(None, gt=0, description="USD for the whole run; null = none")
    budget_tokens: int | None = no_effect(None, gt=0, description="tokens for the whole run; null = none")


class EmbedderSettings(ModelService):
    backend: Literal["minilm", "litellm", "hashing"]
    # where an API embedder is served: part of its embedding cache key and of the resume
    # check (no server identity is asked for embeddings)
    api_base: str | None = None
    # the hashing embedder's dimension; MiniLM is 384-d and API models say theirs
    dim: int | None = Field(None, ge=2)

    @model_validator(mode="after")
    def _check(self) -> "EmbedderSettings":
        if self.dim is not None and self.backend != "hashing":
            raise ValueError(f"dim: only the hashing embedder takes a dimension "
                             f"({self.backend} embeddings have the model's own)")
        return self


class PathsSettings(BaseModel):
    """The `paths` section: where machine-wide files live (memrl.cache)."""

    model_config = ConfigDict(extra="forbid")
    cache_dir: str = no_effect(description="response, embedding and data caches, the DB server's "
                               "data ($MEMRL_CACHE_DIR, else ~/.cache/memrl)")


class AgentSettings(BaseModel):
    """Which of the env's agents plays (`react` or one of its oracles)."""

    model_config = ConfigDict(extra="forbid")
    name: str


class MetricsSettings(BaseModel):
    """The `metrics` section: how metrics.json reads what the episodes leave undefined."""

    model_config = ConfigDict(extra="forbid")
    # an epoch with no failure has forgetting rate 0/0: count it as 0 | leave it out
    forgetting_zero_fail: Literal["zero", "skip"] = no_effect("zero")


# Sections whose schema is fixed (env and memory name their class, and so their schema, in
# `_target_`); memrl.result_keys reads the marks of the same schemas.
SECTION_SCHEMAS: dict[str, type[BaseModel]] = {
    "llm": LLMSettings, "embedder": EmbedderSettings, "agent": AgentSettings, "runner": RunnerSettings,
    "metrics": MetricsSettings}


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
    policy: "type[Policy]"  # the agent's policy class in the env's registry
    metrics: MetricsSettings = field(default_factory=MetricsSettings)


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
    for section, model in SECTION_SCHEMAS.items():
        try:
            parsed[section] = model.model_validate(_section(cfg, section))
        except ValidationError as exc:
            problems += _errors(section, exc)
    seed = cfg.get("seed", 0)
    if not isinstance(seed, int) or seed < 0:
        problems.append(f"seed: must be a non-negative integer (got {seed!r})")
    policy = _policy(classes["env"], parsed.get("agent"), problems)
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
    return Validated(env_cls=classes["env"], env=parsed["env"], memory_cls=classes["memory"],
                     memory=parsed["memory"], llm=parsed["llm"], embedder=parsed["embedder"],
                     agent=parsed["agent"], runner=parsed["runner"], seed=seed, policy=policy,
                     metrics=parsed["metrics"])


def _policy(env_cls: type | None, agent: AgentSettings | None, problems: list[str]) -> "type[Policy] | None":
    """The agent's policy from the env's registry; a problem naming the env's agents if absent."""
    if env_cls is None or agent is None:
        return None
    policies = getattr(env_cls, "POLICIES", None)
    if not policies:
        problems.append(f"env._target_: {env_cls.__name__} lists no agents (POLICIES)")
        return None
    if agent.name not in policies:
        problems.append(f"agent: env {getattr(env_cls, 'name', env_cls.__name__)!r} has no agent "
                        f"{agent.name!r} (its agents: {', '.join(sorted(policies))})")
        return None
    return policies[agent.name]
