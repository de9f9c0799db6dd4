"""Validated settings of the BigCodeBench env (the `env=bigcodebench` config group)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from memrl.core.fields import data_location, no_effect
from memrl.env.base import EnvSettings


class BigCodeBenchSettings(EnvSettings):
    """What `env=bigcodebench` accepts; every problem names its field."""

    # `split` is instruct|complete: a transfer run's eval_split replaces the train/validation part
    EVAL_SPLIT_FIELD = "part"

    name: str = "bigcodebench"
    # where the tasks come from: a local JSONL in the hub's schema, or (null) the hub
    data_path: str | None = data_location(None, description="local JSONL; null = the Hugging Face hub")
    version: str = Field("v0.1.4", description="hub split name (the dataset version)")
    split: Literal["instruct", "complete"] = "instruct"
    subset: Literal["full", "hard"] = Field("hard", description="hard (148 tasks) | full (1,140)")
    # train/validation division (7:3 by seed 42, as in the paper), kept in a split file
    part: Literal["train", "validation", "all"] = "train"
    split_seed: int = Field(42, ge=0)
    train_ratio: float = Field(0.7, gt=0.0, lt=1.0)
    split_file: str | None = data_location(None, description="JSON split file; null = <cache_dir>/"
                                           "bigcodebench/splits/<subset>-<n>tasks-<ids>-seed<split_seed>-r<train_ratio>-strsort.json")
    max_steps: int = Field(1, ge=1, description="accepted for debug presets; an episode is one attempt")
    max_tokens: int = Field(1280, ge=1, description="tokens of the code reply (bigcodebench's default)")
    # execution (bigcodebench's checker inside the sandbox)
    time_limit_s: float = Field(240.0, gt=0, description="per-task test time (the benchmark's 240 s)")
    memory_mb: int = Field(4096, ge=256, description="address-space limit of each process in the sandbox "
                           "(the checker's own limit is set to match)")
    nproc: int = Field(256, ge=8, description="processes+threads the sandbox may hold (its pids cgroup)")
    sandbox_memory_mb: int | None = Field(4096, ge=256, description="memory cgroup of one whole sandbox "
                                          "(its tmpfs folders count); null = no cap")
    disk_mb: int | None = Field(1024, ge=16, description="the sandbox's work folder (tmpfs); "
                                "null = a host folder, uncapped")
    tmp_mb: int | None = Field(256, ge=16, description="size of each of the sandbox's /tmp and /dev/shm (tmpfs)")
    calibrated: bool = Field(True, description="prepend the code prompt, as bigcodebench's calibrated eval")
    max_parallel: int | None = no_effect(None, ge=1, description="sandboxes at once; null = CPU count; "
                                         "lowered at start to what fits the machine at the caps")
    intent: Literal["task", "prompt"] = Field("task", description="retrieval key: task description | whole prompt")
    # how injected memories are shown (prompts.py): memrl's shared block, or the official
    # runner's layout (typed entries in selection order, each cut to memory_chars // shown)
    memory_format: Literal["memrl", "official"] = Field("memrl", description="memory display: memrl | official")
    memory_chars: int = Field(2000, ge=1, description="memory_format=official: characters of all "
                              "entries, split evenly among the memories shown")
    official_header_bug: bool = Field(False, description="memory_format=official: a success shows its whole "
                                      "text, its Task header included (the official header pattern never "
                                      "matches); false: the header is stripped, as intended")
    cache_dir: str | None = no_effect(None)

    @model_validator(mode="after")
    def _check(self) -> "BigCodeBenchSettings":
        if self.data_path is not None and not Path(self.data_path).expanduser().is_file():
            raise ValueError(f"data_path: no file at {self.data_path} (a JSONL in BigCodeBench's schema)")
        if self.split_file is not None:
            path = Path(self.split_file).expanduser()
            if path.exists() and not path.is_file():
                raise ValueError(f"split_file: {self.split_file} is not a file")
        tmpfs = (self.disk_mb or 0) + 2 * (self.tmp_mb or 0)
        if self.sandbox_memory_mb is not None and self.sandbox_memory_mb <= tmpfs:
            raise ValueError(f"sandbox_memory_mb ({self.sandbox_memory_mb}) must exceed disk_mb + 2 x tmp_mb "
                             f"({tmpfs}): the sandbox's tmpfs folders are held in memory and count against it")
        return self
