"""Shared fixtures.

`alfworld_sweep`: one real, small sweep (MemRL and no memory, 2 ALFWorld games × 2 epochs ×
2 steps, the embedded model's answers from its cassette, tests/cassette.py), made once per test
session through the command line, under pytest-xdist once for all workers (the first builds
it under a file lock, the others read it), and shared by the tests that read runs the way a
user would (the Inspect export, the MemRL page in a browser, the live status). Its output is
kept (`stdout`: Hydra's console log; `stderr`: where a progress bar would go): the command ran
without a terminal, as under Slurm or nohup.

`cassette`: a test's own cache folder, holding its cassette's recorded answers (tests/cassette.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cassette import Cassette, name_of
from data_paths import ALFWORLD
from filelock import FileLock

# no silent skips (MEMRL_TEST_REQUIRE=all makes a skip a failure); heaviest files first for xdist
pytest_plugins = ["require_plugin", "schedule_plugin"]

SWEEP_METHODS = ("memrl", "none")


@pytest.fixture
def cassette(request: pytest.FixtureRequest, tmp_path: Path):
    """The test's cache folder (for MEMRL_CACHE_DIR), its cassette's answers loaded; after the
    test, the calls the cassette did not hold are counted (or, recording, the cassette is written)."""
    tape = Cassette(name_of(request.node.nodeid), tmp_path / "cache")
    tape.start()
    yield tape.cache_dir
    missed = tape.finish()
    if missed:
        request.node.user_properties.append(("cassette_misses", (tape.name, missed)))


@pytest.fixture(scope="session")
def alfworld_sweep(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> dict[str, Path]:
    if not ALFWORLD.is_dir():
        pytest.skip(f"ALFWorld data not at {ALFWORLD}")
    shared = tmp_path_factory.getbasetemp() if worker_id == "master" else tmp_path_factory.getbasetemp().parent
    root = shared / "alfworld_sweep"
    with FileLock(str(shared / "alfworld_sweep.lock")):
        if not (root / "done").is_file():
            if root.exists():
                import shutil

                shutil.rmtree(root)
            root.mkdir(parents=True)
            _make_sweep(root)
            (root / "done").write_text("ok")
    return {"sweep": root / "sweep", "cache": root / "cache", "stdout": root / "stdout.log",
            "stderr": root / "stderr.log"}


def _make_sweep(root: Path) -> None:
    cache = root / "cache"
    tape = Cassette("alfworld_sweep", cache)
    tape.start()
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
    tape.finish()
