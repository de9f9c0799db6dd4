"""`memrl export inspect`: a real small sweep written as Inspect AI eval logs through Inspect's
API, read back with `inspect_ai.log.read_eval_log`: one log per epoch, one sample per episode,
success as the score, the outcome, injected memories with their text, the written memory,
tokens, cost and one model event (prompt and answer) per model call."""

from __future__ import annotations

import json

import pytest

from memrl.cli import main as memrl_main
from memrl.core.cachedir import LLM_CACHE
from memrl.core.records import read_episodes
from memrl.core.rundir import RunDir
from memrl.journal.memtexts import read_texts
from memrl.metrics.compute import compute_metrics

inspect_log = pytest.importorskip("inspect_ai.log", reason="the inspect extra is not installed")


@pytest.mark.slow
def test_export_reads_back_with_counts_and_fields(alfworld_sweep, tmp_path, capsys):
    from memrl.llm.response_cache import ResponseCache

    out = tmp_path / "logs"
    cache = alfworld_sweep["cache"] / LLM_CACHE
    responses = ResponseCache(cache)
    assert memrl_main(["export", "inspect", str(alfworld_sweep["sweep"]), "--out", str(out),
                       "--cache", str(cache)]) == 0
    assert "inspect view --log-dir" in capsys.readouterr().out
    runs = RunDir.find([alfworld_sweep["sweep"]])
    logs = sorted(out.glob("*.eval"))
    assert len(runs) == 2 and len(logs) == 2 * 2  # two runs × two epochs
    seen_memories = 0
    for rd in runs:
        records = read_episodes(rd.episodes)
        sr = compute_metrics(records)["sr"]
        texts = read_texts(rd.memories)
        card = json.loads(rd.card.read_text())
        method = card["config"]["memory"]["name"]
        mine = sorted(p for p in logs if f"_{method}_" in p.name)
        assert [p.name[-12:] for p in mine] == ["epoch01.eval", "epoch02.eval"]
        for epoch, path in enumerate(mine, 1):
            log = inspect_log.read_eval_log(str(path), resolve_attachments=True)
            assert log.status == "success" and log.eval.model == card["model"]
            assert log.eval.task == f"alfworld/{method}"
            assert log.results.scores[0].metrics["accuracy"].value == pytest.approx(sr[epoch - 1])
            recs = {r.task_id: r for r in records if r.epoch == epoch}
            assert {s.id for s in log.samples} == set(recs) and len(log.samples) == 2
            for s in log.samples:
                r = recs[s.id]
                assert s.epoch == epoch
                assert s.scores["success"].value == (1.0 if r.success else 0.0)
                assert s.scores["success"].answer == r.outcome == s.metadata["outcome"]
                # the transcript: the task, then an action and an observation per step
                assert s.messages[0].role == "user" and r.intent in s.messages[0].text
                assert len(s.messages) == 1 + 2 * len(r.transcript)
                assert s.messages[1].text == r.transcript[0]["action"]
                assert s.metadata["tokens"] == r.tokens and s.metadata["cost_usd"] == r.cost_usd
                usage = s.model_usage[card["model"]]
                assert usage.input_tokens == r.tokens["prompt"]
                assert s.metadata["written"] == (None if r.written is None else
                                                 {**s.metadata["written"], "id": r.written})
                for m, got in zip(r.injected, s.metadata["injected"]):
                    assert (got["id"], got["q"], got["similarity"], got["score"]) == \
                        (m["id"], m["q"], m["sim"], m["score"])
                    assert got["experience"] == texts[m["text"]]["experience"]
                    assert got["experience"] in s.messages[0].text  # shown in the transcript
                    seen_memories += 1
                # every model call with the prompt it was sent and the answer it got
                events = [e for e in s.events if e.event == "model"]
                assert len(events) == len(r.model_calls) == r.llm_calls
                assert [e.metadata["key"] for e in events] == [c["key"] for c in r.model_calls]
                for e, c in zip(events, r.model_calls):
                    answer = responses.get(c["key"])
                    assert e.input and e.output.completion == answer.text
                    assert e.input[-1].text == responses.get_request(c["key"])["messages"][-1][1]
        if method == "memrl":
            assert all(r.written for r in records)
    assert seen_memories > 0  # MemRL's epoch 2 was given epoch 1's memories


def test_export_without_runs_is_a_user_error(tmp_path, capsys):
    assert memrl_main(["export", "inspect", str(tmp_path)]) == 2
    assert "no run directory" in capsys.readouterr().err


def test_transfer_run_gets_one_log_per_evaluation(tmp_path):
    """A transfer run: training logs and one log per held-out evaluation; the memories'
    texts resolve in both; without the response cache the samples say how many calls they
    could not show."""
    from coin_runner import make_runner

    from memrl.core.records import Task
    from memrl.export.inspect_logs import export_run

    runner, env, _, _ = make_runner(tmp_path / "run", epochs=2, batch_size=2)
    held_out = [Task(f"v{i}", f"stack the red block number {i} on the table") for i in range(3)]
    runner.run(env.tasks(), held_out)
    rd = RunDir(tmp_path / "run")
    rd.card.write_text(json.dumps({"config": {"env": {"name": "coin"}, "memory": {"name": "memrl"},
                                              "seed": 7}, "model": "hash", "n_tasks": 5,
                                   "created": "2026-01-02T03:04:05+0000"}))
    paths = export_run(rd, tmp_path / "logs")
    assert [p.name.rsplit("_", 1)[1] for p in paths] == ["epoch01.eval", "epoch02.eval",
                                                         "eval01.eval", "eval02.eval"]
    ev = inspect_log.read_eval_log(str(paths[3]))
    evals = [r for r in read_episodes(rd.eval_episodes) if r.epoch == 2]
    assert ev.eval.task == "coin/memrl (transfer eval)" and len(ev.samples) == 3
    assert ev.results.scores[0].metrics["accuracy"].value == pytest.approx(
        sum(r.success for r in evals) / 3)
    assert ev.eval.created.startswith("2026-01-02T03:04:05")
    texts = read_texts(rd.memories)
    shown = [m for s in ev.samples for m in s.metadata["injected"]]
    assert shown and all(m["experience"] == texts[r["text"]]["experience"]
                         for s, rec in zip(ev.samples, sorted(evals, key=lambda r: (r.batch, r.task_id)))
                         for m, r in zip(s.metadata["injected"], rec.injected))
    assert all(s.events == [] and s.metadata["model_calls_not_in_cache"] == 1 for s in ev.samples)
