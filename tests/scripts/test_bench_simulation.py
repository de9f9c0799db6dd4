"""The zero-overhead schedules that scripts/bench_throughput.py prints as `sim` next to each
measured efficiency: checked on lengths whose best schedule can be worked out by hand."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "bench_throughput", Path(__file__).resolve().parents[2] / "scripts" / "bench_throughput.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_equal_lengths_waste_nothing_in_any_schedule() -> None:
    by_epoch = [[5] * 8] * 3
    for schedule in ("batch", "async"):
        assert bench.simulate(by_epoch, 4, schedule) == pytest.approx(1.0)


def test_a_straggler_stalls_its_batch_and_only_the_run_end_of_an_overlapping_pool() -> None:
    # one 10-step game among 1-step ones, width 2, two epochs
    by_epoch = [[10, 1, 1, 1]] * 2
    ideal = 26 / 2
    # batches: (10, 1) (1, 1) per epoch = 11 steps each
    assert bench.simulate(by_epoch, 2, "batch") == pytest.approx(ideal / 22)
    # barrier pool: the straggler holds a slot for 10 while the other ends the rest by 3;
    # each epoch takes 10
    assert bench.simulate(by_epoch, 2, "async", overlap=False) == pytest.approx(ideal / 20)
    # overlap: epoch 2's short games play beside epoch 1's straggler (t=3..6), but its
    # straggler may start only once epoch 1's has ended (t=10): 10 + 10
    assert bench.simulate(by_epoch, 2, "async") == pytest.approx(ideal / 20)
    # with the straggler last in task order the overlap hides the first epoch's drain
    by_epoch = [[1, 1, 1, 10]] * 2
    assert bench.simulate(by_epoch, 2, "async", overlap=False) == pytest.approx(ideal / 22)
    assert bench.simulate(by_epoch, 2, "async") == pytest.approx(ideal / 21)


def test_a_third_epoch_waits_for_the_first_to_end() -> None:
    # width 3, one task: epochs strictly follow each other whatever the width
    assert bench.simulate([[4], [4], [4]], 3, "async") == pytest.approx((12 / 3) / 12)
