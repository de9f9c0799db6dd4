"""Which config keys change results: marked once on the schemas (memrl/config/keys.py), and the
three places that use the marks -- the resume check, the report's grouping and the run
directory's name -- agree with them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from pydantic import BaseModel

from memrl.config import keys as K
from memrl.config.sections import LLMSettings
from memrl.core import fields as F
from memrl.core.errors import ConfigError
from memrl.core.rundir import RunDir
from memrl.journal.runcard import check_resume, comparable
from memrl.report.grouping import swept_keys

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"


def test_no_key_is_marked_two_ways():
    assert K.conflicts() == []
    assert K.unimportable() == []  # every env and memory class of configs/ was read


def test_a_config_is_read_with_its_own_classes_marks():
    db = {"env": {"_target_": "memrl_envs.lifelong_db.LifelongDbEnv"}}
    alf = {"env": {"_target_": "memrl_envs.alfworld.AlfworldEnv"}}
    assert "env.port" in K.resume_exempt(db) and "env.port" not in K.resume_exempt(alf)
    assert K.resume_exempt(db) <= K.resume_exempt() and "llm.timeout" in K.resume_exempt(alf)
    # a class unknown here: every class of its group lends its marks
    assert K.resume_exempt({"env": {"_target_": "gone.Env"}}) == K.resume_exempt()


def test_the_yaml_exclude_list_is_the_derived_one():
    cfg = yaml.safe_load((CONFIGS / "config.yaml").read_text())
    listed = cfg["hydra"]["job"]["config"]["override_dirname"]["exclude_keys"]
    assert listed == K.hydra_exclude_keys(), (
        "configs/config.yaml's exclude_keys differ from the schema marks: paste the output of "
        "`memrl keys --hydra` (python -m memrl.cli keys --hydra) into it")


def test_each_list_follows_the_table_of_marks():
    marks = K.marks()
    path = set(K.path_keys())
    assert path == {"env.name", "memory.name", "llm.name"}
    for key, mark in marks.items():
        assert (key in K.resume_exempt()) == (mark != F.RESULT), key
        assert (key in K.report_ignored()) == (mark in (F.NO_EFFECT, F.DATA_LOCATION)), key
        assert (key in K.hydra_exclude_keys()) == (mark in (F.NO_EFFECT, F.EXTENT) or key in path), key


def test_the_disagreements_of_the_old_lists_are_settled():
    # was exempt from resume but named the directory: a new value started a new run
    assert "llm.max_concurrency" in K.resume_exempt() and "llm.max_concurrency" in K.hydra_exclude_keys()
    # blocked a resume while the report ignored it
    assert "llm.n_threads" in K.resume_exempt() and "llm.n_threads" in K.report_ignored()
    # a nested judge section inherits the LLM section's marks, including a re-declared field
    for f in ("timeout", "max_concurrency", "cache_path", "n_threads"):
        assert K.marks()[f"env.judge.{f}"] == K.marks()[f"llm.{f}"] == F.NO_EFFECT
    assert K.marks()["runner.epochs"] == F.EXTENT and "runner.epochs" not in K.report_ignored()
    assert K.marks()["logger"] == F.NO_EFFECT and K.marks()["paths"] == F.NO_EFFECT


def _schemas() -> list[type[BaseModel]]:
    out: list[type[BaseModel]] = []
    todo = [s for group in K.section_schemas().values() for s in group]
    while todo:
        s = todo.pop()
        if s in out:
            continue
        out.append(s)
        todo += [sub for f in s.model_fields.values() if (sub := F._submodel(f.annotation))]
    return out


def test_a_field_redeclared_by_a_subclass_keeps_its_mark():
    checked = 0
    for schema in _schemas():
        for base in schema.__mro__[1:]:
            if not (isinstance(base, type) and issubclass(base, BaseModel)) or base is BaseModel:
                continue
            for name, field in schema.model_fields.items():
                if name in base.model_fields:
                    checked += 1
                    assert F.mark_of(field) == F.mark_of(base.model_fields[name]), \
                        f"{schema.__name__}.{name} is marked unlike {base.__name__}.{name}"
    assert checked > 20  # the judge re-declares LLM fields; the Lifelong envs share a base


def test_schema_marks_of_a_nested_schema():
    class Inner(BaseModel):
        a: int = 1
        b: int = F.no_effect(2)

    class Outer(BaseModel):
        inner: Inner = Inner()
        quiet: Inner = F.no_effect(Inner())
        n: int = F.extent(3)

    marks = F.schema_marks(Outer, "x.")
    assert marks == {"x.inner.a": F.RESULT, "x.inner.b": F.NO_EFFECT, "x.quiet.a": F.NO_EFFECT,
                     "x.quiet.b": F.NO_EFFECT, "x.quiet": F.NO_EFFECT, "x.n": F.EXTENT}
    with pytest.raises(ValueError, match="no_effect only"):
        class Bad(BaseModel):
            inner: Inner = F.extent(Inner())
        F.schema_marks(Bad)


# ------------------------------------------------------------------------- run directory name
def _dirname(*overrides: str, monkeypatch) -> str:
    monkeypatch.setenv("ALFWORLD_DATA", "/nonexistent")
    with initialize_config_dir(config_dir=str(CONFIGS), version_base=None):
        cfg = compose("config", overrides=list(overrides), return_hydra_config=True)
    return str(cfg.hydra.job.override_dirname)


def test_keys_without_effect_leave_the_directory_name(monkeypatch):
    name = _dirname("memory.lam=0.1", "llm.max_concurrency=4", "llm.n_threads=2", "runner.epochs=3",
                    "runner.progress=false", "llm.reuse_prefix=false",
                    "logger=wandb", "logger.wandb.mode=online",
                    "paths.cache_dir=/tmp/c", "env.cache_dir=/tmp/c", monkeypatch=monkeypatch)
    assert name == "memory.lam=0.1"
    # where the data is read from names the directory: two data files never share one
    assert _dirname("env.data_root=/data/a", monkeypatch=monkeypatch) == "env.data_root=/data/a"


# ------------------------------------------------------------------------- resume check
BASE = {"env": {"_target_": "memrl_envs.alfworld.AlfworldEnv", "name": "alfworld",
                "data_root": "/data/a", "cache_dir": "/c", "split": "valid_seen"},
        "memory": {"_target_": "memrl.memory.memrl.MemRLMemory", "name": "memrl", "lam": 0.5,
                   "bank": {"host": None, "ef_search": 256}},
        "llm": {"name": "local", "max_concurrency": 1, "n_threads": None, "temperature": 0.0},
        "runner": {"epochs": 2, "progress": True, "batch_size": 1},
        "logger": {"name": "none"}, "paths": {"cache_dir": "/c"}, "seed": 0}


def _with(config: dict, key: str, value) -> dict:
    out = json.loads(json.dumps(config))
    node = out
    *path, last = key.split(".")
    for p in path:
        node = node[p]
    node[last] = value
    return out


@pytest.mark.parametrize("key,value", [
    ("llm.max_concurrency", 8), ("llm.n_threads", 4), ("runner.epochs", 5), ("runner.progress", False),
    ("env.data_root", "/moved/data"), ("env.cache_dir", "/elsewhere"), ("paths.cache_dir", "/x"),
    ("logger", {"name": "wandb", "wandb": {"mode": "online"}}), ("memory.bank.host", "chroma.local"),
])
def test_resume_allows_keys_without_effect(tmp_path, key, value):
    card = RunDir(tmp_path).card
    card.write_text(json.dumps({"config": BASE}))
    assert check_resume(card, _with(BASE, key, value)) is not None


@pytest.mark.parametrize("key,value", [
    ("memory.lam", 0.9), ("llm.temperature", 0.7), ("env.split", "valid_unseen"), ("seed", 1),
    ("runner.batch_size", 4), ("memory.bank.ef_search", 64),
])
def test_resume_refuses_keys_that_change_results(tmp_path, key, value):
    card = RunDir(tmp_path).card
    card.write_text(json.dumps({"config": BASE}))
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        check_resume(card, _with(BASE, key, value))


def test_a_retired_field_in_an_older_card_does_not_block_a_resume(tmp_path):
    new = {**BASE, "memory": {"_target_": "memrl_baselines.pass_at_k.PassAtK", "name": "pass_at_k"}}
    old = _with(new, "memory.k", 10)  # what pass_at_k.yaml wrote before k became runner.epochs
    card = RunDir(tmp_path).card
    card.write_text(json.dumps({"config": old}))
    assert check_resume(card, new) is not None
    assert comparable(old) == comparable(new)
    # the same key is a live field of another module: there it still counts
    rag = {**BASE, "memory": {"_target_": "memrl_baselines.rag.RAGMemory", "name": "rag", "k": 3}}
    assert comparable(rag) != comparable(_with(rag, "memory.k", 5))


# ------------------------------------------------------------------------- report
def test_report_groups_by_keys_that_change_results_only():
    configs = [_with(_with(_with(BASE, "llm.n_threads", n), "env.data_root", f"/d{n}"), "memory.lam", lam)
               for n, lam in ((1, 0.5), (2, 0.5), (3, 0.9))]
    assert swept_keys(configs) == ["memory.lam"]
    assert swept_keys([BASE, _with(BASE, "runner.epochs", 5)]) == ["runner.epochs"]
    assert swept_keys([BASE, _with(BASE, "logger", {"name": "wandb"})]) == []


def test_llm_settings_marks_are_read_from_the_schema():
    assert F.mark_of(LLMSettings.model_fields["max_concurrency"]) == F.NO_EFFECT
    assert F.mark_of(LLMSettings.model_fields["temperature"]) == F.RESULT
    assert LLMSettings.model_json_schema()["properties"]["max_concurrency"][F.MARK] is False


def test_a_card_naming_a_moved_class_by_its_old_path_compares_equal() -> None:
    """A run card written before the restructuring names the Lifelong-DB env by the package it
    then lived in: read with the class's path now, it is the same run (its resume check passes),
    and another class is still another run."""
    from memrl.journal.runcard import comparable, config_diff

    now = {"env": {"_target_": "memrl_envs.lifelong_db.LifelongDbEnv", "name": "lifelong_db", "port": 1},
           "seed": 0}
    for old_path in ("memrl_envs.lifelong.LifelongDbEnv", "memrl_envs.lifelong.db_env.LifelongDbEnv"):
        old = {**now, "env": {**now["env"], "_target_": old_path}}
        assert K.current_targets(old)["env"]["_target_"] == "memrl_envs.lifelong_db.LifelongDbEnv"
        assert config_diff(comparable(old), comparable(now)) == []
    other = {**now, "env": {**now["env"], "_target_": "memrl_envs.lifelong_os.LifelongOsEnv"}}
    assert config_diff(comparable(other), comparable(now)) != []
    from hydra.utils import get_class

    assert all(get_class(path).__name__ == path.rsplit(".", 1)[1] for path in K.MOVED_TARGETS.values())
