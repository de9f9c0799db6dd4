"""The Figure-7 readings (memrl.metrics.utility): Q against the success of the episodes a
memory was injected into, and the share of injected memories written by a success."""

from __future__ import annotations

import numpy as np
import pytest

from memrl.core.records import EpisodeRecord
from memrl.metrics.compute import compute_metrics
from memrl.metrics.utility import _ranks, _spearman, injected_from_success, q_success


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
    assert list(compute_metrics(records, allow_missing=True)["utility"]) == ["q_success", "injected_from_success"]
