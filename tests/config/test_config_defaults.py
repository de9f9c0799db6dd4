"""One owner for each default (docs/design.md §10): the schema holds it, the YAML of configs/
states only `_target_`, names, interpolations and what differs; the run card records the full
config all the same, a card written before still resumes, and a bad key in any section is
refused before the run directory holds a file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.utils import get_class
from pydantic import BaseModel, ValidationError

from memrl.config.frame import SECTIONS
from memrl.config.sections import SECTION_SCHEMAS
from memrl.config.frame import CONFIG_DIR
from memrl.config.validate import full_config, validate, with_defaults
from memrl.core.errors import ConfigError
from memrl.core.fields import _submodel
from memrl.core.rundir import RunDir
from memrl.journal.runcard import check_resume, comparable

from golden_run import BASE, RUNS

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "configs"
# the card configs of the golden runs as cards recorded them before the full config (the composed
# YAML only: no llm.temperature, no logger.wandb, ...), kept from tests/golden_run.py's first file
OLD_CARDS = REPO / "tests" / "fixtures" / "cards_before_full_config.json"
# the golden runs' commands (tests/golden_run.py), composed here: each run's last command
TINY = BASE
GOLDEN_RUNS = {name: commands[-1] for name, commands in RUNS.items() if name != "memrl_resumed"}
# group options: each a section's YAML (presets, which pin a paper's or the official code's
# values, and the Hydra launchers are not)
GROUPS = ("env", "memory", "llm", "embedder", "agent", "runner", "logger")


def _cli(args: list[str], tmp: Path) -> subprocess.CompletedProcess:
    """`python -m memrl.cli run ARGS` with its own cache (the golden runs' environment)."""
    env = {**os.environ, "MEMRL_CACHE_DIR": str(tmp / "cache"), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "memrl.cli", "run", *args], cwd=tmp, env=env,
                          capture_output=True, text=True, timeout=300)


def composed(*overrides: str, hydra: bool = False):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose("config", overrides=list(overrides), return_hydra_config=hydra)


# ------------------------------------------------------------------------- one owner
def _schema(group: str, data: dict[str, Any], path: Path) -> type[BaseModel]:
    if group in SECTION_SCHEMAS:
        return SECTION_SCHEMAS[group]
    target = data.get("_target_")
    if target is None:  # a variant: its parent option's (`defaults: [memrl, _self_]`)
        parent = next(d for d in data["defaults"] if d != "_self_")
        return _schema(group, yaml.safe_load((path.parent / f"{parent}.yaml").read_text()), path)
    return get_class(target).Settings


def _repeated_defaults(schema: type[BaseModel], data: dict[str, Any], prefix: str) -> list[str]:
    out = []
    for key, value in data.items():
        if key in ("_target_", "defaults", "name"):
            continue
        field = schema.model_fields.get(key)
        assert field is not None, f"{prefix}{key}: no such key in {schema.__name__}"
        sub = _submodel(field.annotation)
        if sub is not None and isinstance(value, dict):
            out += _repeated_defaults(sub, value, f"{prefix}{key}.")
        elif not (isinstance(value, str) and "${" in value) and not field.is_required():
            default = field.get_default(call_default_factory=True)
            if value == (default.model_dump() if isinstance(default, BaseModel) else default):
                out.append(f"{prefix}{key}: {value!r}")
    return out


def test_no_group_option_repeats_a_schema_default():
    repeated = []
    for group in GROUPS:
        for path in sorted((CONFIG_DIR / group).glob("*.yaml")):
            data = yaml.safe_load(path.read_text()) or {}
            schema = _schema(group, data, path)
            repeated += [f"{group}/{path.name} {r}" for r in _repeated_defaults(schema, data, "")]
    data = yaml.safe_load((CONFIG_DIR / "config.yaml").read_text())
    for section in set(SECTIONS) & set(data):
        repeated += [f"config.yaml {r}" for r in _repeated_defaults(SECTION_SCHEMAS[section], data[section],
                                                                    f"{section}.")]
    assert not repeated, "values the schema holds already (leave them to it):\n" + "\n".join(repeated)


