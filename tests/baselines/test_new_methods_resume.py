"""The newer memory methods (memq, reasoningbank, expel, awm; docs/methods.md) through
`python -m memrl.cli run`, killed in the middle and resumed by the same command, on every
benchmark besides ALFWorld (which runs them with the embedded model: test_e2e_methods.py).

- The tiny benchmark (tests/tiny_env.py), all four as one Hydra multirun killed (SIGKILL) once
  inside each method's run, every relaunch resuming the job the last one left: each method
  ends exactly as in an uninterrupted sweep (records, bank, bank log, memory texts, metrics).
- BigCodeBench, Lifelong OS, Lifelong DB and HLE on their real environments with a scripted
  model that answers as the provider emulation does (tests/method_replies.py `bench`,
  memrl.testing.replies): the four as one multirun, killed inside its first job (a different
  method first on each benchmark), relaunched; every run finishes with each episode recorded
  once, and the killed method ends as its uninterrupted run does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from data_paths import BCB_HARD_TRAIN as BCB
from data_paths import LIFELONG, LIFELONG_DB, LIFELONG_OS

from memrl.core.rundir import RunDir
from tiny_runs import FIXTURES, REPO, card, wait_for

HLE = REPO / "tests" / "fixtures" / "hle" / "hle_fixture.jsonl"
METHODS = ["memq", "reasoningbank", "expel", "awm"]
COMPARED = ["memrl", "memp", "rag"]  # what the report sets them beside
BASE = ["llm=scripted", "llm.cache=true", "embedder=hashing", "runner.progress=false",
        f"hydra.searchpath=[file://{FIXTURES}]"]
TINY = ["env=tiny", "env.n_tasks=4", "env.retrieval.delta=0.0", "llm.script=method_replies:tiny", "runner.epochs=2"]

pytestmark = pytest.mark.slow


def environ(cache: Path, delay: float, **extra: str) -> dict[str, str]:
    return {**os.environ, "MEMRL_CACHE_DIR": str(cache), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "METHOD_REPLY_DELAY": str(delay),
            "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]), **extra}


def command(methods: list[str], args: list[str], sweep: Path) -> list[str]:
    return [sys.executable, "-m", "memrl.cli", "run", "-m", f"memory={','.join(methods)}", *BASE, *args,
            f"hydra.sweep.dir={sweep}"]


def job_dir(sweep: Path, method: str) -> Path | None:
    """The run directory of one method's job: the one whose card names it (a job's directory is
    named by its overrides, whose paths nest it deeper)."""
    for path in sweep.rglob(RunDir.CARD):
        try:
            if json.loads(path.read_text())["config"]["memory"]["name"] == method:
                return path.parent
        except (OSError, ValueError, KeyError):
            continue  # being written
    return None


def committed(run_dir: Path | None) -> int:
    path = RunDir(run_dir).episodes if run_dir is not None else None
    return len(path.read_text().splitlines()) if path is not None and path.exists() else 0


def kill_inside(cmd: list[str], env: dict[str, str], sweep: Path, method: str, at: int, total: int) -> None:
    """Start `cmd`, SIGKILL it once `method`'s job has committed `at` episodes (of `total`)."""
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: committed(job_dir(sweep, method)) >= at or proc.poll() is not None, timeout=600,
                 what=f"{method} to commit {at} episodes")
        assert proc.poll() is None, f"the sweep ended before {method} could be killed: {proc.stderr.read()[-3000:]}"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert at <= committed(job_dir(sweep, method)) < total, "killed in the middle of the run"


def run_to_end(cmd: list[str], env: dict[str, str]) -> None:
    out = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]


