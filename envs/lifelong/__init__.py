"""LifelongAgentBench (OS and DB tasks on real systems) behind the Env seam.

`loader` reads the benchmark's task files for both envs (and merges train and validation
tasks into the official task set); `memory_context` holds what both share for the official
code's memories (the episode as a chat history, the official memory display). The DB env
lives in `db_*.py` (`LifelongDbEnv`, config group env=lifelong_db); the OS env in `os_*.py`
(`LifelongOsEnv`, env=lifelong_os). The env classes
are imported on first access, so the command-line modules here
(`python -m memrl_envs.lifelong.db_server ...`) start without loading the envs.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_LAZY = {"LifelongDbEnv": ".db_env", "LifelongOsEnv": ".os_env"}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
