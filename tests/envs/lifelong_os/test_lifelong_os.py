"""Lifelong-OS without a real system: task loading, settings, the action parser, the prompt,
and the episode runner's order and bookkeeping against a scripted shell."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from memrl.config.validate import validate
from memrl.core.errors import ConfigError
from memrl.core.records import RetrievedMemory, Step
from memrl.llm.base import LLMError
from memrl_envs.lifelong_os import LifelongOsEnv
from memrl_envs.lifelong_os.episode import ENV_ERROR, FAILED, LLM_ERROR, SUCCESS
from memrl_envs.lifelong_os.prompts import FINISH, INVALID_MARK, build_prompt, format_observation, parse_action
from memrl_envs.lifelong_os.rootfs import RootfsSpec, _debian_uris
from memrl_envs.lifelong_os.settings import LifelongOsSettings
from memrl_envs.lifelong_os.shell import CommandResult, ShellError, ShellLost
from data_paths import LIFELONG_OS

CONFIGS = str(Path(__file__).resolve().parents[3] / "configs")
DATA = LIFELONG_OS


def row(instruction="Create user bob", init="", check="id bob", gold="useradd bob", **extra):
    r = {"instruction": instruction,
         "initialization_command_item": {"command_name": "bash", "script": init},
         "evaluation_info": {"evaluation_command_item": {"command_name": "bash", "script": check},
                             "ground_truth_command_item": {"command_name": "bash", "script": gold}},
         "skill_list": ["useradd"]}
    r.update(extra)
    return r


@pytest.fixture
def data_file(tmp_path):
    rows = {
        "3": row(),
        "10": {**row("Make /srv"), "evaluation_info": str(row()["evaluation_info"]),  # a Python literal
               "initialization_command_item": "{'command_name': 'bash', 'script': 'mkdir -p /x'}"},
        "4": {"instruction": "no scripts"},
        "5": row(check="   "),
        "6": {**row(), "evaluation_info": {"evaluation_command_item": {"command_name": "python", "script": "1"},
                                           "ground_truth_command_item": {"command_name": "bash", "script": "x"}}},
        "7": {**row(), "evaluation_info": "{'not valid python"},
    }
    path = tmp_path / "os.json"
    path.write_text(json.dumps(rows))
    return path


class FakeShell:
    """Answers commands from a table (first matching substring), recording every script."""

    def __init__(self, answers=None, fail_on=None):
        self.ran: list[str] = []
        self.answers = answers or {}
        self.fail_on = fail_on
        self.closed = False

    def run(self, script, timeout_s):
        self.ran.append(script)
        if self.fail_on and self.fail_on in script:
            raise ShellError("the shell is gone")
        for key, res in self.answers.items():
            if key in script:
                return res
        return CommandResult(exit_code=0, output="")

    def close(self):
        self.closed = True


class FakeLLM:
    def __init__(self, replies):
        self.replies = list(replies)
        self.prompts: list[str] = []

    def complete(self, prompt, *, purpose, max_tokens=None, stop=(), temperature=None, **_):
        self.prompts.append(prompt)
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


def os_env(data_file, *, agent="react", shell_factory=None, **fields):
    return LifelongOsEnv(LifelongOsSettings(data_path=str(data_file), **fields), agent=agent,
                         shell_factory=shell_factory)


def make_env(data_file, shell, agent="react", **fields):
    return os_env(data_file, agent=agent, shell_factory=lambda _root: shell, **fields)


@pytest.fixture(autouse=True)
def no_rootfs_needed(monkeypatch):
    monkeypatch.setattr(LifelongOsEnv, "rootfs", lambda self: Path("/nonexistent-rootfs"))


# -- data ---------------------------------------------------------------------------------
def test_loader_keeps_good_rows_parses_literals_and_reports_the_rest(data_file):
    env = make_env(data_file, FakeShell())
    tasks = env.tasks()
    assert [t.task_id for t in tasks] == ["os-3", "os-10"]  # numeric order of sample indices
    assert tasks[0].intent == "Create user bob"
    assert env.task("os-10").init_script == "mkdir -p /x" and env.task("os-10").eval_script == "id bob"
    reasons = {s.key: s.reason for s in env.skipped}
    assert set(reasons) == {"4", "5", "6", "7"}
    assert "evaluation_info" in reasons["4"] and "empty" in reasons["5"]
    assert "only bash" in reasons["6"] and "not a Python literal" in reasons["7"]
    assert env.data_skipped() == [{"item": f"sample {s.key}", "reason": s.reason} for s in env.skipped]
    with pytest.raises(ValueError, match="unknown Lifelong-OS task"):
        env.task("os-99")


def test_task_ids_and_max_tasks_select(data_file):
    assert [t.task_id for t in make_env(data_file, FakeShell(), task_ids=["os-10"]).tasks()] == ["os-10"]
    assert len(make_env(data_file, FakeShell(), max_tasks=1).tasks()) == 1
    with pytest.raises(ValueError, match="unknown task ids"):
        make_env(data_file, FakeShell(), task_ids=["os-4"]).tasks()


def test_unknown_agent_is_a_clear_error(data_file):
    with pytest.raises(ValueError, match=r"env 'lifelong_os' has no agent 'expert' \(its agents: gold, react\)"):
        os_env(data_file, agent="expert")
    with pytest.raises(ConfigError, match=r"agent: env 'lifelong_os' has no agent 'canonical'"):
        validate(cfg("env=lifelong_os", f"env.data_path={data_file}", "agent=canonical"))


@pytest.mark.skipif(not DATA.is_file(), reason=f"Lifelong data not at {DATA}")
def test_the_shared_train_file_loads_whole():
    env = os_env(DATA, agent="gold")
    assert len(env.tasks()) == 350 and env.skipped == []


# -- settings -----------------------------------------------------------------------------
def cfg(*overrides):
    with initialize_config_dir(config_dir=CONFIGS, version_base=None):
        return compose(config_name="config", overrides=list(overrides))


def test_config_group_and_paper_preset_validate(data_file):
    v = validate(cfg("env=lifelong_os", f"env.data_path={data_file}", "agent=gold"))
    assert v.env.max_steps == 15 and v.env.command_timeout_s == 20 and v.agent.name == "gold"
    p = validate(cfg("experiment=llb_os_paper", f"env.data_path={data_file}"))
    assert (p.memory.delta, p.memory.k1, p.memory.k2, p.runner.epochs) == (0.5, 10, 5, 10)
    assert p.llm.model.endswith("gpt-4o-mini") and p.env.name == "lifelong_os"


@pytest.mark.parametrize("override,key", [
    ("env.data_path=/nowhere/os.json", "env.data_path"),
    ("env.workdir=relative", "env.workdir"),
    ("env.command_timeout_s=0", "env.command_timeout_s"),
    ("+env.colour=red", "env.colour"),
])
def test_bad_settings_name_the_key(data_file, override, key):
    overrides = ["env=lifelong_os", f"env.data_path={data_file}", override]
    with pytest.raises(ConfigError) as info:
        validate(cfg(*overrides))
    assert key in str(info.value)


# -- the protocol -------------------------------------------------------------------------
@pytest.mark.parametrize("reply,kind,text", [
    ("Action: bash\n```bash\nuseradd -m bob\n```", "bash", "useradd -m bob"),
    (" bash\n```bash\nmkdir /a\nchmod 700 /a\n```\n", "bash", "mkdir /a\nchmod 700 /a"),  # continues "Action:"
    ("Think: check first.\nAct: bash\n```bash\nid bob\n```", "bash", "id bob"),
    ("```sh\n$ ls -la /tmp\n```", "bash", "ls -la /tmp"),
    (" ls /home", "bash", "ls /home"),
    ("Action: bash: cat /etc/group", "bash", "cat /etc/group"),
    ("Action: bash\n```bash\n#!/bin/bash\necho hi\n```", "bash", "#!/bin/bash\necho hi"),
    ("Action: finish", FINISH, ""),
    (" finish\n", FINISH, ""),
    ("Done.", FINISH, ""),
    ("", "invalid", "the reply was empty"),
    ("   \n ", "invalid", "the reply was empty"),
    ("Action: dance", "invalid", "unknown action 'dance' (use bash or finish)"),
    (" bash", "invalid", '"Action: bash" without a command'),
])
def test_parse_action(reply, kind, text):
    action = parse_action(reply)
    assert (action.kind, action.text) == (kind, text)


def test_observation_formatting():
    assert format_observation("", 0, False, False, 20, 100) == "(no output)"
    assert format_observation("oops\n", 2, False, False, 20, 100) == "oops\n[exit code 2]"
    assert format_observation("x" * 500, 0, False, False, 20, 100) == "x" * 100 + "\n[output truncated]"
    timed = format_observation("partial", None, True, False, 20, 100)
    assert timed.startswith("partial") and "longer than 20 seconds" in timed


def test_prompt_holds_memories_history_and_ends_with_the_cue():
    mem = RetrievedMemory("m1", "Create group dev", "> groupadd dev\n(no output)", 0.4, 0.9, 0.9, True)
    history = [Step("id bob", "no such user\n[exit code 1]"), Step(INVALID_MARK + "Action: hmm", "Error: x")]
    prompt = build_prompt("Create user bob", [mem], history, timeout_s=7)
    assert prompt.endswith("\nAction:")
    assert "longer than 7 seconds" in prompt and "earlier task: Create group dev" in prompt
    tail = prompt[prompt.index("Now your task."):]
    assert "Task: Create user bob\nAction: bash\n```bash\nid bob\n```\nOutput: no such user" in tail
    assert "Action: hmm\nOutput: Error: x" in tail
    assert "Past experiences" not in build_prompt("t", [], [])


# -- the episode --------------------------------------------------------------------------
def test_gold_runs_init_then_ground_truth_then_check_in_one_system(data_file):
    shell = FakeShell({"id bob": CommandResult(0, "uid=1000(bob)")})
    env = make_env(data_file, shell, agent="gold")
    res = env.solve(env.tasks()[1], [], None, seed=0)  # os-10: has an init script
    assert shell.ran == ["mkdir -p /x", "useradd bob", "id bob"] and shell.closed
    assert res.success and res.reward == 1.0 and res.outcome_detail == SUCCESS and res.outcome == "success"
    assert [s.action for s in res.transcript] == ["useradd bob", FINISH] and res.info["finished"]


def test_failed_check_is_a_failure_and_failed_init_an_env_error(data_file):
    shell = FakeShell({"id bob": CommandResult(1, "no such user")})
    env = make_env(data_file, shell, agent="gold")
    res = env.solve(env.tasks()[0], [], None, seed=0)
    assert not res.success and (res.outcome, res.outcome_detail) == ("failure", FAILED)
    assert res.info["eval_exit"] == 1

    shell = FakeShell({"mkdir -p /x": CommandResult(1, "read-only")})
    env = make_env(data_file, shell, agent="gold")
    res = env.solve(env.tasks()[1], [], None, seed=0)
    assert res.outcome == res.outcome_detail == ENV_ERROR and shell.ran == ["mkdir -p /x"] and shell.closed
    assert "initialisation script failed" in res.errors[0]


def test_react_turns_invalid_reply_is_fed_back_and_the_episode_goes_on(data_file):
    shell = FakeShell({"useradd": CommandResult(0, ""), "id bob": CommandResult(0, "uid=1000(bob)")})
    llm = FakeLLM(["", "Action: bash\n```bash\nuseradd -m bob\n```", "Action: finish"])
    env = make_env(data_file, shell)
    mem = RetrievedMemory("m1", "Create user al", "> useradd al", 0.0, 0.9, 0.9, True)
    res = env.solve(env.tasks()[0], [mem], llm, seed=0)
    assert res.success and res.steps == 3 and res.info["invalid_actions"] == 1
    assert res.transcript[0].action.startswith(INVALID_MARK) and "no action found" in res.transcript[0].observation
    assert shell.ran == ["useradd -m bob", "id bob"]
    assert "earlier task: Create user al" in llm.prompts[0] and "no action found" in llm.prompts[1]
    assert res.info["memories_injected"] == 1


def test_max_steps_caps_the_turns_and_the_check_still_runs(data_file):
    shell = FakeShell({"id bob": CommandResult(1, "")})
    env = make_env(data_file, shell, max_steps=2)
    res = env.solve(env.tasks()[0], [], FakeLLM(["ls /", "ls /tmp", "ls /home"]), seed=0)
    assert res.steps == 2 and shell.ran == ["ls /", "ls /tmp", "id bob"]
    assert res.info["truncated"] and not res.success


def test_model_failure_is_recorded_and_the_check_still_runs(data_file):
    shell = FakeShell({"id bob": CommandResult(1, "")})
    env = make_env(data_file, shell)
    res = env.solve(env.tasks()[0], [], FakeLLM(["ls /", LLMError("rate limited")]), seed=0)
    assert res.outcome == res.outcome_detail == LLM_ERROR and "LLMError at step 2" in res.errors[0]
    assert shell.ran == ["ls /", "id bob"] and shell.closed and not res.success
    # the verdict is the system's: work done before the failure still counts
    shell = FakeShell({"id bob": CommandResult(0, "")})
    res = make_env(data_file, shell).solve(env.tasks()[0], [], FakeLLM(["useradd bob", LLMError("x")]), seed=0)
    assert res.success and res.outcome_detail == SUCCESS and res.errors


def test_a_broken_system_is_an_env_error_not_a_crash(data_file):
    shell = FakeShell(fail_on="useradd")
    env = make_env(data_file, shell, agent="gold")
    res = env.solve(env.tasks()[0], [], None, seed=0)
    assert res.outcome_detail == ENV_ERROR and "ShellError" in res.errors[0] and shell.closed

    def no_system(_root):
        raise ShellError("the episode sandbox did not start")

    env = os_env(data_file, agent="gold", shell_factory=no_system)
    res = env.solve(env.tasks()[0], [], None, seed=0)
    assert res.outcome == res.outcome_detail == ENV_ERROR and res.steps == 0 and "did not start" in res.errors[0]


@pytest.mark.parametrize("frozen, detail", [(False, "sandbox_killed"), (True, "sandbox_frozen")])
def test_a_shell_lost_during_the_check_after_the_agents_commands_is_the_tasks_failure(data_file, frozen, detail):
    """Something the agent left behind (`(sleep 5; kill -9 -1) &`) takes the shell down while
    the task's check runs: the agent's failure, no error, nothing against max_error_rate."""
    from memrl.control.guards import counts_against_error_rate, error_rate_problem

    class LostAtCheck(FakeShell):
        def run(self, script, timeout_s):
            if script == "id bob":
                self.ran.append(script)
                raise ShellLost("the shell is gone" if not frozen else "the shell did not answer", frozen=frozen)
            return super().run(script, timeout_s)

    env = make_env(data_file, LostAtCheck())
    res = env.solve(env.tasks()[0], [], FakeLLM(["(sleep 5; kill -9 -1) &", "Action: finish"]), seed=0)
    assert (res.outcome, res.outcome_detail) == ("failure", detail) and not res.success
    assert res.errors == [] and res.info["eval_output"].startswith("the task's check could not run")
    records = [{"errors": res.errors, "info": res.info}] * 4
    assert not counts_against_error_rate(records[0])
    assert error_rate_problem(records, epoch=1, batch=1, errored_before=0, epoch_size=4, max_rate=0.0) is None
    # the agent ran no command: the system broke on its own, the environment's error
    res = make_env(data_file, LostAtCheck()).solve(env.tasks()[0], [], FakeLLM(["Action: finish"]), seed=0)
    assert res.outcome_detail == ENV_ERROR and "ShellError" in res.errors[0]


def test_command_timeout_reaches_the_shell(data_file):
    seen = []

    class Spy(FakeShell):
        def run(self, script, timeout_s):
            seen.append(timeout_s)
            return super().run(script, timeout_s)

    env = make_env(data_file, Spy(), agent="gold", command_timeout_s=3.5)
    env.solve(env.tasks()[0], [], None, seed=0)
    assert seen == [3.5, 3.5]


# -- the root file system recipe ----------------------------------------------------------
def test_rootfs_name_follows_the_recipe_and_mirror_parsing():
    a, b = RootfsSpec(), RootfsSpec(packages=RootfsSpec().packages + ("python3",))
    assert a.name != b.name and a.name.startswith("debian-bookworm-minbase-")
    deb822 = "Types: deb\n# comment\nURIs: http://mirror.example/debian\nSuites: bookworm\n"
    assert _debian_uris(deb822) == ["http://mirror.example/debian"]
    assert _debian_uris("deb [arch=amd64] http://x.example/debian bookworm main\n") == ["http://x.example/debian"]
