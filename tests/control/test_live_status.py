"""Live status: the progress bar's postfix (errors, retries, spend, tokens), `progress: auto`,
one plain log line per epoch, and `memrl status` over a folder of runs."""

from __future__ import annotations

import io
import json
import logging

import pytest
from coin_runner import finish, make_runner

from memrl.cli import main as memrl_main
from memrl.cli.status import run_status
from memrl.control.live import RunTally
from memrl.core.progress import progress_enabled
from memrl.core.records import read_episodes
from memrl.core.rundir import RunDir


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_auto_draws_only_on_a_terminal():
    assert progress_enabled("auto", Tty()) and not progress_enabled("auto", io.StringIO())
    assert progress_enabled(True, io.StringIO()) and not progress_enabled(False, Tty())


def test_postfix_and_epoch_line_count_what_happened():
    tally = RunTally(n_tasks=3)
    tally.add([
        {"epoch": 1, "task_id": "a", "success": True, "errors": [], "cost_usd": 0.25,
         "tokens": {"prompt": 1000, "completion": 500}},
        {"epoch": 1, "task_id": "b", "success": False, "errors": ["act: LLMError: boom"],
         "cost_usd": 0.5, "tokens": {"prompt": 200, "completion": 0}},
        {"epoch": 2, "task_id": "b", "success": True, "errors": [], "tokens": {}},
    ])
    post = tally.postfix(1, {"retries": 4, "cost_usd": 1.5, "prompt_tokens": 12000,
                             "completion_tokens": 345})
    assert post == {"solved": "1", "errors": "1", "retries": "4", "spend": "$1.5000", "tokens": "12.3k"}
    assert tally.postfix(1, None) == {"solved": "1", "errors": "1"}  # an oracle run: no model
    assert tally.epoch_line(1, 10) == ("epoch 1/10: SR 0.500 (1/2), CSR 0.333, errors 1, "
                                       "spend $0.7500, tokens 1.7k")
    assert tally.epoch_line(2, 10).startswith("epoch 2/10: SR 1.000 (1/1), CSR 0.667")


def test_runner_logs_one_line_per_epoch_from_the_records(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="memrl.control.runner")
    finish(tmp_path / "a", epochs=3, batch_size=2)
    lines = [r.getMessage() for r in caplog.records if r.name == "memrl.control.runner"
             and r.getMessage().startswith("epoch ")]
    recs = read_episodes(RunDir(tmp_path / "a").episodes)
    assert len(lines) == 3
    for e, line in enumerate(lines, 1):
        wins = sum(r.success for r in recs if r.epoch == e)
        assert line.startswith(f"epoch {e}/3: SR {wins / 5:.3f} ({wins}/5), CSR ")
        assert "errors 0" in line and "spend $" in line and "tokens" in line


def test_runner_postfix_reaches_the_bar(tmp_path, monkeypatch):
    runner, env, _, _ = make_runner(tmp_path / "a", epochs=1)
    shown: list[dict] = []
    monkeypatch.setattr(runner, "_postfix", lambda bar, epoch: shown.append(
        runner.tally.postfix(epoch, runner.llm.totals())))
    runner.run(env.tasks())
    assert len(shown) == 3 and set(shown[-1]) == {"solved", "errors", "retries", "spend", "tokens"}
    assert shown[-1]["tokens"] != "0"  # the scripted model counts tokens


def test_status_summarizes_every_run_under_a_folder(tmp_path, capsys):
    finish(tmp_path / "runs" / "done", epochs=2)
    rd = RunDir(tmp_path / "runs" / "done")
    rd.card.write_text(json.dumps({"config": {"env": {"name": "coin"}, "memory": {"name": "memrl"},
                                              "runner": {"epochs": 2}, "seed": 7},
                                   "status": "finished", "model": "hash", "n_tasks": 5}))
    # a run stopped in its second epoch: two of five tasks done there
    part = RunDir(tmp_path / "runs" / "part")
    part.mkdir()
    lines = rd.episodes.read_text().splitlines()
    part.episodes.write_text("\n".join(lines[:7]) + "\n")
    errored = json.loads(lines[0])
    errored["errors"] = ["act: LLMError: boom"]
    errored["cost_usd"] = 0.125
    part.episodes.write_text("\n".join([json.dumps(errored)] + lines[1:7]) + "\n")
    part.card.write_text(json.dumps({"config": {"env": {"name": "coin"}, "memory": {"name": "rag"},
                                                "runner": {"epochs": 3}, "seed": 1},
                                     "status": "interrupted", "model": "hash", "n_tasks": 5}))
    (tmp_path / "runs" / "junk").mkdir()
    done, partial = run_status(rd), run_status(part)
    assert (done["status"], done["epochs_done"], done["epochs"], done["errored"]) == ("finished", 2, 2, 0)
    recs = read_episodes(rd.episodes)
    assert done["last"] == pytest.approx(sum(r.success for r in recs if r.epoch == 2) / 5)
    assert (partial["status"], partial["epochs_done"], partial["epochs"]) == ("interrupted", 1, 3)
    assert partial["errored"] == 1 and partial["spend_usd"] == pytest.approx(0.125)
    assert memrl_main(["status", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("2 runs") and "interrupted" in out and "1/3" in out and "$0.1250" in out
    # each run named by what tells it apart from the others listed (here its planned epochs)
    assert "coin / rag (runner.epochs=3) / seed 1" in out and "coin / memrl (runner.epochs=2) / seed 7" in out
    assert memrl_main(["status", str(tmp_path / "runs"), "--json"]) == 0
    assert {r["method"] for r in json.loads(capsys.readouterr().out)} == {"memrl", "rag"}
    assert memrl_main(["status", str(tmp_path / "nowhere")]) == 2


@pytest.mark.slow
def test_a_run_without_a_terminal_logs_epochs_and_draws_no_bar(alfworld_sweep):
    err = alfworld_sweep["stderr"].read_text()
    out = alfworld_sweep["stdout"].read_text()  # Hydra's console log
    # no bar of the runner, the env (intents) or the embedder (weights): output not a tty
    assert "task/s" not in err + out and "it/s" not in err + out
    for e in (1, 2):
        assert out.count(f"[memrl.control.runner][INFO] - epoch {e}/2: SR ") == 2  # both runs
