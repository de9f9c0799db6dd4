"""logger=wandb with the real wandb package, offline into the run directory: per epoch a
histogram of the bank's Q (from bank_updates.jsonl) and an episodes table; at the end the
run's report and plots as an artifact. Nothing leaves the machine."""

from __future__ import annotations

import json
import re

import pytest
from coin_runner import finish

from memrl.control.tracking import EPISODE_COLUMNS, make_epoch_logger, q_values
from memrl.core.records import read_episodes
from memrl.core.rundir import RunDir
from memrl.metrics.compute import compute_metrics, load_run, write_metrics
from memrl.report.plots import write_run_plots

wandb = pytest.importorskip("wandb", reason="the wandb extra is not installed")

pytestmark = pytest.mark.slow  # the real wandb service: about 20 s


def test_offline_run_logs_q_histograms_episode_tables_and_report(tmp_path, monkeypatch):
    run = tmp_path / "run"
    snap, _, _ = finish(run, epochs=2, batch_size=2)
    rd = RunDir(run)
    rd.card.write_text(json.dumps({"config": {"env": {"name": "coin"}, "memory": {"name": "memrl"},
                                              "seed": 7}, "model": "hash"}))
    write_metrics(rd)
    write_run_plots(rd)
    assert sorted(q_values(rd, 2)["bank/q"]) == pytest.approx(sorted(e["q"] for e in snap))
    for var in ("WANDB_API_KEY", "WANDB_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    for var, sub in (("WANDB_CACHE_DIR", "cache"), ("WANDB_CONFIG_DIR", "config"),
                     ("WANDB_DATA_DIR", "data")):
        monkeypatch.setenv(var, str(run / "wandb" / sub))
    logger = make_epoch_logger({"name": "wandb"}, run_dir=run, config={"env": {"name": "coin"},
                                                                       "memory": {"name": "memrl"}})
    metrics = compute_metrics(load_run(rd))
    for epoch in (1, 2):
        logger.log_epoch(metrics, epoch)
    logger.finish("finished")
    wandb.teardown()  # the service writes the offline run out (a run process does so at exit)

    offline = list((run / "wandb").glob("offline-run-*"))
    assert len(offline) == 1, list((run / "wandb").iterdir())
    files = offline[0] / "files"
    tables = sorted((files / "media" / "table").glob("episodes_*.table.json"))
    assert len(tables) == 2
    table = json.loads(tables[-1].read_text())
    assert table["columns"] == EPISODE_COLUMNS
    epoch2 = [r for r in read_episodes(rd.episodes) if r.epoch == 2]
    assert sorted(row[2] for row in table["data"]) == sorted(r.task_id for r in epoch2)
    # the offline run's log (wandb's own record stream; offline mode writes no summary file):
    # a Q histogram per epoch whose counts add up to the bank's size at that epoch's end
    blob = next(offline[0].glob("*.wandb")).read_bytes()
    assert b'"histogram"' in blob
    counts = [json.loads(m) for m in re.findall(rb"bank/q\x12\x06values[^\[]{0,8}(\[[0-9,]*\])", blob)]
    assert sorted({sum(c) for c in counts}) == [5, len(snap)]  # 5 tasks: 5 memories, then 10
    # the report was built into the run directory and logged, with the plots, as an artifact
    assert (rd.report / "table1.md").is_file() and list(rd.report.glob("curves_*.png"))
    assert b"report-" in blob and b"report/table1.md" in blob and b"plots/sr.png" in blob
