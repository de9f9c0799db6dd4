"""Runs of the tiny benchmark through `python -m memrl.cli run` in a subprocess, as the guard,
async and safe-text tests drive them: the command's base overrides, its environment, starting
one (`memrl_run` to the end, `memrl_start` in the background), waiting, reading its card."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from memrl.core.rundir import RunDir

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "configs"
KEY = "MEMRL_GUARD_TEST_KEY"
BASE = ["env=tiny", "memory=memrl", "embedder=hashing", "env.retrieval.delta=0.0",
        "runner.progress=false", f"hydra.searchpath=[file://{FIXTURES}]"]
SLOW = ["llm=scripted", "llm.script=tiny_env:slow_reply"]



def environ(tmp: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "MEMRL_CACHE_DIR": str(tmp / "cache"), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "NO_PROXY": "127.0.0.1,localhost",
           "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])}
    env.update(extra)
    return env


def memrl_run(args: list[str], tmp: Path, timeout: float = 180, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memrl.cli", "run", *BASE, *args], cwd=tmp, env=environ(tmp, **extra),
                          capture_output=True, text=True, timeout=timeout)


def memrl_start(args: list[str], tmp: Path, **extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "memrl.cli", "run", *BASE, *args], cwd=tmp,
                            env=environ(tmp, **extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(condition, timeout: float = 60.0, what: str = "condition") -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def card(run_dir: Path) -> dict:
    return json.loads(RunDir(run_dir).card.read_text())
