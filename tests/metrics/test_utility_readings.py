"""The Figure-7 readings (memrl.metrics.utility): Q against the success of the episodes a
memory was injected into, and the share of injected memories written by a success."""

from __future__ import annotations

import numpy as np
import pytest

from memrl.core.records import EpisodeRecord
from memrl.metrics.compute import compute_metrics
from memrl.memory.q_update import update_q
from memrl.metrics.utility import _auc, _ranks, _spearman, injected_from_success, q_prospective, q_success


def rec(epoch, task, success, injected=(), written=None, batch=0):
    return EpisodeRecord(epoch=epoch, batch=batch, task_id=task, intent=task, success=success,
                         reward=float(success), steps=1, written=written,
                         injected=[{"id": mid, "q": q} for mid, q in injected])


def test_q_at_the_last_injection_against_the_success_rate_of_its_episodes() -> None:
    records = [rec(1, "a", True, written="m1"), rec(1, "b", False, written="m2"), rec(1, "c", True, written="m3"),
               rec(1, "d", False, written="m4"),
               # epoch 2: m1 (Q 0.3) helps twice, m2 (Q -0.3) fails twice, m3 (Q 0.1) once each, m4 never
               rec(2, "a", True, [("m1", 0.3), ("m3", 0.1)]), rec(2, "b", False, [("m2", -0.3), ("m3", 0.1)]),
               rec(2, "c", True, [("m1", 0.51)]), rec(2, "d", False, [("m2", -0.51)])]
    got = q_success(records)
    # per memory: (Q at its last injection, success rate): m1 (0.51, 1), m2 (-0.51, 0), m3 (0.1, 0.5)
    x, y = np.array([0.51, -0.51, 0.1]), np.array([1.0, 0.0, 0.5])
    assert got["memories"] == 3 and got["injections"] == 6
    assert got["pearson"] == pytest.approx(float(np.corrcoef(x, y)[0, 1]))
    assert got["spearman"] == pytest.approx(1.0)
    lo, hi = got["pearson_ci"]
    assert lo <= got["pearson"] <= hi <= 1.0
    # a similarity-only method records Q = 0 for all: no correlation, no interval
    flat = q_success([rec(2, "a", True, [("m1", 0.0)]), rec(2, "b", False, [("m2", 0.0)]),
                      rec(2, "c", True, [("m3", 0.0)])])
    assert flat["pearson"] is None and flat["spearman"] is None and flat["pearson_ci"] is None


def test_ranks_and_spearman_with_ties() -> None:
    assert _ranks(np.array([3.0, 1.0, 3.0, 2.0])).tolist() == [2.5, 0.0, 2.5, 1.0]
    assert _spearman(np.array([1.0, 2.0, 3.0, 4.0]), np.array([4.0, 3.0, 2.0, 1.0])) == pytest.approx(-1.0)


def test_the_share_of_injected_memories_written_by_a_success_per_epoch() -> None:
    records = [rec(1, "a", True, written="m1"), rec(1, "b", False, written="m2"),
               rec(2, "a", True, [("m1", 0.3), ("m2", 0.0), ("init:x", 0.0)], written="m3"),
               rec(2, "b", False, [("m2", -0.3)]), rec(3, "a", True, [("m1", 0.5), ("m3", 0.0)])]
    got = injected_from_success(records)
    assert got["1"] == {"success": 0, "failure": 0, "unknown": 0, "share": None}
    assert got["2"] == {"success": 1, "failure": 2, "unknown": 1, "share": pytest.approx(1 / 3)}
    assert got["3"] == {"success": 2, "failure": 0, "unknown": 0, "share": 1.0}
    assert list(compute_metrics(records, allow_missing=True)["utility"]) == [
        "q_prospective", "q_success", "injected_from_success"]


def test_prospective_reading_pairs_each_injection_with_the_q_before_its_episode() -> None:
    records = [rec(2, "a", True, [("m1", 0.3), ("m3", 0.1)]), rec(2, "b", False, [("m2", -0.3), ("m3", 0.1)]),
               rec(2, "c", True, [("m1", 0.51)]), rec(2, "d", False, [("m2", -0.51)]), rec(1, "e", False)]
    got = q_prospective(records)
    x = np.array([0.3, 0.1, -0.3, 0.1, 0.51, -0.51])
    y = np.array([1, 1, 0, 0, 1, 0], dtype=float)
    assert (got["episodes"], got["injections"], got["successes"], got["distinct_q"]) == (4, 6, 3, 5)
    assert got["point_biserial"] == pytest.approx(float(np.corrcoef(x, y)[0, 1]))
    # successes carry 0.3, 0.1, 0.51; failures -0.3, 0.1, -0.51: 8 wins and one tie of 9 pairs
    assert got["auc"] == pytest.approx(8.5 / 9)
    lo, hi = got["auc_ci"]
    assert lo <= got["auc"] <= hi <= 1.0
    assert got["point_biserial_ci"][0] <= got["point_biserial"] <= got["point_biserial_ci"][1]


def test_auc_by_hand_and_undefined_with_one_class() -> None:
    assert _auc(np.array([0.0, 1.0, 2.0]), np.array([False, True, True])) == 1.0
    assert _auc(np.array([1.0, 1.0]), np.array([False, True])) == 0.5
    assert _auc(np.array([1.0, 2.0]), np.array([True, True])) is None
    flat = q_prospective([rec(2, "a", True, [("m1", 0.0)]), rec(2, "b", False, [("m2", 0.0)])])
    assert flat["point_biserial"] is None and flat["auc"] == 0.5  # Q = 0 throughout (RAG): no signal


def test_the_retrospective_reading_is_high_when_q_is_worthless_and_the_prospective_is_not() -> None:
    """Outcomes are coin flips that no memory influences, so Q is worth nothing. Q is a running
    average of the very outcomes the retrospective reading scores it against: that reading is
    high anyway; the prospective one (Q before each episode against its outcome) is near chance."""
    rng = np.random.default_rng(4)
    q = {f"m{i}": 0.0 for i in range(40)}
    records = []
    for epoch in range(1, 6):
        for i, mid in enumerate(q):
            win = bool(rng.random() < 0.5)
            records.append(rec(epoch, f"t{i}", win, [(mid, q[mid])], batch=i))
            q[mid] = update_q(q[mid], 1.0 if win else -1.0, 0.3)
    retro = q_success(records)
    pro = q_prospective(records)
    assert retro["pearson"] > 0.7  # the bookkeeping's correlation
    assert abs(pro["auc"] - 0.5) < 0.1 and pro["auc_ci"][0] < 0.5 < pro["auc_ci"][1]
    assert pro["point_biserial_ci"][0] < 0.0 < pro["point_biserial_ci"][1]
