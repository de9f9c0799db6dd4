"""What a method showed each game, by kind, and why MemRL did not show a game its solution
(memrl.demo.shown), on records and a bank-update log written by hand."""

from __future__ import annotations

import json

from memrl.core.records import EpisodeRecord, append_jsonl
from memrl.core.rundir import RunDir
from memrl.demo.shown import discordant_reasons, kind_of, shown_by_epoch, why_not_solution

A, B = "game-a", "game-b"
ATT_A, EXP_A, EXP_B = f"init:attempt:e001:{A}", f"init:expert:e001:{A}", f"init:expert:e001:{B}"


def rec(epoch, batch, task, ok, shown=(), q=0.0):
    return EpisodeRecord(epoch=epoch, batch=batch, task_id=task, intent=task, success=ok, reward=float(ok),
                         steps=1, written=f"e{epoch:03d}:{task}",
                         injected=[{"id": m, "q": q} for m in shown])


def test_kinds_of_what_a_game_is_shown():
    written = {f"e001:{A}": True, f"e002:{A}": False}
    assert kind_of(EXP_A, A, written) == "solution"
    assert kind_of(ATT_A, A, written) == "attempt"
    assert kind_of(EXP_B, A, written) == "other_game"
    assert kind_of(f"e001:{A}", A, written) == "solution"  # the student's own replay that solved it
    assert kind_of(f"e002:{A}", A, written) == "own_failure"
    assert kind_of(f"e001:{B}", A, written) == "other_game"


def test_shown_per_epoch_and_what_the_loser_showed():
    memrl = [rec(1, 0, A, False, [ATT_A]), rec(1, 1, B, True, [EXP_B]),
             rec(2, 0, A, True, [EXP_A]), rec(2, 1, B, True, [EXP_B])]
    rag = [rec(1, 0, A, False, [ATT_A]), rec(1, 1, B, True, [EXP_B]),
           rec(2, 0, A, False, [ATT_A]), rec(2, 1, B, True, [EXP_B])]
    assert shown_by_epoch(memrl) == {"1": {"attempt": 1, "solution": 1}, "2": {"solution": 2}}
    assert discordant_reasons(memrl, rag, 2) == {"a_only": {"attempt": 1}, "b_only": {}}


def _run(tmp_path, records, lines):
    rd = RunDir(tmp_path)
    append_jsonl(rd.episodes, [r.to_json() for r in records])
    append_jsonl(rd.bank_updates, [json.dumps(line) for line in lines])
    return tmp_path


def test_why_a_solution_was_not_shown(tmp_path):
    """Epoch 1: game A fails with its expert memory (Q 0 -> -0.3); game B fails with A's expert
    memory too (the same sentence: -0.3 -> -0.51). Epoch 2: A is shown its attempt (Q 0) over its
    expert (-0.51): the expert was lowered by A once and by B once, a tie in blame, counted as A's
    own failure; B is shown a fresh failure (Q 0) tied with its never-shown expert (Q 0)."""
    records = [rec(1, 0, A, False, [EXP_A]), rec(1, 1, B, False, [EXP_A]),
               rec(2, 0, A, False, [ATT_A], q=0.0), rec(2, 1, B, False, [f"e001:{B}"], q=0.0)]
    initial = [{"id": m, "q": 0.0} for m in (ATT_A, EXP_A, EXP_B)]
    lines = [{"epoch": 1, "batch": 0, "initial": initial, "added": [{"id": f"e001:{A}", "q": 0.0}],
              "updates": [{"id": EXP_A, "q_before": 0.0, "q_after": -0.3}]},
             {"epoch": 1, "batch": 1, "added": [{"id": f"e001:{B}", "q": 0.0}],
              "updates": [{"id": EXP_A, "q_before": -0.3, "q_after": -0.51}]},
             {"epoch": 2, "batch": 0, "added": [{"id": f"e002:{A}", "q": 0.0}],
              "updates": [{"id": ATT_A, "q_before": 0.0, "q_after": -0.3}]},
             {"epoch": 2, "batch": 1, "added": [{"id": f"e002:{B}", "q": 0.0}],
              "updates": [{"id": f"e001:{B}", "q_before": 0.0, "q_after": -0.3}]}]
    got = why_not_solution(_run(tmp_path, records, lines))
    assert got == {"episodes": 2, "causes": {"solution_failed_here": 1, "tie_in_q": 1},
                   "shown": {"attempt": 1, "own_failure": 1}}


def test_a_solution_lowered_by_another_game_is_named(tmp_path):
    records = [rec(1, 0, B, False, [EXP_A]), rec(2, 0, A, False, [ATT_A], q=0.0)]
    initial = [{"id": m, "q": 0.0} for m in (ATT_A, EXP_A)]
    lines = [{"epoch": 1, "batch": 0, "initial": initial, "added": [{"id": f"e001:{B}", "q": 0.0}],
              "updates": [{"id": EXP_A, "q_before": 0.0, "q_after": -0.3}]},
             {"epoch": 2, "batch": 0, "added": [{"id": f"e002:{A}", "q": 0.0}], "updates": []}]
    got = why_not_solution(_run(tmp_path, records, lines))
    assert got["causes"] == {"solution_lowered_elsewhere": 1}
