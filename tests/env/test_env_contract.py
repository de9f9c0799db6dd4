"""The env contract (memrl/env/base.py), the same for every benchmark: each env is composed from its
config group and validated as a run does it, built from its settings whole, lists its tasks,
has its oracle solve one on real data (or the test fixture) and is closed. An env whose
system prerequisite is missing here skips with the reason."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from memrl.config.validate import validate
from memrl.control.wiring import eval_settings
from memrl.core.records import OUTCOMES, EpisodeResult, RetrievedMemory
from memrl.env.base import Env, EnvSettings
from memrl.llm.base import LLMRequest, content_text
from data_paths import ALFWORLD, LIFELONG, LIFELONG_DB, LIFELONG_OS

ROOT = Path(__file__).resolve().parents[2]


def fair_judge(request: LLMRequest) -> str:
    """A scripted judge: correct when the response's last lines hold the reference answer."""
    case = content_text(request.messages[-1][1]).rsplit("Question:\n", 1)[1]
    response, reference = case.split("\n\nResponse:\n", 1)[1].split("\n\nReference answer:\n", 1)
    reference = reference.rsplit("\n\nVerdict:", 1)[0].strip()
    return json.dumps({"extracted_final_answer": reference, "reasoning": "scripted",
                       "correct": reference in response})


def _alfworld() -> str | None:
    if importlib.util.find_spec("alfworld") is None:
        return "the alfworld extra is not installed"
    return None if (ALFWORLD).is_dir() else f"ALFWorld data not at {ALFWORLD}"


def _bigcodebench() -> str | None:
    from memrl_envs.sandbox import bwrap_available

    if importlib.util.find_spec("bigcodebench") is None:
        return "bigcodebench (the checker) is not installed"
    return bwrap_available()


def _lifelong_os() -> str | None:
    from memrl_envs.lifelong_os.rootfs import is_built, rootfs_path
    from memrl_envs.lifelong_os.shell import overlay_available

    why = overlay_available()
    if why is None and not is_built(rootfs_path()):
        why = f"no root file system at {rootfs_path()} (make rootfs)"
    return why or (None if (LIFELONG).is_dir() else f"Lifelong data not at {LIFELONG}")


def _lifelong_db() -> str | None:
    from memrl_envs.lifelong_db.server import find_binary

    if find_binary("mariadbd", "mysqld") is None:
        return "no MariaDB server binary (apt-get install -y mariadb-server)"
    return None if (LIFELONG).is_dir() else f"Lifelong data not at {LIFELONG}"


# env: (oracle agent, a task the oracle solves, overrides, an eval split, what it needs here)
CASES = {
    "alfworld": ("expert", "look_at_obj_in_light-AlarmClock-None-DeskLamp-323/trial_T20190909_044715_250790",
                 [f"env.data_root={ALFWORLD}", "env.split=valid_seen"], "valid_train", _alfworld),
    "bigcodebench": ("canonical", "Tiny/1",
                     [f"env.data_path={ROOT / 'tests' / 'fixtures' / 'bigcodebench' / 'tiny.jsonl'}",
                      "env.part=all", "env.time_limit_s=20"], "validation", _bigcodebench),
    "hle": ("gold", None,
            [f"env.data_path={ROOT / 'tests' / 'fixtures' / 'hle' / 'hle_fixture.jsonl'}",
             "env.judge.backend=scripted", "+env.judge.script=test_env_contract:fair_judge",
             "env.judge.cache=false", "env.modality=text"], "valid", lambda: None),
    "lifelong_os": ("gold", "os-164", [f"env.data_path={LIFELONG_OS}"],
                    "validation", _lifelong_os),
    "lifelong_db": ("gold", "db-2", [f"env.data_path={LIFELONG_DB}"],
                    "validation", _lifelong_db),
}


def composed(*overrides: str):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        return compose("config", overrides=list(overrides))


ENV_CONFIGS = sorted(p.stem for p in (ROOT / "configs" / "env").glob("*.yaml"))


def test_every_case_is_an_env_config() -> None:
    assert ENV_CONFIGS and set(CASES) <= set(ENV_CONFIGS), sorted(set(CASES) - set(ENV_CONFIGS))


@pytest.mark.parametrize("name", ENV_CONFIGS)  # every env config group option: a new benchmark is tested here
def test_every_env_keeps_the_contract(name: str, tmp_path) -> None:
    assert name in CASES, (f"configs/env/{name}.yaml has no contract case: add its oracle, a task the oracle "
                           "solves, its overrides and an eval split to CASES")
    oracle, task_id, overrides, eval_split, needs = CASES[name]
    why = needs()
    if why:
        pytest.skip(f"{name}: {why}")
    extra = [f"paths.cache_dir={tmp_path / 'cache'}"]
    extra += [f"env.task_ids=[{task_id}]"] if task_id else ["env.max_tasks=2"]
    if name == "lifelong_db":
        extra.append(f"env.server_dir={tmp_path / 'mariadb'}")
    v = validate(composed(f"env={name}", f"agent={oracle}", "memory=none", "runner.mode=transfer",
                          f"runner.eval_split={eval_split}", *overrides, *extra))

    # what the class declares
    cls = v.env_cls
    assert issubclass(cls, Env) and cls.name == name and issubclass(cls.Settings, EnvSettings)
    assert isinstance(v.env, cls.Settings) and cls.Settings.EVAL_SPLIT_FIELD in cls.Settings.model_fields
    assert getattr(eval_settings(v), cls.Settings.EVAL_SPLIT_FIELD) == eval_split
    assert cls.POLICIES["react"].needs_llm and cls.POLICIES["react"].reads_memories
    assert v.policy is cls.POLICIES[oracle] and not v.policy.needs_llm and not v.policy.reads_memories
    assert v.env.retrieval is not None and v.env.retrieval.k2 <= v.env.retrieval.k1

    # built from the settings whole, as the builder does
    env = cls(v.env, agent=v.agent.name)
    try:
        assert env.s is v.env and env.agent == oracle
        assert isinstance(env.parallel_episodes, int) and env.parallel_episodes >= 1
        tasks = env.tasks()
        assert tasks and len({t.task_id for t in tasks}) == len(tasks)
        assert all(t.intent.strip() for t in tasks)
        assert [t.task_id for t in env.tasks()] == [t.task_id for t in tasks]  # stable
        if task_id:
            assert [t.task_id for t in tasks] == [task_id]
        memory = RetrievedMemory("m1", "an earlier task", "a hint the oracle never reads", 0.0, 0.9, 0.9)
        result = env.solve(tasks[0], [memory], None, seed=0)
        assert isinstance(result, EpisodeResult)
        assert result.outcome in OUTCOMES and result.outcome_detail
        assert (result.success, result.reward, result.outcome) == (True, 1.0, "success"), \
            (result.outcome_detail, result.errors, result.info)
        assert result.info["agent"] == oracle and result.info["memories_injected"] == 0
        assert result.steps == len(result.transcript) >= 1
        react = cls(v.env, agent="react")
        with pytest.raises(ValueError, match="needs an LLM"):
            react.solve(tasks[0], [], None, seed=0)
        react.close()
    finally:
        env.close()
    env.close()  # closing twice is harmless
    if name == "lifelong_db":
        from memrl_envs.lifelong_db.server import MariaDBServer

        assert not MariaDBServer(tmp_path / "mariadb").is_running()  # the env stopped its server
