"""The schemas of the config sections whose schema is fixed (docs/design.md §10): the model
sections (`llm`, a judge's, `embedder`), `agent`, `runner`, `metrics`, `logger` and `paths`.
The env and memory sections are validated by the `Settings` of the class their `_target_`
names. How a field bears on results is marked on it (memrl.core.fields).

One owner for each default: a field's default here (or on the env's / memory's `Settings`)
is the one default of its key. The YAML of configs/ states only `_target_`, names,
interpolations and what differs from the schema; what a key means is said on its field. The
run card records the full config, every default included (memrl.config.validate.full_config).

Since the YAML leaves most keys out, the composed config's sections are open
(memrl.config.frame): `memory.alpha=0.1` overrides a key no YAML names, exactly as it did
when the YAML named it (the same command line, the same run directory name); a key that
no schema knows is refused by the validation (`memrl: ...`, exit 2), not by Hydra."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from memrl.core.fields import extent, no_effect
from memrl.core.rundir import RunDir


class ModelService(BaseModel):
    """What the LLM and the embedder sections share: which model, the name of the
    environment variable holding its key, and its on-disk cache. Where the model is served
    (`api_base`) each declares itself: a chat model's identity is checked with its server
    (so its URL does not change results), an embedder's is not (its URL still does)."""

    model_config = ConfigDict(extra="forbid")
    name: str  # the config option's name (configs/<group>/<name>.yaml); names the run directory
    model: str | None = None  # the model as its backend names it (litellm: provider/model)
    # name of the env var holding the key (never the key itself)
    api_key_env: str | None = no_effect(None)
    # a cache replays answers (or embeddings); it does not change them
    cache: bool = no_effect(True)
    cache_path: str | None = no_effect(None)  # the cache's file; null = the cache folder's (memrl.core.cachedir)


class ModelSettings(ModelService):
    """A chat model's section: the run's `llm` and a benchmark's judge (memrl_envs/hle)."""

    # litellm (APIs, servers) | local (the embedded GGUF model) | scripted (tests)
    backend: Literal["litellm", "local", "scripted"]
    # where the model is served, not what it is: the cache and the resume check key on the
    # model's identity (memrl.llm.litellm_backend), so a server may move to another port
    api_base: str | None = no_effect(None)
    # which model this is, for a self-hosted server that does not say (or to tell apart two
    # models served under one name): part of the cache key and of the resume check
    model_fingerprint: str | None = None
    timeout: float = no_effect(60.0, gt=0)  # seconds per request before it is retried
    max_concurrency: int = no_effect(8, ge=1)  # model calls in flight at most (memrl.llm.client)
    # the in-flight limit halves on rate limits and recovers additively (memrl.llm.ratelimit);
    # false: a fixed limit. The provider's per-minute limits pace requests (null = none).
    adaptive_concurrency: bool = no_effect(True)
    rpm: int | None = no_effect(None, ge=1, description="the provider's requests per minute (paces "
                                "requests); null = no limit")
    tpm: int | None = no_effect(None, ge=1, description="its tokens per minute; null = no limit (429s "
                                "still halve the in-flight limit)")
    max_retries: int = no_effect(6, ge=0)  # tries after the first on a transient error
    # null: the model's own (a model that takes only one temperature, e.g. o3-mini's 1, gets that
    # one; any other 0, greedy)
    temperature: float | None = Field(0.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)  # nucleus sampling (with temperature > 0)
    max_tokens: int = Field(256, ge=1)  # answer tokens of a call that names none (the memory writer's are its own)
    n_ctx: int = Field(4096, ge=256)  # local: the context window the embedded model is loaded with
    # CPU threads of the embedded model (not part of the response cache key either)
    n_threads: int | None = no_effect(None, ge=1)
    model_path: str | None = Field(None, description="local: any .gguf instead of a packaged model "
                                   "(its id is then its file name + hash)")
    script: str | None = None  # scripted backend: "package.module:function" (tests)
    backoff_base: float = no_effect(1.0, ge=0.0)  # seconds of the first retry's wait (doubled each retry)
    backoff_max: float = no_effect(60.0, ge=0.0)  # the longest wait between retries
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
    prefix_block: int = no_effect(64, ge=1)  # local: tokens per reused block of the prompt prefix
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
    price_per_mtok_cached_in: float | None = no_effect(None, ge=0.0)  # USD per million provider-cached prompt tokens
    price_per_mtok_out: float | None = no_effect(None, ge=0.0)  # USD per million completion tokens

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
    stops at a commit boundary before a batch would pass one (memrl.control.budget). A budget decides
    when a run stops, never what it computes: the same command with a higher one continues."""

    budget_usd: float | None = no_effect(None, gt=0, description="USD for the whole run (all sessions); "
                                         "null = no limit")
    budget_tokens: int | None = no_effect(None, gt=0, description="prompt + completion tokens for the "
                                          "whole run (all sessions); null = no limit")


class EmbedderSettings(ModelService):
    # minilm (packaged, offline) | litellm (API embeddings) | hashing (tests)
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
    """The `paths` section: where machine-wide files live (memrl.core.cachedir)."""

    model_config = ConfigDict(extra="forbid")
    cache_dir: str = no_effect(description="response, embedding and data caches, the DB server's "
                               "data ($MEMRL_CACHE_DIR, else ~/.cache/memrl)")


class AgentSettings(BaseModel):
    """Which of the env's agents plays (`react` or one of its oracles)."""

    model_config = ConfigDict(extra="forbid")
    name: str  # react (the model acts) or one of the env's oracles (POLICIES)