def state(run_dir: Path) -> dict:
    """What a run ended with, leaving out what depends on the execution (wall clock, cache hits
    of a replayed batch): the records' outcomes, memories and model calls, the bank, the bank log,
    the memory texts and the metrics."""
    from memrl.memory.bankio import read_entries, resolve

    rd = RunDir(run_dir)
    records = [json.loads(x) for x in rd.episodes.read_text().splitlines()]
    keep = ("epoch", "batch", "task_id", "success", "outcome", "steps", "written", "bank_version", "transcript")
    episodes = [{**{k: r[k] for k in keep}, "injected": [(m["id"], m["q"], m["text"]) for m in r["injected"]],
                 "calls": [(c["purpose"], c["key"]) for c in r["model_calls"]],
                 "writer_error": r["info"].get("writer_error")} for r in records]
    bank = sorted(({k: v for k, v in e.to_dict().items() if k != "embedding"}
                   for e in read_entries(resolve(str(run_dir)))), key=lambda e: e["memory_id"])
    log = [{k: v for k, v in json.loads(x).items() if k not in ("ts", "time")}
           for x in rd.bank_updates.read_text().splitlines()]
    metrics = {k: v for k, v in json.loads(rd.metrics.read_text()).items() if k not in ("duration_s",)}
    memories = rd.memories.read_text() if rd.memories.exists() else ""
    return {"episodes": episodes, "bank": bank, "bank_updates": log, "memories": memories, "metrics": metrics}


def check_finished(run_dir: Path, tasks: int, epochs: int) -> None:
    c = card(run_dir)
    assert c["status"] == "finished", c.get("error")
    records = [json.loads(x) for x in RunDir(run_dir).episodes.read_text().splitlines()]
    cells = sorted((r["epoch"], r["task_id"]) for r in records)
    assert len(cells) == len(set(cells)) == tasks * epochs  # each episode recorded once


