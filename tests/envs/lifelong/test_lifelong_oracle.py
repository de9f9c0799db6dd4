"""The oracle report (scripts/lifelong_gold.py): counts, misses with reasons, JSON output."""

from __future__ import annotations

import json
from types import SimpleNamespace

from memrl.core.records import EpisodeResult, Task
from memrl_envs.lifelong.oracle import run_oracle


class FakeEnv:
    skipped = [SimpleNamespace(key="7", reason="bad literal")]

    def __init__(self) -> None:
        self.prepared = False

    def tasks(self):
        return [Task("os-1", "a"), Task("os-2", "b"), Task("os-3", "c")]

    def solve(self, task, memories, llm, seed):
        assert self.prepared, "the system is brought up before the first episode"
        ok = task.task_id != "os-2"
        return EpisodeResult(success=ok, reward=float(ok), steps=1,
                             outcome="success" if ok else "failure",
                             outcome_detail="success" if ok else "failed")


def test_run_oracle_reports_rate_outcomes_and_misses(tmp_path):
    env, lines = FakeEnv(), []
    out = tmp_path / "gold.json"
    report = run_oracle(env, "os", lambda e, t, r: (t.intent, f"why {t.task_id}"),
                        prepare=lambda: setattr(env, "prepared", True), json_out=str(out), echo=lines.append)
    assert (report["n"], report["success"], report["outcomes"]) == (3, 2, {"success": 2, "failed": 1})
    text = "\n".join(lines)
    assert "skipped 1 malformed rows: 7 (bad literal)" in text
    assert "gold oracle, os: 2/3 = 66.67%" in text
    assert "- os-2 [failed] b\n    why os-2" in text and "os-1 [" not in text
    saved = json.loads(out.read_text())
    assert [e["task_id"] for e in saved["episodes"]] == ["os-1", "os-2", "os-3"]
