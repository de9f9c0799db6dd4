"""The `memrl` command end to end on the tiny benchmark (tests/tiny_env.py): `memrl run` makes a
run directory holding only what RunDir names; the same command with keys that do not change
results continues it, one that does is refused; `memrl metrics/report/bank` read it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memrl.cli import main as memrl_main
from memrl.core.records import read_episodes
from memrl.core.rundir import RunDir

REPO = Path(__file__).resolve().parents[2]
FIXTURE_CONFIGS = REPO / "tests" / "fixtures" / "configs"
BASE = ["env=tiny", "llm=scripted", "embedder=hashing", "env.retrieval.delta=0.0", "runner.progress=false",
        f"hydra.searchpath=[file://{FIXTURE_CONFIGS}]"]


def memrl(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]),
           "MEMRL_CACHE_DIR": str(cwd / "cache"), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "memrl.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_memrl_run_resume_rules_and_tools(tmp_path, capsys):
    rd = RunDir(tmp_path / "runs" / "a")
    out = memrl(["run", *BASE, "runner.epochs=1", f"hydra.run.dir={rd}"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert str(rd.metrics) in out.stdout and str(rd.card) in out.stdout
    names = {getattr(RunDir, a) for a in dir(RunDir) if a.isupper()}
    assert {p.name for p in rd.root.iterdir()} <= names
    assert {p.name for p in rd.state.iterdir()} <= names
    assert (rd.hydra / "overrides.yaml").is_file()
    card = json.loads(rd.card.read_text())
    assert card["status"] == "finished" and len(card["sessions"]) == 1 and card["installed"]["sha256"]
    assert card["config"]["paths"]["cache_dir"] == str(tmp_path / "cache")  # never under runs/

    # keys that do not change results may change: the same run goes on, to 2 epochs
    out = memrl(["run", *BASE, "runner.epochs=2", "llm.max_concurrency=1", "+llm.n_threads=3",
                 "logger.name=none", f"hydra.run.dir={rd}"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    recs = read_episodes(rd.episodes)
    assert sorted({r.epoch for r in recs}) == [1, 2] and len(recs) == 8
    assert len(json.loads(rd.card.read_text())["sessions"]) == 2
    # a key that changes results is refused, naming it, before anything runs
    out = memrl(["run", *BASE, "runner.epochs=2", "memory.lam=0.9", f"hydra.run.dir={rd}"], tmp_path)
    assert out.returncode == 2 and "memory.lam: 0.5 -> 0.9" in out.stderr
    assert len(read_episodes(rd.episodes)) == 8

    assert memrl_main(["metrics", str(rd), "--no-plots"]) == 0
    brief = capsys.readouterr().out
    assert "SR per epoch: 1:" in brief and "Last " in brief and RunDir.METRICS in brief and len(brief.splitlines()) < 10
    assert memrl_main(["metrics", str(rd), "--no-plots", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["epochs"] == 2
    assert memrl_main(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "rep"), "--n-boot", "50"]) == 0
    assert (tmp_path / "rep" / "table1.md").is_file()
    capsys.readouterr()
    assert memrl_main(["bank", "top", str(rd), "-n", "2", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 2
    # one spelling for every command: `memrl <command>` = `python -m memrl.cli <command>`
    for command in ("report", "metrics", "cache", "view", "export", "plan", "status", "teach", "demo"):
        p = subprocess.run([sys.executable, "-m", "memrl.cli", command, "--help"], capture_output=True, text=True,
                           timeout=120, env={**os.environ})
        assert p.returncode == 0 and ("usage:" in p.stdout or "memrl teach" in p.stdout), (command, p.stderr[-500:])