# ---------------------------------------------------------------------------- the tiny benchmark
def test_each_method_killed_inside_its_run_ends_as_an_uninterrupted_sweep(tmp_path):
    """The uninterrupted sweep also runs MemRL, MemP and RAG: the report compares all seven in
    one table and one figure."""
    from memrl.report.write import write_report

    ref, killed = tmp_path / "ref", tmp_path / "killed"
    run_to_end(command([*METHODS, *COMPARED], TINY, ref), environ(tmp_path / "cache_ref", 0))
    files = write_report([ref], tmp_path / "report", n_boot=50, warn=lambda m: None)
    table = files["table1.md"].read_text()
    assert all(f"| {m} |" in table for m in [*METHODS, *COMPARED]), table
    assert files["curves_tiny.png"].stat().st_size > 1000
    compared = files["comparisons.md"].read_text()
    assert all(m in compared for m in METHODS)  # each against MemRL, paired
    cmd = command(METHODS, TINY, killed)
    env = environ(tmp_path / "cache_killed", 0.1)
    for method in METHODS:  # each relaunch resumes the job the previous one killed
        kill_inside(cmd, env, killed, method, at=3, total=8)
    run_to_end(cmd, environ(tmp_path / "cache_killed", 0))
    for method in METHODS:
        run_dir = job_dir(killed, method)
        sessions = card(run_dir)["sessions"]
        assert [s.get("status") is None for s in sessions].count(True) == 1  # the one killed
        assert state(run_dir) == state(job_dir(ref, method)), method
    # the methods made their own calls, each under its purpose
    purposes = {method: {c for e in state(job_dir(ref, method))["episodes"] for c, _ in e["calls"]}
                for method in METHODS}
    assert purposes["memq"] == {"act", "write-script", "write-reflection"}
    assert purposes["reasoningbank"] >= {"act", "reasoningbank-judge", "reasoningbank-extract-success",
                                         "reasoningbank-extract-failure"}
    assert purposes["expel"] == {"act", "expel-compare"}  # 4 tasks: never a group of 8 successes
    assert purposes["awm"] == {"act", "awm-judge", "awm-induce"}
    # what each kept (scripts/method_summary.py): credit past the injected memories, items,
    # workflows, insights
    out = subprocess.run([sys.executable, "scripts/method_summary.py", str(ref), "--out", str(tmp_path / "s.json")],
                         cwd=REPO, env=environ(tmp_path / "cache_ref", 0), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    kept = json.loads((tmp_path / "s.json").read_text())
    assert sorted(kept) == sorted([*METHODS, *COMPARED])
    assert any(int(depth) > 0 for depth in kept["memq"]["credited_by_depth"])
    assert kept["reasoningbank"]["items"] > 0 and kept["awm"]["workflows"] > 0 and kept["expel"]["insights"]
    assert all(kept[m]["episodes"] == 8 for m in kept)


# ------------------------------------------------------------------------ the other benchmarks
def _bcb() -> tuple[list[str], dict[str, str]]:
    import importlib.util

    from memrl_envs.sandbox import bwrap_available

    if not BCB.is_file():
        pytest.skip(f"BigCodeBench data not at {BCB}")
    if importlib.util.find_spec("bigcodebench") is None:
        pytest.skip("bigcodebench (the checker) is not installed")
    why = bwrap_available()
    if why:
        pytest.skip(why)
    return ["env=bigcodebench", f"env.data_path={BCB}", "env.part=all",
            "env.task_ids=[BigCodeBench/19,BigCodeBench/854]", "env.time_limit_s=20"], {}


def _os() -> tuple[list[str], dict[str, str]]:
    from memrl_envs.lifelong_os.rootfs import is_built, rootfs_path
    from memrl_envs.lifelong_os.shell import overlay_available

    if not LIFELONG_OS.is_file():
        pytest.skip(f"no Lifelong data at {LIFELONG_OS}")
    why = overlay_available()
    if why is not None:
        pytest.skip(f"no Lifelong-OS sandbox here: {why}")
    rootfs = rootfs_path()
    if not is_built(rootfs):
        pytest.skip(f"no root file system at {rootfs} (make rootfs)")
    return ["env=lifelong_os", f"env.data_path={LIFELONG_OS}", "env.max_steps=3"], \
        {"LIFELONG_DATA": str(LIFELONG), "MEMRL_ROOTFS_DIR": str(rootfs.parent)}


def _hle() -> tuple[list[str], dict[str, str]]:
    if not HLE.is_file():
        pytest.skip(f"no HLE fixture at {HLE}")
    return ["env=hle", f"env.data_path={HLE}", "env.modality=text", "env.judge.backend=scripted",
            "env.judge.script=method_replies:bench"], {}


def _db_args(server_dir: Path) -> list[str]:
    return ["env=lifelong_db", f"env.data_path={LIFELONG_DB}", "env.max_steps=3",
            "env.prompt_rows=2", f"env.server_dir={server_dir}"]


def kill_and_resume(tmp: Path, args: list[str], extra: dict[str, str], first: str) -> None:
    """The four methods on one benchmark (2 tasks x 2 epochs), `first` first: killed inside its
    run, relaunched; all finish, and `first` ends as its uninterrupted run, which plays
    alongside the killed sweep (each episode has its own sandbox, overlay or database)."""
    order = [first] + [m for m in METHODS if m != first]
    args = [*args, "llm.script=method_replies:bench", "env.max_tasks=2", "runner.epochs=2"]
    ref, killed = tmp / "ref", tmp / "killed"
    reference = subprocess.Popen(command([first], args, ref), env=environ(tmp / "cache_ref", 0, **extra), cwd=REPO,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    cmd = command(order, args, killed)
    try:
        kill_inside(cmd, environ(tmp / "cache_killed", 0.3, **extra), killed, first, at=1, total=4)
    finally:
        _, err = reference.communicate(timeout=1200)
    assert reference.returncode == 0, err[-3000:]
    run_to_end(cmd, environ(tmp / "cache_killed", 0, **extra))
    for method in METHODS:
        check_finished(job_dir(killed, method), tasks=2, epochs=2)
    assert len(card(job_dir(killed, first))["sessions"]) == 2
    assert state(job_dir(killed, first)) == state(job_dir(ref, first))


@pytest.mark.parametrize("bench,first", [("bigcodebench", "memq"), ("lifelong_os", "reasoningbank"),
                                         ("hle", "awm")])
def test_every_method_runs_on_the_benchmark_and_resumes_after_a_kill(tmp_path, bench, first):
    args, extra = {"bigcodebench": _bcb, "lifelong_os": _os, "hle": _hle}[bench]()
    kill_and_resume(tmp_path, args, extra, first)


def test_every_method_runs_on_lifelong_db_and_resumes_after_a_kill(tmp_path):
    from memrl_envs.lifelong_db.server import MariaDBServer, find_binary

    if not LIFELONG_DB.is_file():
        pytest.skip(f"no Lifelong DB data at {LIFELONG}")
    if find_binary("mariadbd", "mysqld") is None:
        pytest.skip("no MariaDB server binary (apt-get install -y mariadb-server)")
    with MariaDBServer(tmp_path / "mariadb") as server:
        kill_and_resume(tmp_path, _db_args(server.base_dir), {"LIFELONG_DATA": str(LIFELONG)}, "expel")
