"""Validated settings of the Lifelong-OS env (the `env=lifelong_os` config group)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from memrl.core.fields import no_effect
from memrl_envs.lifelong.settings import LifelongTaskSettings


class LifelongOsSettings(LifelongTaskSettings):
    FILE_KIND = "OS task"
    FILE_HINT = "the benchmark's os_interaction JSON"
    VAL_FILE = "os_interaction_val.json"

    name: str = "lifelong_os"
    # the system
    rootfs_dir: str | None = no_effect(None, description="cache folder of root file systems (null: "
                                   "$MEMRL_ROOTFS_DIR, $MEMRL_CACHE_DIR/rootfs or ~/.cache/memrl/rootfs)")
    build_rootfs: bool = no_effect(False, description="build the root file system on first use when missing")
    scratch_dir: str | None = no_effect(None, description="where per-episode mount points are made; "
                                        "null = the system temp folder")
    upper_size_mb: int = Field(1024, ge=16, description="room for what one episode writes (tmpfs)")
    pids_max: int = Field(1024, ge=0, description="processes of one episode's commands (pids cgroup); 0 = no cap")
    memory_mb: int | None = Field(2048, ge=64, description="memory cgroup of one whole episode (its tmpfs "
                                  "upper layer counts); null = no cap")
    max_parallel: int | None = no_effect(None, ge=1, description="episode sandboxes at once; null = as many as "
                                         "fit the machine at the caps")
    workdir: str = Field("/", description="where every command starts")
    # the episode
    command_timeout_s: float = Field(20.0, gt=0, description="per command, set-up and check included "
                                     "(the benchmark's)")
    observation_max_chars: int = Field(2000, ge=100)
    # the prompt
    with_example: bool = True
    max_tokens: int = Field(256, ge=1, description="tokens per action reply")

    @model_validator(mode="after")
    def _check(self) -> "LifelongOsSettings":
        if not self.workdir.startswith("/"):
            raise ValueError("workdir: must be an absolute path inside the task's system")
        if self.scratch_dir is not None and not Path(self.scratch_dir).expanduser().is_dir():
            raise ValueError(f"scratch_dir: {self.scratch_dir} is not a folder")
        if self.memory_mb is not None and self.memory_mb <= self.upper_size_mb:
            raise ValueError(f"memory_mb ({self.memory_mb}) must exceed upper_size_mb ({self.upper_size_mb}): "
                             "what an episode writes is held in memory and counts against its memory cap")
        return self
