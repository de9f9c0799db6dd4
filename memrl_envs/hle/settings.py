"""Validated settings of the HLE env (the `env=hle` config group) and of its judge model."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from memrl.config.sections import ModelSettings
from memrl.core.fields import data_location, no_effect
from memrl.env.base import EnvSettings


class JudgeSettings(ModelSettings):
    """The model that grades answers: its own backend, model, key and base URL.

    `examples`: worked verdicts shown before the one asked for (a base model such as the
    embedded one needs them to answer in the format); null = 2 for `local`, 0 otherwise.
    `json_mode`: ask API models for a JSON object through the provider's JSON mode, where the
    provider has one (memrl's verdict rule only: the official rule's prompt asks for
    "field: value" lines).
    `verdict_rule` (memrl_envs/hle/judge.py): "memrl" asks for a JSON verdict and records a judge
    that gives none (failed call, unreadable reply) as `judge_error`; "official" asks for
    `field: value` lines, reads them as the official runner does (memrl/run/hle_runner.py
    `_hle_judge`) and counts a missing verdict as incorrect.
    """

    # the LLM section's fields and checks, with a judge's defaults
    name: str = "judge"
    backend: Literal["litellm", "local", "scripted"] = "litellm"
    timeout: float = no_effect(120.0, gt=0)
    max_tokens: int = Field(2048, ge=1)
    examples: int | None = Field(None, ge=0, le=2)
    json_mode: bool = True
    verdict_rule: Literal["memrl", "official"] = "memrl"

    @model_validator(mode="after")
    def _check(self) -> "JudgeSettings":
        if self.backend == "litellm" and not self.model:
            raise ValueError("model: a litellm judge needs a model (e.g. openai/o3-mini)")
        return self

    def n_examples(self) -> int:
        if self.examples is not None:
            return self.examples
        return 2 if self.backend == "local" else 0


class HLESettings(EnvSettings):
    """Where the questions come from, which of them to keep, and how episodes are graded.

    Which questions: `categories`, `modality`, `ratio` (per category), `subset_size` and
    `split` are applied in this order; each pick is a fixed hash of `subset_seed` and the
    question's id. `split` train | valid: `valid_fraction` of the questions, by hash.
    `max_tasks`: the first N after the filters (and the order).
    `order`: "dataset" (the source's row order) or "official" (grouped by category, each
    group shuffled by `numpy.random.RandomState(order_seed)`; memrl_envs/hle/data.py).
    `memory_format`: "memrl" (the memories in the user message, clipped to
    `memory_max_chars`) or "official" (their own system message, successes then failures,
    uncut; memrl_envs/hle/prompts.py).
    """

    name: str = "hle"
    data_path: str | None = data_location(
        None, description="a local .parquet/.jsonl/.json file (or a folder of them) in HLE's "
        "schema; null = load hf_dataset from the Hugging Face hub")
    hf_dataset: str = "cais/hle"
    hf_split: str = "test"
    hf_revision: str | None = None
    hf_token_env: str = no_effect("HF_TOKEN")
    categories: list[str] | None = Field(None, description="e.g. [Math, Physics]; null = all")
    modality: Literal["all", "text", "image"] = "all"
    ratio: float | None = Field(None, gt=0.0, le=1.0, description="fraction kept per category")
    subset_size: int | None = Field(None, ge=1, description="N questions; null = all")
    subset_seed: int = Field(0, ge=0)
    split: Literal["all", "train", "valid"] = "all"
    valid_fraction: float = Field(0.2, gt=0.0, lt=1.0)
    order: Literal["dataset", "official"] = "dataset"
    order_seed: int = Field(42, ge=0, description="order=official: the per-category shuffle's seed")
    max_steps: int = Field(1, ge=1, description="accepted for debug presets; episodes are one answer")
    max_tokens: int | None = Field(None, ge=1, description="solver tokens; null = the llm's max_tokens")
    memory_max_chars: int = Field(4000, ge=200, description="each injected memory is clipped to this "
                                  "(memory_format memrl)")
    memory_format: Literal["memrl", "official"] = "memrl"
    judge: JudgeSettings = Field(default_factory=lambda: JudgeSettings(model="openai/o3-mini"))

    @model_validator(mode="after")
    def _check(self) -> "HLESettings":
        if self.data_path is not None:
            path = Path(self.data_path).expanduser()
            if not path.exists():
                raise ValueError(f"data_path: {path} does not exist")
        elif importlib.util.find_spec("datasets") is None:
            raise ValueError(
                "data_path: not set, and loading cais/hle from the hub needs the `datasets` "
                "package (pip install datasets), or download it once to a parquet file")
        if self.categories is not None and not [c for c in self.categories if str(c).strip()]:
            raise ValueError("categories: give at least one category name, or null for all")
        return self
