"""MemRL with the official-code switches selects what an independent reference of the official
`memory_service.py` selects, step by step, on a synthetic stream (`memrl.testing.official_replay`;
`scripts/replay_official.py` prints the figures for a longer stream). Without `pool_by_intent`
the two part ways: the official Phase A ranks intent keys."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from replay_official import official_memory

from memrl.testing.official_replay import replay, synthetic_stream


@pytest.mark.parametrize("bench", ["alfworld", "bcb", "llb"])
def test_official_switches_agree_with_the_reference_at_every_step(tmp_path, bench):
    stream = synthetic_stream(n_tasks=24, epochs=4, seed=3)
    memory, batch = official_memory(bench)
    got = replay(memory, stream, batch, own_key_fallback=bench == "llb", bank_dir=tmp_path / "a")
    assert got.steps == 96
    assert got.agree == got.steps and got.same_pool == got.steps
    flat = replay(memory.model_copy(update={"pool_by_intent": False}), stream, batch,
                  own_key_fallback=bench == "llb", bank_dir=tmp_path / "b")
    assert flat.agree < flat.steps and flat.mean_pool_ours <= memory.k1
    assert got.mean_pool_ours > flat.mean_pool_ours  # whole buckets: larger pools
