"""LifelongAgentBench OS tasks: shell commands in a disposable Debian root file system, in the
sandbox (env=lifelong_os).

The env class is imported on first access, so the command-line module here
(`python -m memrl_envs.lifelong_os.rootfs ...`) starts without loading the env.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = ["LifelongOsEnv"]


def __getattr__(name: str) -> Any:
    if name == "LifelongOsEnv":
        return import_module(".env", __name__).LifelongOsEnv
    raise AttributeError(name)