@pytest.mark.parametrize("schema,fields", [
    ("memrl.memory.memrl.MemRLSettings", {"delta", "k1", "k2"}),
    ("memrl_baselines.rag.RAGSettings", {"k"}),
    ("memrl_baselines.self_rag.SelfRAGSettings", {"k"}),
    ("memrl_baselines.memp.MemPSettings", {"k"}),
    ("memrl_baselines.mem0.Mem0Settings", {"k"}),
])
def test_a_benchmarks_retrieval_settings_have_no_default_but_env_retrieval(schema, fields):
    """δ, k1, k2 and the baselines' top-k are the benchmark's: no schema holds ALFWorld's."""
    with pytest.raises(ValidationError) as info:
        get_class(schema)()
    assert {e["loc"][0] for e in info.value.errors() if e["type"] == "missing"} == fields


def test_an_override_of_a_key_no_yaml_names_works_and_names_the_directory_as_before(monkeypatch):
    monkeypatch.setenv("ALFWORLD_DATA", "/nonexistent")
    cfg = composed("runner.batch_size=4", "memory.alpha=0.1", "memory.bank.ef_search=64",
                   "llm.temperature=0.5", "runner.epochs=3", hydra=True)
    assert str(cfg.hydra.job.override_dirname) == \
        "llm.temperature=0.5,memory.alpha=0.1,memory.bank.ef_search=64,runner.batch_size=4"
    assert (cfg.runner.batch_size, cfg.memory.alpha, cfg.memory.bank.ef_search) == (4, 0.1, 64)
    # the root stays closed: a top-level key needs `+`, and the validation refuses it then
    with pytest.raises(Exception, match="Could not override 'runer.epochs'"):
        composed("runer.epochs=2")


# ------------------------------------------------------------------------- the full config
def _golden_command(name: str, cache: Path):
    cfg = composed(*TINY, *GOLDEN_RUNS[name])
    cfg.paths.cache_dir = str(cache)
    return cfg


@pytest.mark.parametrize("name", sorted(GOLDEN_RUNS))
def test_the_full_config_holds_every_value_a_card_from_before_held(name, tmp_path):
    """The golden file's card configs were written before the YAML left defaults out: each
    value they hold is in the full config of the same command, and with its schema's
    defaults filled in such a card reads as the full config."""
    old = json.loads(OLD_CARDS.read_text().replace("<tmp>", str(tmp_path)))[name]
    full = full_config(_golden_command(name, tmp_path / "cache"))

    def held(a: Any, b: Any, key: str = "") -> list[str]:
        if isinstance(a, dict):
            return [d for k, v in a.items() for d in held(v, (b or {}).get(k, "<missing>"), f"{key}.{k}")]
        return [] if a == b else [f"{key}: {a!r} then, {b!r} now"]

    assert held(old, full) == []
    assert with_defaults(old) == full
    assert full["memory"]["_target_"] == old["memory"]["_target_"]  # `_target_` kept
    assert full["llm"]["temperature"] == 0.0 and full["logger"]["wandb"]["mode"] == "offline"


def test_an_old_card_resumes_and_a_changed_value_is_still_refused(tmp_path):
    old = json.loads(OLD_CARDS.read_text().replace("<tmp>", str(tmp_path)))["memrl_batch"]
    card = RunDir(tmp_path).card
    card.write_text(json.dumps({"config": old}))
    assert "temperature" not in old["llm"] and "wandb" not in old["logger"]
    assert check_resume(card, full_config(_golden_command("memrl_batch", tmp_path / "cache"))) is not None
    assert comparable(old) == comparable(full_config(_golden_command("memrl_batch", tmp_path / "cache")))
    # a key the old card lacks held its default then: another value now is another run
    changed = _golden_command("memrl_batch", tmp_path / "cache")
    changed.llm.temperature = 0.5
    with pytest.raises(ConfigError, match=r"llm\.temperature: 0\.0 -> 0\.5"):
        check_resume(card, full_config(changed))


