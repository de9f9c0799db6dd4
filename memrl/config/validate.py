"""Validation of the composed Hydra config, before anything is built or any model is called.

Each section is checked by a pydantic model; a bad value stops the run with one message per
problem, each naming the full key (e.g. `memory.lam: Input should be less than or equal to 1`).
Env and memory sections name their class in `_target_`; the class carries its `Settings`.
The agent must be one of the env's policies (`POLICIES`); whether it needs a model is the
policy's `needs_llm`. Every section is checked, `logger` and `paths` included, and a
top-level key that is no section (`+runer.epochs=2`) is refused, all before a run writes
anything (memrl.control.session.execute).

A schema owns each default and the YAML leaves it out (memrl.config.sections), so the
composed config holds only what was said. `full_config` is what a run records in its card
and compares on resume: every section as validated, defaults included. `with_defaults`
reads a config recorded before that (an older run card) the same way: a key it lacks holds
its schema default.

Importing this module registers the config resolver `memrl.paper_delta` (see `paper_delta`).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Mapping

from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue
from pydantic import BaseModel, ValidationError
from pydantic_core import to_jsonable_python

from memrl.config.frame import SECTIONS, TOP_LEVEL
from memrl.config.sections import (SECTION_SCHEMAS, AgentSettings, EmbedderSettings, LLMSettings, LoggerSettings,
                                   MetricsSettings, PathsSettings, RunnerSettings)
from memrl.core.errors import ConfigError
from memrl.core.fields import _submodel

if TYPE_CHECKING:
    from memrl.env.base import Policy

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
    logger: LoggerSettings = field(default_factory=LoggerSettings)
    paths: PathsSettings | None = None


def _errors(section: str, exc: ValidationError, schema: type[BaseModel] | None = None) -> list[str]:
    """One line per problem, each naming its full key; a key the schema does not have gets the
    closest one it has (`did you mean memory.lam?`, memrl.config.describe.suggest)."""
    from memrl.config.describe import schema_keys, suggest

    out = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err.get("type") == "extra_forbidden" and schema is not None:
            near = suggest(f"{section}.{loc}", [f"{section}.{k}" for k in schema_keys(schema)])
            out.append(f"{section}.{loc}: not a key of {section}" + (f"; did you mean {near}?" if near else "")
                       + " (`memrl config` lists every key with its default and meaning)")
            continue
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
                problems += _errors(section, exc, cls.Settings)
    for section, model in SECTION_SCHEMAS.items():
        try:
            parsed[section] = model.model_validate(_section(cfg, section))
        except ValidationError as exc:
            problems += _errors(section, exc, model)
    seed = cfg.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        problems.append(f"seed: must be a non-negative integer (got {seed!r})")
    problems += _unknown_top_level(cfg)
    policy = _policy(classes["env"], parsed.get("agent"), problems)
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
    return Validated(env_cls=classes["env"], env=parsed["env"], memory_cls=classes["memory"],
                     memory=parsed["memory"], llm=parsed["llm"], embedder=parsed["embedder"],
                     agent=parsed["agent"], runner=parsed["runner"], seed=seed, policy=policy,
                     metrics=parsed["metrics"], logger=parsed["logger"], paths=parsed["paths"])


def _unknown_top_level(cfg: DictConfig) -> list[str]:
    """A top-level key that is no section (`+foo=1`, `+runer.epochs=2`): a problem each."""
    out = []
    for key in cfg.keys():
        key = str(key)
        if key in TOP_LEVEL or key == "hydra":
            continue
        near = difflib.get_close_matches(key, TOP_LEVEL, n=1)
        hint = f"; did you mean {near[0]}?" if near else ""
        out.append(f"{key}: not a key of the config (its keys: {', '.join(TOP_LEVEL)}){hint}")
    return out


# ------------------------------------------------------------------------------ full config
def full_config(cfg: DictConfig, v: Validated | None = None) -> dict[str, Any]:
    """The config a run records in its card and compares on resume: the composed config with
    each section replaced by its validated settings, every default included (`_target_`
    kept), so the card says every value the run used, whether the YAML stated it or left it
    to the schema. `v`: the config's validation, if done already."""
    v = validate(cfg) if v is None else v
    config: dict[str, Any] = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    config.pop("hydra", None)
    for section in SECTIONS:
        node = config.get(section)
        settings: BaseModel = getattr(v, section)
        dumped = settings.model_dump(mode="json")
        target = node.get("_target_") if isinstance(node, dict) else None
        config[section] = {"_target_": target, **dumped} if target else dumped
    config["seed"] = v.seed
    return config


def with_defaults(config: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded config (a run card's) with every key it lacks set to its schema's default,
    as `full_config` records it: a card written before the card held the full config reads
    as the full config. Nothing is validated (the card may name paths of another machine); a
    section whose schema is unknown here (a class that does not import) is left as it is."""
    out = dict(config)
    for section in SECTIONS:
        node = out.get(section)
        schema = _schema_of(section, node)
        if schema is not None and (node is None or isinstance(node, Mapping)):
            out[section] = _filled(schema, node or {})
    return out


def _schema_of(section: str, node: Any) -> type[BaseModel] | None:
    if section in SECTION_SCHEMAS:
        return SECTION_SCHEMAS[section]
    target = node.get("_target_") if isinstance(node, Mapping) else None
    return _target_schema(str(target)) if target else None


@lru_cache(maxsize=None)
def _target_schema(target: str) -> type[BaseModel] | None:
    from memrl.config.keys import MOVED_TARGETS

    try:
        cls = get_class(MOVED_TARGETS.get(target, target))
    except Exception:  # not installed here, or a class that no longer exists
        return None
    schema = getattr(cls, "Settings", None)
    return schema if isinstance(schema, type) and issubclass(schema, BaseModel) else None


def _filled(schema: type[BaseModel], node: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(node)
    for name, info in schema.model_fields.items():
        sub = _submodel(info.annotation)
        if name in out:
            if sub is not None and isinstance(out[name], Mapping):
                out[name] = _filled(sub, out[name])
        elif not info.is_required():
            out[name] = to_jsonable_python(info.get_default(call_default_factory=True))
    return out


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
