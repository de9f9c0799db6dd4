"""Validated settings of the Lifelong-DB env (the `env=lifelong_db` config group)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .loader import HUB_PREFIX


class LifelongDbSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "lifelong_db"
    data_path: str = Field(description="the DB task file (JSON keyed by sample index) or hf://<repo>[/<config>]")
    hub_split: str = "train"
    split: Literal["all", "train", "validation"] = "all"
    split_file: str | None = None
    val_fraction: float = Field(0.3, gt=0.0, lt=1.0)
    split_seed: int = 0
    max_steps: int = Field(15, ge=1)
    max_tasks: int | None = Field(None, ge=1)
    task_ids: list[str] | None = None
    # the server
    server: Literal["managed", "external"] = "managed"
    server_dir: str | None = None
    host: str = "127.0.0.1"
    port: int | None = Field(None, ge=1, le=65535)
    socket: str | None = None
    user: str = "root"
    password_env: str | None = None
    episode_user_host: str = "%"
    mysql8_compat: bool = Field(True, description="on MariaDB, give MySQL 8's results (GROUP BY order, DELETE alias)")
    # the episode
    statement_timeout_s: float = Field(10.0, gt=0)
    max_result_rows: int = Field(1000, ge=1)
    observation_max_chars: int = Field(3000, ge=100)
    # the prompt
    prompt_rows: int | None = Field(None, ge=0, description="table rows shown in the prompt; null = all")
    with_example: bool = True
    max_tokens: int = Field(256, ge=1, description="tokens per action reply")
    cache_dir: str | None = None

    @model_validator(mode="after")
    def _check(self) -> "LifelongDbSettings":
        if not self.data_path.startswith(HUB_PREFIX) and not Path(self.data_path).expanduser().is_file():
            raise ValueError(f"data_path: no DB task file at {self.data_path} "
                             "(set LIFELONG_DATA or env.data_path; the benchmark's db JSON, or hf://<repo>/<config>)")
        if self.server == "managed" and not self.server_dir:
            raise ValueError("server_dir: a managed server needs a folder (env.server_dir)")
        if self.server == "external":
            if self.password_env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.password_env):
                raise ValueError("password_env: must be the NAME of an environment variable, not a password")
            if self.password_env is not None and self.password_env not in os.environ:
                raise ValueError(f"password_env: environment variable {self.password_env} is not set")
        if self.split_file is not None and self.split == "all":
            raise ValueError("split_file: only used with split=train or split=validation")
        return self
