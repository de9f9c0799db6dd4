"""Shared fixtures.

`alfworld_sweep`: one real, small sweep (MemRL and no memory, 2 ALFWorld games × 2 epochs ×
2 steps, the embedded model, its own empty response cache), made once per test session
through the command line and shared by the tests that read runs the way a user would
(the Inspect export, the MemRL page in a browser, the live status). Its output is kept
(`stdout`: Hydra's console log; `stderr`: where a progress bar would go): the command ran
without a terminal, as under Slurm or nohup.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from data_paths import ALFWORLD

pytest_plugins = ["require_plugin"]  # no silent skips: MEMRL_TEST_REQUIRE=all makes a skip a failure

SWEEP_METHODS = ("memrl", "none")


@pytest.fixture(scope="session")
def alfworld_sweep(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if not ALFWORLD.is_dir():
        pytest.skip(f"ALFWorld data not at {ALFWORLD}")
    root = tmp_path_factory.mktemp("sweep")
    cache = root / "cache"
    env = dict(os.environ, ALFWORLD_DATA=str(ALFWORLD), MEMRL_CACHE_DIR=str(cache),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", LITELLM_LOCAL_MODEL_COST_MAP="True")
    args = ["-m", f"memory={','.join(SWEEP_METHODS)}", "env.split=valid_seen", "env.max_tasks=2",
            "env.max_steps=2", "runner.epochs=2", "llm=local", f"hydra.sweep.dir={root / 'sweep'}"]
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "memrl.cli", "run", *args], env=env, capture_output=True,
                         text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    print(f"\nalfworld_sweep: {len(SWEEP_METHODS)} runs in {time.monotonic() - t0:.0f} s")
    (root / "stdout.log").write_text(out.stdout, encoding="utf-8")
    (root / "stderr.log").write_text(out.stderr, encoding="utf-8")
    return {"sweep": root / "sweep", "cache": cache, "stdout": root / "stdout.log",
            "stderr": root / "stderr.log"}
