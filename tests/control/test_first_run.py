"""What a newcomer sees at the start of a run (issue 33, item 3): a new run, a resumed run
with what it already holds, a finished run with nothing to do; and a launch that is refused
leaves no run directory behind."""

from __future__ import annotations

import json

from memrl.core.rundir import RunDir
from tiny_runs import memrl_run


def test_new_resumed_and_finished_runs_say_which_they_are(tmp_path):
    run_dir = tmp_path / "run"
    first = memrl_run(["llm=scripted", "runner.epochs=1", f"hydra.run.dir={run_dir}"], tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    assert f"new run: {run_dir}" in first.stdout + first.stderr
    n = len(RunDir(run_dir).episodes.read_text().splitlines())
    again = memrl_run(["llm=scripted", "runner.epochs=1", f"hydra.run.dir={run_dir}"], tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    out = again.stdout + again.stderr
    assert f"finished run: {run_dir} already holds its 1 epochs ({n} episodes); nothing to run" in out
    assert len(RunDir(run_dir).episodes.read_text().splitlines()) == n  # and nothing ran
    more = memrl_run(["llm=scripted", "runner.epochs=2", f"hydra.run.dir={run_dir}"], tmp_path)
    assert more.returncode == 0, more.stderr[-2000:]
    assert f"resuming {run_dir} (status finished): {n} episodes committed, the last in epoch 1 of 2" in \
        more.stdout + more.stderr
    assert len(RunDir(run_dir).episodes.read_text().splitlines()) == 2 * n


def test_a_refused_launch_leaves_no_run_directory(tmp_path):
    run_dir = tmp_path / "never"
    out = memrl_run(["llm=scripted", "env.task_ids=[no-such-task]", f"hydra.run.dir={run_dir}"], tmp_path)
    assert out.returncode == 2 and "memrl:" in out.stderr, out.stderr[-2000:]
    assert not run_dir.exists()
    # a refused resume leaves the existing run as it was
    ok = memrl_run(["llm=scripted", "runner.epochs=1", f"hydra.run.dir={run_dir}"], tmp_path)
    assert ok.returncode == 0, ok.stderr[-2000:]
    card = json.loads(RunDir(run_dir).card.read_text())
    refused = memrl_run(["llm=scripted", "runner.epochs=1", "memory.lam=0.9", f"hydra.run.dir={run_dir}"], tmp_path)
    assert refused.returncode == 2 and "memory.lam" in refused.stderr
    assert json.loads(RunDir(run_dir).card.read_text()) == card