class MetricsSettings(BaseModel):
    """The `metrics` section: how metrics.json reads what the episodes leave undefined."""

    model_config = ConfigDict(extra="forbid")
    # an epoch with no failure has forgetting rate 0/0: zero = count it as 0 (pulls the mean
    # down) | skip = leave it out. Both means and the count of such epochs are in metrics.json
    # whatever is chosen
    forgetting_zero_fail: Literal["zero", "skip"] = no_effect("zero")


class RunnerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    epochs: int = extent(10, ge=1, description="passes over the task set (the paper: 10)")
    batch_size: int = Field(1, ge=1, description="B=1 is strictly online; a larger B plays B "
                            "episodes concurrently")
    # the progress bar: true, false, or auto = only when stderr is a terminal (memrl/control/live.py)
    progress: bool | Literal["auto"] = no_effect("auto")
    metrics_every_epoch: bool = no_effect(True)  # write metrics.json after every epoch (else at the end)
    # stop (uncommitted) when more than this fraction of a batch's (>= 2 episodes) or of an
    # epoch's episodes ended errored (memrl.control.guards); decides when a run stops, not its results
    max_error_rate: float = no_effect(0.5, ge=0.0, le=1.0)
    task_order: Literal["listed", "seeded"] = Field(
        "listed", description="listed: the env's task list in its own order, every epoch (the paper); "
        "seeded: that list permuted once by the run's seed, the same order every epoch (so a seed "
        "changes the order; memrl.core.seeding.seeded_order)")
    # transfer protocol: after each training epoch, evaluate the frozen bank on another split
    mode: Literal["train", "transfer"] = "train"
    eval_split: str | None = Field(None, description="transfer: the held-out split (e.g. valid_seen, "
                                   "ALFWorld's in-distribution transfer split)")
    eval_max_tasks: int | None = Field(None, ge=1)  # transfer: the first N held-out tasks; null = all
    # batch: batches of batch_size retrieve at batch start, learn in task order (deterministic);
    # async: a free pool of max_in_flight episodes, each retrieving when it starts and
    # committed when it finishes (timing-dependent; its retrievals are logged in
    # state/launches.jsonl, so it replays: docs/concurrency.md). Both
    # change results, and so does max_in_flight (the staleness of async retrievals; unused by
    # batch, but a result key all the same: one mark per key)
    schedule: Literal["batch", "async"] = "batch"
    max_in_flight: int = Field(8, ge=1, description="async: episodes in flight at once")
    # async: the next epoch's episodes start during this epoch's drain (a task's next episode
    # once its previous one is committed; commits stay in epoch order); false: epochs are
    # barriers. A transfer run's per-epoch evaluation always makes them barriers
    epoch_overlap: bool = Field(True, description="async: start the next epoch in this one's drain")
    # async only: play a finished async run again from its launch log and commit order
    replay_from: str | None = None

    @model_validator(mode="after")
    def _check_transfer(self) -> "RunnerSettings":
        if self.mode == "transfer" and not self.eval_split:
            raise ValueError("eval_split: transfer mode needs a held-out split (e.g. valid_seen)")
        if self.replay_from:
            if self.schedule != "async":
                raise ValueError("replay_from: replays an async run; set runner.schedule=async")
            if not RunDir(Path(self.replay_from).expanduser()).launches.is_file():
                raise ValueError(f"replay_from: {self.replay_from} holds no launch log "
                                 f"({RunDir.STATE}/{RunDir.LAUNCHES}): not an async run directory")
        return self

    @property
    def async_barriers(self) -> bool:
        """Whether an async run's epochs are barriers: overlap off, or a transfer run (its
        frozen-bank evaluation follows each epoch)."""
        return not self.epoch_overlap or self.mode == "transfer"


class WandbSettings(BaseModel):
    """`logger.wandb` (memrl.control.tracking): offline by default, the run written to
    <run dir>/wandb/ (`wandb sync` uploads it later); online needs mode=online AND the key in
    the variable named by api_key_env, else it stays offline and says so."""

    model_config = ConfigDict(extra="forbid")
    mode: Literal["offline", "online", "disabled"] = "offline"  # online also needs the key (api_key_env)
    project: str = "memrl"  # the wandb project
    entity: str | None = None  # the wandb team or user; null = the key's default
    group: str | None = Field(None, description='e.g. a sweep name; null = "<env>/<memory>"')
    tags: list[str] = Field(default_factory=list)  # tags of the wandb run
    api_key_env: str = "WANDB_API_KEY"  # the environment variable holding the wandb key


class LoggerSettings(BaseModel):
    """An experiment tracker sees the metrics; it never changes them."""

    model_config = ConfigDict(extra="forbid")
    name: Literal["none", "wandb"] = no_effect("none")  # none | wandb (memrl.control.tracking)
    wandb: WandbSettings = no_effect(WandbSettings())  # logger=wandb's settings


# Sections whose schema is fixed (env and memory name their class, and so their schema, in
# `_target_`); memrl.config.keys reads the marks of the same schemas.
SECTION_SCHEMAS: dict[str, type[BaseModel]] = {
    "llm": LLMSettings, "embedder": EmbedderSettings, "agent": AgentSettings, "runner": RunnerSettings,
    "metrics": MetricsSettings, "logger": LoggerSettings, "paths": PathsSettings}
