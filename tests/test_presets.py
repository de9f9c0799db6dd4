"""Retrieval settings go with the benchmark: every env config carries the paper's δ/k1/k2
(v2, Table 8), so any env x memory composition gets them, with or without a preset; Table 8's
δ holds only for the paper's embedder, any other gets `delta: auto`. Every paper preset
composes and validates with MemRL and with every baseline."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from memrl.config import validate

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
METHODS = ["memrl", "none", "pass_at_k", "rag", "self_rag", "memp", "reflection", "mem0"]
TOP_K = ("rag", "self_rag", "memp", "mem0")  # the baselines that retrieve the benchmark's k2
# env: ((delta, k1, k2) of Table 8, overrides pointing at local data)
ENVS = {
    "alfworld": ((0.62, 5, 3), [f"env.data_root={DATA / 'alfworld'}", "env.split=valid_seen"]),
    "bigcodebench": ((0.38, 10, 5), [f"env.data_path={DATA / 'bigcodebench' / 'bigcodebench_hard_train.jsonl'}",
                                     "env.part=all"]),
    "lifelong_os": ((0.50, 10, 5), [f"env.data_path={DATA / 'lifelong' / 'os_interaction_train.json'}"]),
    "lifelong_db": ((0.37, 10, 5), [f"env.data_path={DATA / 'lifelong' / 'db_train.json'}"]),
    "hle": ((0.25, 5, 3), [f"env.data_path={ROOT / 'tests' / 'fixtures' / 'hle' / 'hle_fixture.jsonl'}"]),
}
PRESETS = {  # preset: (env, llm preset)
    "alfworld_paper": ("alfworld", "gpt-5-mini"),
    "bcb_paper": ("bigcodebench", "gpt-4o"),
    "llb_os_paper": ("lifelong_os", "gpt-4o-mini"),
    "llb_db_paper": ("lifelong_db", "gpt-4o-mini"),
    "hle_paper": ("hle", "gemini-3-pro"),
}

pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"benchmark data not at {DATA}")


def composed(*overrides: str):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        return compose("config", overrides=list(overrides))


@pytest.mark.parametrize("preset", sorted(PRESETS))
@pytest.mark.parametrize("method", METHODS)
def test_paper_preset_validates_for_every_method(preset: str, method: str) -> None:
    env, llm = PRESETS[preset]
    (delta, k1, k2), overrides = ENVS[env]
    cfg = composed(f"experiment={preset}", f"memory={method}", *overrides)
    v = validate(cfg)
    assert (cfg.env.retrieval.delta, cfg.env.retrieval.k1, cfg.env.retrieval.k2) == (delta, k1, k2)
    assert v.llm.name == llm and v.runner.epochs == 10 and v.embedder.name == "text-embedding-3-large"
    if method == "memrl":
        assert (v.memory.delta, v.memory.k1, v.memory.k2) == (delta, k1, k2)
    elif method in TOP_K:
        assert v.memory.k == k2


@pytest.mark.parametrize("env", sorted(ENVS))
@pytest.mark.parametrize("embedder", ["text-embedding-3-large", "minilm", "hashing"])
def test_any_composition_gets_its_benchmarks_retrieval_settings(env: str, embedder: str) -> None:
    """No preset: `env=<bench> memory=...` uses that benchmark's k1/k2, and Table 8's δ only
    with the embedder it was chosen for."""
    (delta, k1, k2), overrides = ENVS[env]
    v = validate(composed(f"env={env}", "memory=memrl", f"embedder={embedder}", *overrides))
    expected = delta if embedder == "text-embedding-3-large" else "auto"
    assert (v.memory.delta, v.memory.k1, v.memory.k2) == (expected, k1, k2)
    for method in TOP_K:
        assert validate(composed(f"env={env}", f"memory={method}", f"embedder={embedder}", *overrides)).memory.k == k2


def test_explicit_values_win_over_the_benchmarks() -> None:
    (_, k1, _), overrides = ENVS["bigcodebench"]
    base = ["env=bigcodebench", "memory=memrl", *overrides]
    v = validate(composed(*base, "env.retrieval.delta=0.4"))  # minilm: an explicit δ still holds
    assert (v.memory.delta, v.memory.k1) == (0.4, k1)
    v = validate(composed(*base, "embedder=text-embedding-3-large", "memory.delta=auto", "memory.k2=2"))
    assert (v.memory.delta, v.memory.k2) == ("auto", 2)
    assert validate(composed("env=bigcodebench", "memory=rag", "env.retrieval.k2=7", *overrides)).memory.k == 7


def test_the_bank_block_is_one_shared_group() -> None:
    """Every banked memory reads the same bank group; an override reaches the module."""
    _, overrides = ENVS["alfworld"]
    banks = {}
    for method in ("memrl", "memrl_rag", "rag", "self_rag", "memp", "reflection"):
        cfg = composed(f"memory={method}", "memory.bank.ef_search=64", *overrides)
        v = validate(cfg)
        banks[method] = v.memory.bank.model_dump()
        assert v.memory.bank.ef_search == 64
    assert len({tuple(sorted(b.items())) for b in banks.values()}) == 1
    assert banks["memrl"]["collection"] == "memories" and banks["memrl"]["frozen"] is False
