"""Validated settings of the Lifelong-OS env (the `env=lifelong_os` config group)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .loader import HUB_PREFIX


class LifelongOsSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "lifelong_os"
    data_path: str = Field(description="the OS task file (JSON keyed by sample index) or hf://<repo>[/<config>]")
    hub_split: str = "train"
    split: Literal["all", "train", "validation"] = "all"
    split_file: str | None = None
    val_fraction: float = Field(0.3, gt=0.0, lt=1.0)
    split_seed: int = 0
    max_steps: int = Field(15, ge=1)
    max_tasks: int | None = Field(None, ge=1)
    task_ids: list[str] | None = None
    # the system
    rootfs_dir: str | None = Field(None, description="cache folder of root file systems (null: "
                                   "$MEMRL_ROOTFS_DIR, $MEMRL_CACHE_DIR/rootfs or ~/.cache/memrl/rootfs)")
    build_rootfs: bool = Field(False, description="build the root file system on first use when missing")
    scratch_dir: str | None = None
    upper_size_mb: int = Field(1024, ge=16)
    pids_max: int = Field(1024, ge=0)
    workdir: str = "/"
    # the episode
    command_timeout_s: float = Field(20.0, gt=0)
    observation_max_chars: int = Field(2000, ge=100)
    # the prompt
    with_example: bool = True
    max_tokens: int = Field(256, ge=1, description="tokens per action reply")
    cache_dir: str | None = None

    @model_validator(mode="after")
    def _check(self) -> "LifelongOsSettings":
        if not self.data_path.startswith(HUB_PREFIX) and not Path(self.data_path).expanduser().is_file():
            raise ValueError(f"data_path: no OS task file at {self.data_path} (set LIFELONG_DATA or "
                             "env.data_path; the benchmark's os_interaction JSON, or hf://<repo>/<config>)")
        if self.split_file is not None and self.split == "all":
            raise ValueError("split_file: only used with split=train or split=validation")
        if not self.workdir.startswith("/"):
            raise ValueError("workdir: must be an absolute path inside the task's system")
        if self.scratch_dir is not None and not Path(self.scratch_dir).expanduser().is_dir():
            raise ValueError(f"scratch_dir: {self.scratch_dir} is not a folder")
        return self
