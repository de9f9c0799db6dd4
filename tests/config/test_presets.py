"""Retrieval settings go with the benchmark: every env config carries the paper's δ/k1/k2
(v2, Table 8), so any env x memory composition gets them, with or without a preset; Table 8's
δ holds only for the paper's embedder, any other gets `delta: auto`. Every paper preset
composes and validates with MemRL and with every baseline."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from memrl.config.validate import validate
from data_paths import ALFWORLD, BCB_HARD_TRAIN, LIFELONG, LIFELONG_DB, LIFELONG_OS

ROOT = Path(__file__).resolve().parents[2]
METHODS = ["memrl", "none", "pass_at_k", "rag", "self_rag", "memp", "reflection", "mem0",
           "memq", "reasoningbank", "expel", "awm"]
TOP_K = ("rag", "self_rag", "memp", "mem0")  # the baselines that retrieve the benchmark's k2
# env: ((delta, k1, k2) of Table 8, overrides pointing at local data)
ENVS = {
    "alfworld": ((0.62, 5, 3), [f"env.data_root={ALFWORLD}", "env.split=valid_seen"]),
    "bigcodebench": ((0.38, 10, 5), [f"env.data_path={BCB_HARD_TRAIN}",
                                     "env.part=all"]),
    "lifelong_os": ((0.50, 10, 5), [f"env.data_path={LIFELONG_OS}"]),
    "lifelong_db": ((0.37, 10, 5), [f"env.data_path={LIFELONG_DB}"]),
    "hle": ((0.25, 5, 3), [f"env.data_path={ROOT / 'tests' / 'fixtures' / 'hle' / 'hle_fixture.jsonl'}"]),
}
PRESETS = {  # preset: (env, llm preset)
    "alfworld_paper": ("alfworld", "gpt-5-mini"),
    "bcb_paper": ("bigcodebench", "gpt-4o"),
    "llb_os_paper": ("lifelong_os", "gpt-4o-mini"),
    "llb_db_paper": ("lifelong_db", "gpt-4o-mini"),
    "hle_paper": ("hle", "gemini-3-pro"),
}

pytestmark = pytest.mark.skipif(not (ALFWORLD.is_dir() and LIFELONG.is_dir() and BCB_HARD_TRAIN.is_file()),
                                reason=f"benchmark data not at {ALFWORLD}, {LIFELONG}, {BCB_HARD_TRAIN}")


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
    if method in ("memrl", "memq"):  # MemQ retrieves as MemRL does
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


def test_the_bank_block_is_one_shared_schema() -> None:
    """Every banked memory's bank block is BankSettings, its defaults the schema's (no YAML
    repeats them); an override reaches the module."""
    _, overrides = ENVS["alfworld"]
    banks = {}
    for method in ("memrl", "memrl_rag", "rag", "self_rag", "memp", "reflection", "memq", "reasoningbank", "expel",
                   "awm"):
        cfg = composed(f"memory={method}", "memory.bank.ef_search=64", *overrides)
        v = validate(cfg)
        banks[method] = v.memory.bank.model_dump()
        assert v.memory.bank.ef_search == 64
    assert len({tuple(sorted(b.items())) for b in banks.values()}) == 1
    assert banks["memrl"]["collection"] == "memories" and banks["memrl"]["frozen"] is False


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
    env, llm = PRESETS[paper]
    _, overrides = ENVS[env]
    if preset.startswith("llb"):  # the official task set needs the val file beside train
        overrides = [f"env.data_path={LLB_FIXTURE / LLB_TRAIN[env]}"]
    cfg = composed(f"experiment={preset}", *overrides)
    base = validate(composed(f"experiment={paper}", *overrides))
    v = validate(cfg)
    m = v.memory
    got = (m.delta, m.k1, m.k2, list(m.sim_stats), m.epsilon, m.q_init, m.q_init_by_outcome,
           m.reward_failure, m.q_floor, m.q_min, m.dedup_threshold, v.runner.batch_size)
    assert got == expected
    assert m.pool_by_intent and m.phase_a_ties == "oldest" and m.z_clip == 3.0
    assert m.learn_from_errors and m.normalize and m.sim_gate and (m.alpha, m.lam) == (0.3, 0.5)
    # what a memory holds and how it is shown (issue 23): the official writer, ε's order, the
    # env's official display
    assert (m.writer.layout, m.writer.reflection_temperature, m.epsilon_order) == ("official", 0.3, "random")
    assert (base.memory.writer.layout, base.memory.epsilon_order) == ("memrl", "rank")
    assert v.env.memory_format == "official" and base.env.memory_format != "official"
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


LLB_FIXTURE = ROOT / "tests" / "fixtures" / "lifelong_official"
LLB_TRAIN = {"lifelong_os": "os_interaction_train.json", "lifelong_db": "db_train.json"}


@pytest.mark.parametrize("env", sorted(LLB_TRAIN))
def test_the_official_lifelong_task_set_is_train_and_val_in_string_order(env: str) -> None:
    from memrl.core.errors import ConfigError

    preset = "llb_os_official" if env == "lifelong_os" else "llb_db_official"
    v = validate(composed(f"experiment={preset}", f"env.data_path={LLB_FIXTURE / LLB_TRAIN[env]}"))
    assert (v.env.val_path, v.env.split, v.env.task_order, v.env.memory_format) == \
        ("auto", "all", "string", "official")
    # only a train file (as in ../shared/data): the official preset refuses, naming the val file
    with pytest.raises(ConfigError) as err:
        validate(composed(f"experiment={preset}", *ENVS[env][1]))
    assert LLB_TRAIN[env].replace("train", "val") in str(err.value)
    paper = validate(composed(f"experiment={preset.replace('official', 'paper')}", *ENVS[env][1]))
    assert (paper.env.val_path, paper.env.task_order) == (None, "numeric")


def test_official_switches_apply_on_top_of_the_demo() -> None:
    demo = validate(composed("experiment=demo", f"env.data_root={ALFWORLD}"))
    v = validate(composed("experiment=demo", "+official=alfworld", f"env.data_root={ALFWORLD}"))
    assert v.llm.name == "local"  # the demo's model, games and epochs stay
    assert (v.runner.epochs, v.env.max_tasks) == (demo.runner.epochs, demo.env.max_tasks)
    assert v.memory.pool_by_intent and v.memory.delta == 0.5 and v.runner.batch_size == 32


def test_bcb_paper_runs_the_papers_set_and_hard_stays_an_option() -> None:
    paper = validate(composed("experiment=bcb_paper"))
    hard = validate(composed("experiment=bcb_paper", "env.subset=hard"))
    official = validate(composed("experiment=bcb_official"))
    assert (paper.env.subset, paper.env.split, paper.env.part, paper.env.split_seed, paper.env.train_ratio) == \
        ("full", "instruct", "train", 42, 0.7)
    assert hard.env.subset == "hard"
    assert (official.env.subset, official.env.split_seed) == ("full", 123)


def test_metrics_reading_is_validated() -> None:
    from memrl.core.errors import ConfigError

    assert validate(composed(f"env.data_root={ALFWORLD}")).metrics.forgetting_zero_fail == "zero"
    bad = composed(f"env.data_root={ALFWORLD}", "metrics.forgetting_zero_fail=nan")
    with pytest.raises(ConfigError, match="metrics.forgetting_zero_fail"):
        validate(bad)
