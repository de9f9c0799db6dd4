"""A memory stored without its model-written summary is visible: counted in the run card
(`episodes.writer_failures`), in `memrl status`, and against `runner.max_error_rate`."""

from __future__ import annotations

from tiny_runs import card, memrl_run

from memrl.cli.status import run_status, table
from memrl.control.guards import error_rate_problem
from memrl.core.records import read_episodes
from memrl.core.rundir import RunDir


def test_a_writer_failure_counts_against_the_error_rate_like_an_errored_episode():
    ok = {"errors": [], "info": {}}
    mute = {"errors": [], "info": {"writer_error": "writer: the model's reflection was empty"}}
    problem = error_rate_problem([mute, mute, ok], epoch=1, batch=0, errored_before=0, epoch_size=3,
                                 max_rate=0.5)
    assert problem is not None and "lost their memory's summary" in problem
    assert "the memory writer failed: writer: the model's reflection was empty" in problem
    assert error_rate_problem([mute, ok, ok], epoch=1, batch=0, errored_before=0, epoch_size=6,
                              max_rate=0.5) is None


def test_the_card_and_status_count_memories_written_without_their_summary(tmp_path):
    run_dir = tmp_path / "run"
    args = ["llm=scripted", "llm.script=tiny_env:mute_writer", "env.n_tasks=4", "runner.epochs=1",
            "runner.batch_size=4", f"hydra.run.dir={run_dir}"]
    done = memrl_run(args, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    records = read_episodes(RunDir(run_dir).episodes)
    failed = sorted(r.task_id for r in records if r.info.get("writer_error"))
    assert failed == ["t1", "t2"]
    assert all("empty" in r.info["writer_error"] for r in records if r.task_id in failed)
    assert card(run_dir)["episodes"]["writer_failures"] == 2
    row = run_status(RunDir(run_dir))
    assert row["writer_failures"] == 2
    shown = table([row]).splitlines()
    assert "writer" in shown[0] and shown[1].split()[5] == "2"  # the column after 'errored'


def test_too_many_writer_failures_stop_the_run_before_the_batch_is_committed(tmp_path):
    run_dir = tmp_path / "run"
    args = ["llm=scripted", "llm.script=tiny_env:mute_writer", "env.n_tasks=3", "runner.epochs=1",
            "runner.batch_size=3", "runner.max_error_rate=0.5", f"hydra.run.dir={run_dir}"]
    stopped = memrl_run(args, tmp_path)
    assert stopped.returncode == 1, stopped.stderr[-2000:]
    assert "lost their memory's summary" in stopped.stderr
    assert card(run_dir)["status"] == "failed"
    assert not RunDir(run_dir).episodes.exists() or not read_episodes(RunDir(run_dir).episodes)
