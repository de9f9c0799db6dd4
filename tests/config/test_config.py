"""Config composition and validation: a wrong value stops the run before any model call,
with a message naming the key."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from memrl.config.validate import validate
from memrl.core.errors import ConfigError
from memrl.core.rundir import RunDir
from data_paths import ALFWORLD

CONFIGS = str(Path(__file__).resolve().parents[2] / "configs")


def cfg(*overrides: str):
    with initialize_config_dir(config_dir=CONFIGS, version_base=None):
        return compose(config_name="config", overrides=[f"env.data_root={ALFWORLD}", *overrides])


needs_data = pytest.mark.skipif(not ALFWORLD.is_dir(), reason=f"ALFWorld data not at {ALFWORLD}")


@needs_data
def test_default_config_validates_with_paper_defaults():
    v = validate(cfg())
    # ALFWorld's k1/k2 (Table 8); its δ 0.62 is for the paper's embedder, not the default MiniLM
    assert (v.memory.alpha, v.memory.lam, v.memory.delta, v.memory.k1, v.memory.k2) == (0.3, 0.5, "auto", 5, 3)
    assert validate(cfg("embedder=text-embedding-3-large")).memory.delta == 0.62
    assert v.env.max_steps == 30 and v.runner.epochs == 10
    assert v.llm.backend == "local"


@needs_data
def test_paper_preset_composes():
    # the full train split is not in the shared data; its absence must be a clear error
    with pytest.raises(ConfigError, match="json_2.1.1/train"):
        validate(cfg("experiment=alfworld_paper"))
    v = validate(cfg("experiment=alfworld_paper", "env.split=valid_train"))
    assert v.llm.model == "openai/gpt-5-mini" and v.embedder.model == "openai/text-embedding-3-large"
    assert (v.memory.delta, v.memory.k1, v.memory.k2, v.env.max_steps) == (0.62, 5, 3, 30)


@needs_data
@pytest.mark.parametrize("override,key", [
    ("memory.lam=1.5", "memory.lam"),
    ("memory.alpha=-0.1", "memory.alpha"),
    ("memory.k2=9", "memory.k2"),
    ("memory.delta=2.0", "memory.delta"),
    ("runner.epochs=0", "runner.epochs"),
    ("env.split=test", "env.split"),
    ("llm.max_concurrency=0", "llm.max_concurrency"),
    ("+memory.lamda=0.5", "memory.lamda"),
    ("agent=canonical", "agent"),
    ("+agent.needs_llm=false", "agent.needs_llm"),
])
def test_bad_values_name_the_key(override, key):
    with pytest.raises(ConfigError) as info:
        validate(cfg(override))
    assert key in str(info.value)


def test_missing_data_path_names_the_key(tmp_path):
    with pytest.raises(ConfigError) as info:
        validate(cfg(f"env.data_root={tmp_path / 'nowhere'}"))
    assert "env.data_root" in str(info.value) and "make data-alfworld" in str(info.value)


def test_cli_rejects_bad_value_before_building_anything(tmp_path):
    env = dict(os.environ, ALFWORLD_DATA=str(ALFWORLD))
    out = subprocess.run([sys.executable, "-m", "memrl.cli", "run", "memory.lam=1.5",
                          f"hydra.run.dir={tmp_path / 'run'}"], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 2
    assert "memory.lam" in out.stderr
    assert not RunDir(tmp_path / "run").card.exists()


def test_cli_unknown_group_option_is_a_clear_error(tmp_path):
    out = subprocess.run([sys.executable, "-m", "memrl.cli", "run", "memory=nonexistent",
                          f"hydra.run.dir={tmp_path / 'run'}"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode != 0
    assert "memory/nonexistent" in out.stderr or "nonexistent" in out.stderr


@needs_data
def test_memrl_variant_configs():
    v = validate(cfg("memory=memrl_no_norm_simgate"))
    assert (v.memory.normalize, v.memory.sim_gate, v.memory.name) == (False, False, "memrl_no_norm_simgate")
    assert v.memory.alpha == 0.3  # inherits the paper defaults
    v = validate(cfg("memory=memrl_rag"))
    assert v.memory.write_mode == "raw" and v.memory.name == "memrl_rag"


def test_resume_refuses_a_different_config_but_allows_exempt_keys(tmp_path):
    import json

    from memrl.journal.runcard import check_resume

    config = {"memory": {"lam": 0.5, "alpha": 0.3}, "runner": {"epochs": 2, "progress": True}, "seed": 0}
    card = RunDir(tmp_path).card
    assert check_resume(card, config) is None  # a new run
    card.write_text(json.dumps({"config": config}))
    more_epochs = {**config, "runner": {"epochs": 5, "progress": False}}
    assert check_resume(card, more_epochs)["config"] == config  # extending a run is allowed
    with pytest.raises(ConfigError, match=r"memory\.lam: 0\.5 -> 1\.0"):
        check_resume(card, {**config, "memory": {"lam": 1.0, "alpha": 0.3}})
    # how metrics read a 0/0 forgetting epoch changes no result: a run started before the
    # `metrics` node existed, or with the other reading, resumes
    assert check_resume(card, {**config, "metrics": {"forgetting_zero_fail": "skip"}})["config"] == config


@pytest.mark.parametrize("preset,width", [("alfworld_paper", 32), ("hle_paper", 32),
                                          ("llb_os_paper", 5), ("llb_db_paper", 5),
                                          ("alfworld_official", 32), ("hle_official", 32),
                                          ("llb_os_official", 5), ("llb_db_official", 5),
                                          ("bcb_official", 25)])
def test_paper_presets_run_the_official_batches_with_as_many_model_calls_in_flight(preset, width):
    """Issue 16: the official code's batch sizes, and a model concurrency that plays them."""
    from omegaconf import OmegaConf

    from memrl.config.sections import LLMSettings, RunnerSettings

    def sections(*overrides: str) -> tuple[RunnerSettings, LLMSettings]:
        """The runner and llm sections as validated (the YAML leaves their defaults to the schema)."""
        with initialize_config_dir(config_dir=CONFIGS, version_base=None):
            c = compose(config_name="config", overrides=[f"experiment={preset}", *overrides])
        return (RunnerSettings.model_validate(OmegaConf.to_container(c.runner, resolve=True)),
                LLMSettings.model_validate(OmegaConf.to_container(c.llm, resolve=True)))

    runner, llm = sections()
    assert (runner.schedule, runner.batch_size, llm.max_concurrency) == ("batch", width, width)
    runner, _ = sections("runner.schedule=async", f"runner.max_in_flight={width}")
    assert (runner.schedule, runner.max_in_flight) == ("async", width)
