"""Validated settings of the Lifelong-DB env (the `env=lifelong_db` config group)."""

from __future__ import annotations

import os
import re
from typing import Literal

from pydantic import Field, model_validator

from memrl.core.fields import no_effect
from memrl_envs.lifelong.settings import LifelongTaskSettings


class LifelongDbSettings(LifelongTaskSettings):
    FILE_KIND = "DB task"
    FILE_HINT = "the benchmark's db JSON"
    VAL_FILE = "db_val.json"

    name: str = "lifelong_db"
    # the server. managed: a private MariaDB in server_dir, started on first use (or joined
    # when `make db-up` / another run already started it) and stopped when its last user
    # closes. external: any MySQL 8 / MariaDB at host:port (or socket); the password is read
    # from the environment variable named by password_env (never written in a config).
    server: Literal["managed", "external"] = "managed"
    # where the server is and its data lives (each episode creates its own database)
    server_dir: str | None = no_effect(None)
    host: str = no_effect("127.0.0.1")
    port: int | None = no_effect(None, ge=1, le=65535)
    socket: str | None = no_effect(None)
    user: str = no_effect("root")
    password_env: str | None = no_effect(None)
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

    @model_validator(mode="after")
    def _check(self) -> "LifelongDbSettings":
        if self.server == "managed" and not self.server_dir:
            raise ValueError("server_dir: a managed server needs a folder (env.server_dir)")
        if self.server == "external":
            if self.password_env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.password_env):
                raise ValueError("password_env: must be the NAME of an environment variable, not a password")
            if self.password_env is not None and self.password_env not in os.environ:
                raise ValueError(f"password_env: environment variable {self.password_env} is not set")
        return self
