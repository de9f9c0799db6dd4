"""The paper-scale benchmark's parts: the synthetic env is shaped as its docstring says (duplicate
intents, 30-step failures, ~5.8 KB failed records), bytes are grouped per file, and the
extrapolation is the line through the two sizes; one tiny end-to-end pass (slow)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import bench_scale as bs
from scale_env import ScaleEnv, make_tasks

from memrl.core.records import EpisodeRecord
from memrl.core.rundir import RunDir


def test_tasks_repeat_intents_as_alfworld_does():
    tasks = make_tasks(3553, 0.28, seed=0)
    assert tasks == make_tasks(3553, 0.28, seed=0) and len({t.task_id for t in tasks}) == 3553
    distinct = len({t.intent for t in tasks})
    assert 0.25 < 1 - distinct / 3553 < 0.31  # ALFWorld: ~2,560 goal texts for 3,553 games


def test_a_failed_episode_is_thirty_turns_and_about_six_kilobytes():
    class Reply:
        def __init__(self, text):
            self.text = text

        def complete(self, prompt, **kw):
            return self.text

    env = ScaleEnv(n_tasks=3)
    task = env.tasks()[0]
    lost = env.solve(task, [], Reply("f" * 64), seed=0)
    won = env.solve(task, [], Reply("0" * 64), seed=0)
    assert (lost.success, lost.steps, won.success, won.steps) == (False, 30, True, 12)
    size = len(json.dumps(EpisodeRecord(epoch=1, batch=0, task_id=task.task_id, intent=task.intent,
                                        success=False, reward=0.0, steps=30,
                                        transcript=[s.__dict__ for s in lost.transcript]).__dict__))
    assert 4800 < size < 6500


def test_bytes_are_grouped_per_file_and_the_fit_is_linear(tmp_path):
    run = tmp_path / "run"
    (run / "bank" / "abc-uuid").mkdir(parents=True)
    (run / "bank" / "abc-uuid" / "data_level0.bin").write_bytes(b"x" * 10)
    (run / "bank" / "chroma.sqlite3").write_bytes(b"x" * 5)
    (run / "plots").mkdir()
    (run / "plots" / "sr.png").write_bytes(b"x" * 3)
    RunDir(run).episodes.write_bytes(b"x" * 7)
    assert bs.disk(run) == {"bank/<index>/data_level0.bin": 10, "bank/chroma.sqlite3": 5, "plots/": 3,
                            RunDir.EPISODES: 7}

    def size(n, per):
        t = {"wall_s": 1 + n * per, "cpu_s": n * per, "peak_rss_mb": 100 + n / 100}
        return {"episodes": n, "run": t, "reopen": t, "disk_total": 1000 + 9 * n,
                "record_bytes_per_episode": 5.0, "tools": {"view": {**t, "page_bytes": 10 * n}}}

    out = bs.extrapolate(size(1000, 0.01), size(4000, 0.01), 10_000)
    assert out["run"]["cpu_s"] == pytest.approx(100) and out["run"]["peak_rss_mb"] == pytest.approx(200)
    assert out["disk_total_bytes"] == pytest.approx(91_000)
    assert out["beyond_record_per_episode"] == pytest.approx(4 + 0.1)  # (1000 + 4 n) / n at n = 10,000
    assert out["tools"]["view"]["page_bytes"] == pytest.approx(100_000)
    assert out["harness_ms_per_episode_marginal"]["cpu"] == pytest.approx(10)


@pytest.mark.slow
def test_a_tiny_pass_measures_every_tool(tmp_path):
    out = bs.main(["--sizes", "6x2,12x2", "--dim", "16", "--work-dir", str(tmp_path / "w"),
                   "--json", str(tmp_path / "f.json")])
    small, large = out["results"]
    assert (small["episodes"], large["episodes"]) == (12, 24)
    assert set(large["tools"]) == {"bank top", "bank export", "bank merge", "status", "metrics", "report", "view"}
    assert all(t["peak_rss_mb"] > 10 and t["cpu_s"] > 0 for t in large["tools"].values())
    assert large["disk_bytes"][RunDir.EPISODES] > 0 and "bank/entries.sqlite3" in large["disk_bytes"]
    assert out["extrapolated"]["episodes"] == 35_530
    assert json.loads((tmp_path / "f.json").read_text())["results"][1]["episodes"] == 24