def test_a_run_whose_card_was_written_before_continues(tmp_path):
    """`memrl run` on a directory whose card holds the config as it was recorded before (the
    composed YAML: no llm.temperature, no logger.wandb, ...): the same command continues it."""
    run_dir = tmp_path / "run"
    args = [*TINY, *GOLDEN_RUNS["rag"], "runner.epochs=1", f"hydra.run.dir={run_dir}"]
    first = _cli(args, tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    card = json.loads(RunDir(run_dir).card.read_text())
    old = json.loads(OLD_CARDS.read_text().replace("<tmp>", str(tmp_path)))["rag"]
    old["runner"]["epochs"] = 1
    assert with_defaults(old) == card["config"]  # the same run, recorded the old way
    card["config"] = old
    RunDir(run_dir).card.write_text(json.dumps(card))
    second = _cli([*args[:-2], "runner.epochs=2", args[-1]], tmp_path)
    assert second.returncode == 0, second.stderr[-2000:]
    card = json.loads(RunDir(run_dir).card.read_text())
    assert card["status"] == "finished" and len(card["sessions"]) == 2
    # and a value the old card held by default is still a result key
    third = _cli([*args[:-2], "runner.epochs=2", "llm.temperature=0.5", args[-1]], tmp_path)
    assert third.returncode == 2 and "llm.temperature: 0.0 -> 0.5" in third.stderr


def test_with_defaults_leaves_what_it_cannot_read_alone():
    config = {"memory": {"_target_": "gone.Memory", "x": 1}, "seed": 3}
    out = with_defaults(config)
    assert out["memory"] == {"_target_": "gone.Memory", "x": 1} and out["seed"] == 3
    assert out["runner"]["epochs"] == 10 and out["metrics"] == {"forgetting_zero_fail": "zero"}
    # a moved class is read by its path now; a required key stays absent
    rag = with_defaults({"memory": {"_target_": "memrl_baselines.rag.RAGMemory", "name": "rag"}})["memory"]
    assert rag["max_trajectory_chars"] == 3000 and rag["bank"]["ef_search"] == 256 and "k" not in rag


def test_unknown_top_level_keys_are_refused(monkeypatch):
    monkeypatch.setenv("ALFWORLD_DATA", "/nonexistent")
    with pytest.raises(ConfigError) as info:
        validate(composed("+foo=1", "+runer.epochs=2"))
    assert "foo: not a key of the config" in str(info.value)
    assert "runer: not a key of the config" in str(info.value) and "did you mean runner?" in str(info.value)


# ------------------------------------------------------------------------- a bad key, any section
BAD = {  # section: (overrides, the key the message names)
    "env": (["+env.bogus=1"], "env.bogus"),
    "memory": (["memory.lam=1.5"], "memory.lam"),
    "memory (no +)": (["memory.lamda=0.5"], "memory.lamda"),
    "llm": (["llm.temperature=9"], "llm.temperature"),
    "embedder": (["embedder.dim=1"], "embedder.dim"),
    "agent": (["+agent.bogus=1"], "agent.bogus"),
    "runner": (["runner.batch_size=0"], "runner.batch_size"),
    "logger": (["logger=wandb", "logger.wandb.mode=bogus"], "logger.wandb.mode"),
    "paths": (["+paths.bogus=1"], "paths.bogus"),
    "metrics": (["metrics.forgetting_zero_fail=nan"], "metrics.forgetting_zero_fail"),
    "seed": (["seed=-1"], "seed"),
    "top level": (["+foo=1"], "foo"),
    "top level (typo)": (["+runer.epochs=2"], "runer"),
}


@pytest.mark.parametrize("section", list(BAD))
def test_a_bad_key_in_any_section_stops_the_run_before_it_writes_a_file(section, tmp_path):
    overrides, key = BAD[section]
    run_dir = tmp_path / "run"
    out = _cli([*TINY, "memory=memrl", *overrides, f"hydra.run.dir={run_dir}"], tmp_path)
    assert out.returncode == 2, out.stderr[-2000:]
    message = out.stderr[out.stderr.find("memrl: "):]
    assert out.stderr.find("memrl: ") >= 0 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert f"{key}:" in message, message
    files = [p for p in run_dir.rglob("*") if p.is_file()] if run_dir.exists() else []
    assert files == [], files
