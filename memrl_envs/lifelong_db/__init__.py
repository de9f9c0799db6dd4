"""LifelongAgentBench DB tasks: SQL against a private MariaDB server, one database and account
per episode (env=lifelong_db).

The env class is imported on first access, so the command-line module here
(`python -m memrl_envs.lifelong_db.server ...`) starts without loading the env.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = ["LifelongDbEnv"]


def __getattr__(name: str) -> Any:
    if name == "LifelongDbEnv":
        return import_module(".env", __name__).LifelongDbEnv
    raise AttributeError(name)
