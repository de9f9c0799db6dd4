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


# ---------------------------------------------------------------------- official-code presets
# preset: (gate, k1, k2, sim stats, ε, Q_init, Q_init by outcome, failure reward, Q floor, q_min,
#          dedup, batch size), as configs/official/*.yaml transcribe MemTensor/MemRL @ 7c3beba
HLE_STATS = [0.1856827586889267, 0.09407906234264374]
OFFICIAL = {
    "alfworld_official": ("alfworld_paper", (0.5, 5, 3, [0.5187, 0.1203], 0.0, 0.0, False, -1.0, None, -10.0, 0.9, 32)),
    "bcb_official": ("bcb_paper", (0.5, 5, 5, [0.31, 0.10], 0.1, 0.0, False, -1.0, None, -0.8, 0.9, 25)),
    "hle_official": ("hle_paper", (0.5, 5, 3, HLE_STATS, 0.0, 0.0, True, -1.0, None, -10.0, 0.9, 32)),
    "llb_os_official": ("llb_os_paper", (0.5, 10, 5, HLE_STATS, 0.01, 0.5, False, 0.0, 0.0, -0.8, 0.99, 5)),
    "llb_db_official": ("llb_db_paper", (0.5, 10, 5, HLE_STATS, 0.01, 0.5, False, 0.0, 0.0, -0.8, 0.99, 5)),
}


@pytest.mark.parametrize("preset", sorted(OFFICIAL))
def test_official_preset_sets_every_official_switch_on_the_paper_preset(preset: str) -> None:
    paper, expected = OFFICIAL[preset]
    _, llm, overrides = PRESETS[paper]
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        cfg = compose("config", overrides=[f"experiment={preset}", *overrides])
        base = compose("config", overrides=[f"experiment={paper}", *overrides])
    v = validate(cfg)
    m = v.memory
    got = (m.delta, m.k1, m.k2, list(m.sim_stats), m.epsilon, m.q_init, m.q_init_by_outcome,
           m.reward_failure, m.q_floor, m.q_min, m.dedup_threshold, v.runner.batch_size)
    assert got == expected
    assert m.pool_by_intent and m.phase_a_ties == "oldest" and m.z_clip == 3.0
    assert m.learn_from_errors and m.normalize and m.sim_gate and (m.alpha, m.lam) == (0.3, 0.5)
    # what the official code does not change stays the paper preset's
    assert (v.env.name, v.llm.name, v.runner.epochs) == (base.env.name, llm, 10)
    assert base.memory.pool_by_intent is False and base.memory.phase_a_ties == "include"
    assert v.env.max_steps == base.env.max_steps
    # the text retrieval embeds: ALFWorld's first observation, BigCodeBench's whole prompt
    if preset == "alfworld_official":
        assert v.env.intent_with_observation and not base.env.intent_with_observation
    if preset == "bcb_official":
        assert (v.env.intent, base.env.intent) == ("prompt", "task")
    # every value in the official switch file names the file it comes from
    name = "llb" if preset.startswith("llb") else preset.removesuffix("_official")
    lines = (ROOT / "configs" / "official" / f"{name}.yaml").read_text().splitlines()
    values = [(prev, line) for prev, line in zip(lines, lines[1:])
              if line.startswith("  ") and not line.strip().startswith("#")]
    assert values
    for prev, line in values:  # an inline comment, or a comment right above the value
        assert "#" in line or prev.strip().startswith("#"), f"{name}.yaml: no source for {line.strip()}"


def test_official_switches_apply_on_top_of_the_demo() -> None:
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        cfg = compose("config", overrides=["experiment=demo", "+official=alfworld",
                                           f"env.data_root={DATA / 'alfworld'}"])
    v = validate(cfg)
    assert v.llm.name == "local" and v.runner.epochs == 2 and v.env.max_tasks == 3  # the demo's
    assert v.memory.pool_by_intent and v.memory.delta == 0.5 and v.runner.batch_size == 32


def test_bcb_paper_runs_the_papers_set_and_hard_stays_an_option() -> None:
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        paper = validate(compose("config", overrides=["experiment=bcb_paper"]))
        hard = validate(compose("config", overrides=["experiment=bcb_paper", "env.subset=hard"]))
        official = validate(compose("config", overrides=["experiment=bcb_official"]))
    assert (paper.env.subset, paper.env.split, paper.env.part, paper.env.split_seed, paper.env.train_ratio) == \
        ("full", "instruct", "train", 42, 0.7)
    assert hard.env.subset == "hard"
    assert (official.env.subset, official.env.split_seed) == ("full", 123)


def test_metrics_reading_is_validated() -> None:
    from memrl.config import ConfigError

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        assert validate(compose("config", overrides=[f"env.data_root={DATA / 'alfworld'}"])).metrics.forgetting_zero_fail == "zero"
        bad = compose("config", overrides=[f"env.data_root={DATA / 'alfworld'}", "metrics.forgetting_zero_fail=nan"])
    with pytest.raises(ConfigError, match="metrics.forgetting_zero_fail"):
        validate(bad)
