"""Every paper preset composes and validates with MemRL and with every baseline, and carries
the paper's per-benchmark retrieval settings (v2, Table 8) into the memory section."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from memrl.config import validate

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
METHODS = ["memrl", "none", "pass_at_k", "rag", "self_rag", "memp", "reflection", "mem0"]
PRESETS = {
    # preset: ((delta, k1, k2), llm preset, overrides pointing at local data)
    "alfworld_paper": ((0.62, 5, 3), "gpt-5-mini",
                       [f"env.data_root={DATA / 'alfworld'}", "env.split=valid_seen"]),
    "bcb_paper": ((0.38, 10, 5), "gpt-4o",
                  [f"env.data_path={DATA / 'bigcodebench' / 'bigcodebench_hard_train.jsonl'}", "env.part=all"]),
    "llb_os_paper": ((0.50, 10, 5), "gpt-4o-mini",
                     [f"env.data_path={DATA / 'lifelong' / 'os_interaction_train.json'}"]),
    "llb_db_paper": ((0.37, 10, 5), "gpt-4o-mini",
                     [f"env.data_path={DATA / 'lifelong' / 'db_train.json'}"]),
    "hle_paper": ((0.25, 5, 3), "gemini-3-pro",
                  [f"env.data_path={ROOT / 'tests' / 'fixtures' / 'hle' / 'hle_fixture.jsonl'}"]),
}

pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"benchmark data not at {DATA}")


@pytest.mark.parametrize("preset", sorted(PRESETS))
@pytest.mark.parametrize("method", METHODS)
def test_paper_preset_validates_for_every_method(preset: str, method: str) -> None:
    (delta, k1, k2), llm, overrides = PRESETS[preset]
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        cfg = compose("config", overrides=[f"experiment={preset}", f"memory={method}", *overrides])
    v = validate(cfg)
    assert (cfg.retrieval.delta, cfg.retrieval.k1, cfg.retrieval.k2) == (delta, k1, k2)
    assert v.llm.name == llm and v.runner.epochs == 10
    if method == "memrl":
        assert (v.memory.delta, v.memory.k1, v.memory.k2) == (delta, k1, k2)
    elif method in ("rag", "self_rag", "memp", "mem0"):
        assert v.memory.k == k2  # the baselines retrieve the benchmark's k2
