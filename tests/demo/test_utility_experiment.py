"""Readings of the utility-against-similarity experiment (memrl.demo.utility_experiment), each
against counts made by hand: the mechanism (re-injection after a failure, the student's own
failures shown), the paired readings across epochs, and why a teacher memory lost."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from memrl.core.records import EpisodeRecord
from memrl.core.rundir import RunDir
from memrl.demo.teacher_effect import teacher_memory, teacher_memory_task
from memrl.demo.utility_experiment import (own_failure_injections, paired, reinjected_after_failure, sign_test,
                                           teacher_losses)


def rec(epoch, task, success, injected=(), written=None, batch=0):
    return EpisodeRecord(epoch=epoch, batch=batch, task_id=task, intent=task, success=success,
                         reward=float(success), steps=1, written=written,
                         injected=[{"id": mid, "q": q} for mid, q in injected])


def test_reinjection_counts_only_memories_a_failure_of_an_earlier_batch_was_given() -> None:
    records = [
        rec(1, "a", False, [("t:a", 0.0)], batch=0),
        rec(1, "b", False, [("t:a", 0.0)], batch=0),  # same batch: not yet known as failed
        rec(1, "c", True, [("t:c", 0.0)], batch=1),
        rec(2, "a", False, [("t:a", -0.3)], batch=0),  # t:a failed in epoch 1: counted
        rec(2, "b", True, [("t:b", 0.0)], batch=0),
        rec(2, "c", True, [("t:c", 0.3)], batch=1),  # t:c only ever succeeded: not counted
        rec(3, "a", True, [("t:a", -0.5), ("t:c", 0.5)], batch=0),  # t:a counted again
    ]
    assert reinjected_after_failure(records) == {"reinjected_after_failure": 2, "injections_epoch2_on": 5}


def test_own_failure_injections_split_own_memories_by_their_writers_outcome() -> None:
    records = [
        rec(1, "a", False, [("init:e001:a", 0.0)], written="e001:a"),
        rec(1, "b", True, [("init:e001:b", 0.0)], written="e001:b"),
        rec(2, "a", False, [("e001:a", 0.0)], written="e002:a"),
        rec(2, "b", True, [("e001:b", 0.3), ("e001:a", 0.0)], written="e002:b"),
    ]
    assert own_failure_injections(records) == {
        "1": {"own_failure": 0, "own_success": 0, "imported": 2},
        "2": {"own_failure": 2, "own_success": 1, "imported": 0}}


def test_sign_test_is_the_exact_two_sided_binomial() -> None:
    assert sign_test(0, 0) == 1.0
    assert sign_test(6, 0) == pytest.approx(2 * 0.5 ** 6)
    assert sign_test(5, 1) == pytest.approx(2 * (1 + 6) / 2 ** 6)
    assert sign_test(3, 3) == 1.0


def test_paired_reads_the_final_epoch_the_csr_and_the_epochs_solved() -> None:
    # epochs x games; game 0: a solves it late, b never; game 1: b solves it once (epoch 1);
    # game 2: both every epoch; game 3: a every epoch, b the first only
    a = np.array([[0, 0, 1, 1],
                  [0, 0, 1, 1],
                  [1, 0, 1, 1]])
    b = np.array([[0, 1, 1, 1],
                  [0, 0, 1, 0],
                  [0, 0, 1, 0]])
    r = paired(a, b, n_boot=2000)
    assert r["games"] == 4 and r["epochs"] == 3
    assert (r["final"]["a_only"], r["final"]["b_only"], r["final"]["both"]) == (2, 0, 1)
    assert r["final"]["delta"] == pytest.approx(0.5)
    assert r["final"]["mcnemar_p"] == pytest.approx(0.5)  # exact: 2 * 0.5^2
    assert (r["csr"]["a_only"], r["csr"]["b_only"], r["csr"]["both"]) == (1, 1, 2)
    assert r["csr"]["delta"] == pytest.approx(0.0) and r["csr"]["mcnemar_p"] == pytest.approx(1.0)
    assert r["epochs_solved"] == {"a_more": 2, "b_more": 1, "sign_test_p": 1.0}
    with pytest.raises(ValueError, match="shapes"):
        paired(a, b[:2])


def test_teacher_memory_ids_of_a_merged_history_bank() -> None:
    assert teacher_memory("init:expert:e001:look-CD-302/trial_T1") == ("expert", "look-CD-302/trial_T1")
    assert teacher_memory("init:attempt:e001:a") == ("attempt", "a")
    assert teacher_memory("init:e001:a") == ("", "a")
    assert teacher_memory_task("init:attempt:e001:a") == "a"
    assert teacher_memory("e001:a") is None and teacher_memory("init:x") is None


def _jsonl(path: Path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_teacher_losses_names_q_init_above_a_teacher_that_other_games_pushed_down(tmp_path) -> None:
    """Game a's teacher memory is given to a (fails) and to b (fails): Q 0 -> -0.3 -> -0.51.
    In epoch 2 game a is shown its own failed attempt (Q_init 0) instead: the teacher's Q is
    below the failure's, and one of the two updates that pushed it came from another game.
    Game b is then shown a's failed attempt although its own teacher memory's Q is higher."""
    run = RunDir(tmp_path)
    rows = [
        rec(1, "a", False, [("init:e001:a", 0.0)], written="e001:a", batch=0),
        rec(1, "b", False, [("init:e001:a", -0.3)], written="e001:b", batch=1),
        rec(2, "a", False, [("e001:a", 0.0)], written="e002:a", batch=0),
        # b is shown a's failed attempt (another game's), Q -0.3, over its own teacher at 0
        rec(2, "b", False, [("e001:a", -0.3)], written="e002:b", batch=1),
    ]
    for r in rows:
        r.info = {"retrieval": {"pool": 3}}
    _jsonl(run.episodes, [json.loads(r.to_json()) for r in rows])
    _jsonl(run.bank_updates, [
        {"epoch": 1, "batch": 0, "initial": [{"id": "init:e001:a", "q": 0.0}, {"id": "init:e001:b", "q": 0.0}],
         "updates": [{"id": "init:e001:a", "q_before": 0.0, "q_after": -0.3}],
         "added": [{"id": "e001:a", "q": 0.0}], "removed": [], "size": 3},
        {"epoch": 1, "batch": 1, "updates": [{"id": "init:e001:a", "q_before": -0.3, "q_after": -0.51}],
         "added": [{"id": "e001:b", "q": 0.0}], "removed": [], "size": 4},
        {"epoch": 2, "batch": 0, "updates": [{"id": "e001:a", "q_before": 0.0, "q_after": -0.3}],
         "added": [{"id": "e002:a", "q": 0.0}], "removed": [], "size": 5},
        {"epoch": 2, "batch": 1, "updates": [{"id": "e001:a", "q_before": -0.3, "q_after": -0.51}],
         "added": [{"id": "e002:b", "q": 0.0}], "removed": [], "size": 6},
    ])
    got = teacher_losses(tmp_path)
    assert got["own_failure_over_teacher"] == 2 and got["games"] == 2 and got["written_by_another_game"] == 1
    assert got["causes"] == {"teacher_q_below": 1, "teacher_q_above": 1}
    assert math.isclose(got["q_teacher_mean"], (-0.51 + 0.0) / 2) and math.isclose(got["q_chosen_mean"], -0.15)
    assert got["teacher_updates_from"] == {"own_game": 1, "other_games": 1}
    assert got["rows"][0]["pool"] == 3 and got["rows"][0]["chosen"] == "e001:a" and got["rows"][0]["own_game"]
    assert got["rows"][1]["task"] == "b" and not got["rows"][1]["own_game"]

    _jsonl(run.bank_updates, [])  # a log that misses batches is refused, not read as empty
    with pytest.raises(ValueError, match="does not cover"):
        teacher_losses(tmp_path)
