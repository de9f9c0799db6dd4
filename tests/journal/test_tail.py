"""Reopening a run by its tail (memrl.journal.tail): a relaunch or a resume reads the end of the
logs, never the whole records file, rewrites no committed line, and still cuts what a crash
appended past the checkpoint or restores a torn last batch; the runner's counts come from
state/tally.json plus the records after it."""

from __future__ import annotations

import os

import pytest
from coin_runner import finish, make_runner

import memrl.journal.recovery as recovery
from memrl.control.live import RunTally
from memrl.core.records import iter_jsonl, read_episodes
from memrl.core.rundir import RunDir


@pytest.fixture
def no_full_read(monkeypatch):
    """Reading the whole records file (the checks of memrl.journal.recovery) fails the test."""
    def refuse(path):
        raise AssertionError(f"{path} was read whole")
    monkeypatch.setattr(recovery, "read_records", refuse)


def test_a_finished_run_reopens_without_reading_or_rewriting_its_records(tmp_path, no_full_read):
    finish(tmp_path / "run", epochs=2)
    rd = RunDir(tmp_path / "run")
    stat = rd.episodes.stat()
    tally_at = RunTally(n_tasks=5).resume(rd)
    assert tally_at == (10, rd.episodes.stat().st_size)  # the counts at the last epoch end: no record read
    runner, env, _, backend = make_runner(rd.root, epochs=2)
    runner.run(env.tasks())
    assert backend.calls == 0 and runner.version == 10
    after = rd.episodes.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (stat.st_ino, stat.st_size, stat.st_mtime_ns)


def test_a_resume_cuts_lines_past_the_checkpoint_and_restores_a_torn_last_batch(tmp_path, no_full_read):
    ref_snap, ref_metrics, _ = finish(tmp_path / "ref", epochs=3)
    finish(tmp_path / "run", epochs=1)
    rd = RunDir(tmp_path / "run")
    text = rd.episodes.read_text()
    last = text.splitlines(keepends=True)[-1]
    rd.episodes.write_text(text + last.replace('"epoch": 1', '"epoch": 2')[:-1])  # past the checkpoint, torn
    snap, metrics, _ = finish(tmp_path / "run", epochs=2)  # cut, then epoch 2 played
    assert [r.epoch for r in read_episodes(rd.episodes)].count(2) == 5
    text = rd.episodes.read_text()
    rd.episodes.write_text(text[:-len(text.splitlines()[-1]) // 2 - 1])  # the last batch torn after its checkpoint
    snap, metrics, _ = finish(tmp_path / "run", epochs=3)
    assert snap == ref_snap and metrics == ref_metrics
    assert list(iter_jsonl(rd.episodes)) == [
        {**r, "duration_s": r2["duration_s"]} for r, r2 in zip(iter_jsonl(RunDir(tmp_path / "ref").episodes),
                                                              iter_jsonl(rd.episodes))]


def test_counts_after_a_resume_equal_a_full_count(tmp_path):
    finish(tmp_path / "run", epochs=2)
    rd = RunDir(tmp_path / "run")
    saved = RunTally(n_tasks=5)
    count, start = saved.resume(rd)
    full = RunTally(n_tasks=5)
    full.add(iter_jsonl(rd.episodes))
    assert (count, start) == (10, os.path.getsize(rd.episodes)) and saved.to_dict() == full.to_dict()
    rd.tally.write_text('{"bytes": 7, "tally": {}}')  # a size inside a line: not trusted
    again = RunTally(n_tasks=5)
    assert again.resume(rd) == (10, 0) and again.to_dict() == full.to_dict()
