"""Holm's step-down adjustment (memrl.report.stats.holm), worked by hand."""

import pytest

from memrl.report.stats import holm


def test_holm_by_hand():
    # sorted: 0.01 (x3) = 0.03, 0.02 (x2) = 0.04, 0.04 (x1) = 0.04; back in the given order
    assert holm([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    # running maximum keeps the order; capped at 1
    assert holm([0.02, 0.011]) == pytest.approx([0.022, 0.022])
    assert holm([0.6, 0.5, 0.9]) == pytest.approx([1.0, 1.0, 1.0])
    assert holm([]) == []
