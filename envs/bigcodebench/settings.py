"""Validated settings of the BigCodeBench env (the `env=bigcodebench` config group)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class BigCodeBenchSettings(BaseModel):
    """What `env=bigcodebench` accepts; every problem names its field."""

    model_config = ConfigDict(extra="forbid")

    name: str = "bigcodebench"
    # where the tasks come from: a local JSONL in the hub's schema, or (null) the hub
    data_path: str | None = Field(None, description="local JSONL; null = the Hugging Face hub")
    version: str = Field("v0.1.4", description="hub split name (the dataset version)")
    split: Literal["instruct", "complete"] = "instruct"
    subset: Literal["full", "hard"] = "hard"
    # train/validation division (7:3 by seed 42, as in the paper), kept in a split file
    part: Literal["train", "validation", "all"] = "train"
    split_seed: int = Field(42, ge=0)
    train_ratio: float = Field(0.7, gt=0.0, lt=1.0)
    split_file: str | None = Field(None, description="JSON split file; null = one in cache_dir")
    max_tasks: int | None = Field(None, ge=1)
    task_ids: list[str] | None = None
    max_steps: int = Field(1, ge=1, description="accepted for debug presets; an episode is one attempt")
    max_tokens: int = Field(1280, ge=1, description="tokens of the code reply (bigcodebench's default)")
    # execution (bigcodebench's checker inside the sandbox)
    time_limit_s: float = Field(240.0, gt=0, description="per-task test time (the benchmark's 240 s)")
    memory_mb: int = Field(4096, ge=256, description="address-space limit of the sandbox")
    nproc: int = Field(256, ge=8, description="processes+threads the sandbox may hold")
    calibrated: bool = Field(True, description="prepend the code prompt, as bigcodebench's calibrated eval")
    max_parallel: int | None = Field(None, ge=1, description="sandboxes at once; null = CPU count")
    intent: Literal["task", "prompt"] = Field("task", description="retrieval key: task description | whole prompt")
    cache_dir: str | None = None

    @model_validator(mode="after")
    def _check(self) -> "BigCodeBenchSettings":
        if self.data_path is not None and not Path(self.data_path).expanduser().is_file():
            raise ValueError(f"data_path: no file at {self.data_path} (a JSONL in BigCodeBench's schema)")
        if self.split_file is not None:
            path = Path(self.split_file).expanduser()
            if path.exists() and not path.is_file():
                raise ValueError(f"split_file: {self.split_file} is not a file")
        if self.task_ids is not None and not self.task_ids:
            raise ValueError("task_ids: an empty list selects no task (use null for all)")
        return self
