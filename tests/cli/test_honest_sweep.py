"""A small sweep as a new user runs it (issue 30), on the tiny benchmark through `memrl run
-m`: λ in {0, 1} x seeds {0, 1} with no memory written (every retrieval empty), and what
`memrl status`, `memrl report` and `memrl view` say about it: the λ runs told apart, the
seeds that repeat seed 0 counted once, the empty retrievals named, λ named as changing
nothing."""

from __future__ import annotations

import json

import pytest
from tiny_runs import SLOW, memrl_run

from memrl.cli import main as memrl_main


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("sweep")
    out = tmp / "multirun"
    p = memrl_run([*SLOW, "memory.lam=0,1", "seed=0,1", "memory.write_memories=false", "runner.epochs=2",
                   "env.n_tasks=3", f"hydra.sweep.dir={out}", "-m"], tmp, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return {"dir": out, "tmp": tmp, "log": p.stdout + p.stderr}


def test_the_run_log_names_the_empty_bank(sweep):
    assert "writes no memory (memory.write_memories=false) and imports none" in sweep["log"]
    assert "epoch 2: 3 of 3 retrievals (100%) found no memory to inject" in sweep["log"]
    cards = [json.loads(p.read_text()) for p in sweep["dir"].rglob("run_card.json")]
    assert len(cards) == 4 and all(any("writes no memory" in w for w in c["warnings"]) for c in cards)
    assert all(any("found no memory" in w for w in c["episode_warnings"]) for c in cards)
    assert all(c["seed_effects"] == ["the scripted model's answers, if its script reads the request's seed"]
               for c in cards)


def test_status_tells_the_sweep_apart_and_names_the_warnings(sweep, capsys):
    """Finding 8: both λ runs read `alfworld / memrl / ... / seed 0` in status."""
    assert memrl_main(["status", str(sweep["dir"])]) == 0
    out = capsys.readouterr().out
    for lam in ("0", "1"):
        for seed in ("0", "1"):
            assert f"tiny / memrl (lam={lam}.0) / seed {seed}" in out
    assert out.count("! epoch 2: 3 of 3 retrievals (100%) found no memory to inject") == 4


def test_the_report_counts_copies_once_and_says_lambda_changed_nothing(sweep, capsys):
    out = sweep["tmp"] / "report"
    assert memrl_main(["report", str(sweep["dir"]), "--out", str(out), "--n-boot", "200"]) == 0
    err = capsys.readouterr().err
    assert err.count("repeats seed 0's episodes") == 2  # seed 1 of each λ
    rows = (out / "table1.csv").read_text().splitlines()
    assert len(rows) == 3 and all(",1,0," in r for r in rows[1:])  # one replicate, seed 0
    readings = (out / "readings.md").read_text()
    assert "memrl (lam=0.0) and memrl (lam=1.0) played identical episodes" in readings
    assert "found no memory to inject" in readings
    assert "memrl (lam=0.0)" in (out / "sr_by_epoch.md").read_text()


def test_the_view_shows_each_setting_once_with_its_warnings(sweep, capsys):
    page = sweep["tmp"] / "view.html"
    assert memrl_main(["view", str(sweep["dir"]), "--out", str(page)]) == 0
    assert capsys.readouterr().err.count("not an independent replicate") == 2
    html = page.read_text()
    assert "memrl (lam=0.0)" in html and "memrl (lam=1.0)" in html
    assert "not independent replicates, left out of every chart" in html
    assert "found no memory to inject" in html
    assert "95% Wilson" in html
