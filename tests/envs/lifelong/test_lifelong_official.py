"""Lifelong-OS / -DB as the official code runs them (MemTensor/MemRL @ 7c3beba): the task set
(train and validation merged at load time, keys played in string order), the episode as a
chat history for the official memory writer (`EpisodeResult.memory_trajectory`) and the
official display of retrieved memories (`memory_format: official`). No system, no server,
no network: a scripted shell, a stand-in database, and the made-up tasks in
tests/fixtures/lifelong_official (the real validation files are not shipped here)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from pydantic import ValidationError

from memrl.config.validate import validate
from memrl.core.errors import ConfigError
from memrl.core.records import RetrievedMemory
from memrl.journal.runcard import data_fingerprint
from memrl.llm.base import LLMError
from memrl_envs.lifelong import data as lifelong_data
from memrl_envs.lifelong.memory_context import (DB_PREAMBLE_MARKER, OS_PREAMBLE_MARKER, chat_text, format_official,
                                                shown_text, strip_preamble)
from memrl_envs.lifelong_db import LifelongDbEnv
from memrl_envs.lifelong_db import env as db_env
from memrl_envs.lifelong_db import prompts as db_prompts
from memrl_envs.lifelong_db.data import LITERAL_FIELDS as DB_FIELDS
from memrl_envs.lifelong_db.data import DbTask
from memrl_envs.lifelong_db.data import check_row as db_check
from memrl_envs.lifelong_db.databases import ExecResult
from memrl_envs.lifelong_db.prompts import INSTRUCTION as DB_INSTRUCTION
from memrl_envs.lifelong_db.prompts import INVALID_HELP as DB_INVALID_HELP
from memrl_envs.lifelong_db.prompts import Turn
from memrl_envs.lifelong_db.prompts import parse_action as db_parse
from memrl_envs.lifelong_db.settings import LifelongDbSettings
from memrl_envs.lifelong_os import LifelongOsEnv
from memrl_envs.lifelong_os import prompts as os_prompts
from memrl_envs.lifelong_os.prompts import INSTRUCTION as OS_INSTRUCTION
from memrl_envs.lifelong_os.prompts import INVALID_HELP as OS_INVALID_HELP
from memrl_envs.lifelong_os.settings import LifelongOsSettings
from memrl_envs.lifelong_os.shell import CommandResult, ShellError

ROOT = Path(__file__).resolve().parents[3]
FIX = ROOT / "tests" / "fixtures" / "lifelong_official"
OS_TRAIN, OS_VAL = FIX / "os_interaction_train.json", FIX / "os_interaction_val.json"
DB_TRAIN, DB_VAL = FIX / "db_train.json", FIX / "db_val.json"
OS_PREAMBLE = OS_INSTRUCTION.format(timeout=20) + "\n\nNow your task."  # with_example=False


class FakeShell:
    def __init__(self, answers=None):
        self.answers, self.ran = answers or {}, []

    def run(self, script, timeout_s):
        self.ran.append(script)
        return next((r for k, r in self.answers.items() if k in script), CommandResult(0, ""))

    def close(self):
        pass


class FakeLLM:
    def __init__(self, replies):
        self.replies, self.prompts = list(replies), []

    def complete(self, prompt, **_):
        self.prompts.append(prompt)
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


def os_env(agent="gold", shell=None, **fields) -> LifelongOsEnv:
    env = LifelongOsEnv(LifelongOsSettings(**{"data_path": str(OS_TRAIN), **fields}), agent=agent,
                        shell_factory=lambda _root: shell or FakeShell())
    env.rootfs = lambda: Path("/nonexistent-rootfs")  # the stand-in shell needs none
    return env


def db_env_of(tmp_path, agent="gold", **fields) -> LifelongDbEnv:
    return LifelongDbEnv(LifelongDbSettings(**{"data_path": str(DB_TRAIN), "server_dir": str(tmp_path),
                                               **fields}), agent=agent)


def ids(env) -> list[str]:
    return [t.task_id for t in env.tasks()]


def composed(*overrides: str):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        return compose("config", overrides=list(overrides))


# ===================================================================== the official task set
def test_validation_tasks_are_merged_at_load_time_and_counted():
    assert len(json.loads(OS_TRAIN.read_text())) == 4 and len(json.loads(OS_VAL.read_text())) == 4
    assert ids(os_env()) == ["os-1", "os-2", "os-10", "os-100"]  # default: the train file only
    merged = os_env(val_path="auto")
    assert ids(merged) == ["os-0", "os-1", "os-2", "os-3", "os-10", "os-11", "os-21", "os-100"]
    assert ids(os_env(val_path=str(OS_VAL))) == ids(merged)  # named explicitly: the same set
    db = db_env_of(FIX, val_path="auto")
    assert ids(db) == ["db-0", "db-1", "db-2", "db-10", "db-20", "db-101"]
    # each task knows its file
    assert merged.task_files == {k: str(OS_VAL if k in ("0", "3", "11", "21") else OS_TRAIN)
                                 for k in ("0", "1", "2", "3", "10", "11", "21", "100")}
    assert os_env().task_files is None


def test_merge_is_train_then_validation_and_a_shared_key_is_an_error_naming_both_files(tmp_path):
    train = lifelong_data.load_samples(DB_TRAIN, literal_fields=DB_FIELDS, validate=db_check)
    val = lifelong_data.load_samples(DB_VAL, literal_fields=DB_FIELDS, validate=db_check)
    merged = lifelong_data.merge_loaded(train, val)
    assert merged.keys == ["2", "10", "101", "0", "1", "20"]  # train keys, then validation keys
    assert merged.origin["0"] == str(DB_VAL) and merged.origin["101"] == str(DB_TRAIN)
    # a key in both files
    shutil.copy(OS_TRAIN, tmp_path / "os_interaction_train.json")
    val_rows = json.loads(OS_VAL.read_text())
    val_rows["10"] = val_rows.pop("0")
    (tmp_path / "os_interaction_val.json").write_text(json.dumps(val_rows))
    env = os_env(data_path=str(tmp_path / "os_interaction_train.json"), val_path="auto")
    with pytest.raises(lifelong_data.DataError) as err:
        env.tasks()
    msg = str(err.value)
    assert "sample 10 is in both" in msg
    assert str(tmp_path / "os_interaction_train.json") in msg and str(tmp_path / "os_interaction_val.json") in msg


def test_string_order_sorts_keys_as_text_and_numeric_stays_the_default():
    assert ids(os_env(val_path="auto", task_order="string")) == \
        ["os-0", "os-1", "os-10", "os-100", "os-11", "os-2", "os-21", "os-3"]
    assert ids(os_env(task_order="string")) == ["os-1", "os-10", "os-100", "os-2"]
    assert ids(db_env_of(FIX, val_path="auto", task_order="string")) == \
        ["db-0", "db-1", "db-10", "db-101", "db-2", "db-20"]
    # max_tasks takes the first tasks of the run order
    assert ids(os_env(val_path="auto", task_order="string", max_tasks=3)) == ["os-0", "os-1", "os-10"]
    assert lifelong_data.run_order(["2", "10", "1"], "numeric") == ["2", "10", "1"]


def test_the_data_fingerprints_change_with_the_merged_set_and_the_order():
    train, merged, ordered = os_env(), os_env(val_path="auto"), os_env(val_path="auto", task_order="string")
    for env in (train, merged, ordered):
        env.tasks()
    assert train.fingerprint != merged.fingerprint == ordered.fingerprint  # the rows themselves
    cards = {data_fingerprint(env.tasks()) for env in (train, merged, ordered)}  # the run card's
    assert len(cards) == 3


def test_val_path_is_checked_with_the_settings(tmp_path):
    lone = tmp_path / "os_interaction_train.json"
    shutil.copy(OS_TRAIN, lone)
    with pytest.raises(ValidationError, match="val_path: no OS task validation file at .*os_interaction_val.json"):
        LifelongOsSettings(data_path=str(lone), val_path="auto")
    with pytest.raises(ValidationError, match="val_path: no DB task validation file at .*db_val.json"):
        LifelongDbSettings(data_path=str(tmp_path / "os_interaction_train.json"), val_path="auto",
                           server_dir=str(tmp_path))
    with pytest.raises(ValidationError, match="task_order"):
        LifelongOsSettings(data_path=str(lone), task_order="random")
    assert LifelongOsSettings(data_path="hf://someone/llb/os", val_path="auto").val_path == "auto"


def test_hub_data_takes_its_validation_split(monkeypatch):
    rows = {split: json.loads(path.read_text()) for split, path in (("train", OS_TRAIN), ("validation", OS_VAL))}
    calls = []

    def read_hub(source, split, key_field):
        calls.append((source, split))
        return [(k, {**v, "skill_list": str(v["skill_list"])}) for k, v in rows[split].items()]

    monkeypatch.setattr(lifelong_data, "_read_hub", read_hub)
    env = os_env(data_path="hf://someone/llb/os", val_path="auto")
    assert ids(env) == ["os-0", "os-1", "os-2", "os-3", "os-10", "os-11", "os-21", "os-100"]
    assert calls == [("hf://someone/llb/os", "train"), ("hf://someone/llb/os", "validation")]
    assert env.task_files["0"] == "hf://someone/llb/os#validation" and env.task_files["1"] == "hf://someone/llb/os#train"


def test_an_episode_record_names_its_tasks_file_when_the_set_is_merged():
    shell = FakeShell({"test -d /data/archive": CommandResult(0, "")})
    merged = os_env(val_path="auto", shell=shell)
    res = merged.solve(merged.tasks()[0], [], None, seed=0)  # os-0, from the validation file
    assert res.success and res.info["task_file"] == str(OS_VAL)
    plain = os_env()
    assert "task_file" not in plain.solve(plain.tasks()[0], [], None, seed=0).info


def test_the_official_preset_runs_all_500_as_one_stream_in_string_order(tmp_path):
    v = validate(composed("experiment=llb_os_official", f"env.data_path={OS_TRAIN}"))
    assert (v.env.val_path, v.env.split, v.env.task_order, v.env.memory_format) == ("auto", "all", "string", "official")
    paper = validate(composed("experiment=llb_os_paper", f"env.data_path={OS_TRAIN}"))
    assert (paper.env.val_path, paper.env.task_order, paper.env.memory_format) == (None, "numeric", "memrl")
    env = LifelongOsEnv(v.env, agent="react")
    assert ids(env) == ["os-0", "os-1", "os-10", "os-100", "os-11", "os-2", "os-21", "os-3"]
    d = validate(composed("experiment=llb_db_official", f"env.data_path={DB_TRAIN}", f"paths.cache_dir={tmp_path}"))
    assert (d.env.val_path, d.env.split, d.env.task_order, d.env.memory_format) == ("auto", "all", "string", "official")
    # train data without its validation file beside it: the preset says what is missing
    lone = tmp_path / "os_interaction_train.json"
    shutil.copy(OS_TRAIN, lone)
    with pytest.raises(ConfigError, match="env.val_path"):
        validate(composed("experiment=llb_os_official", f"env.data_path={lone}"))


# ================================================================ the episode as a chat history
def test_os_episode_chat_history_is_preamble_task_then_turns():
    env = os_env(agent="react", with_example=False,
                 shell=FakeShell({"test -f /tmp/marker.txt": CommandResult(0, "")}))
    llm = FakeLLM(["Action: dance", "Action: bash\n```bash\ntouch /tmp/marker.txt\n```", "Action: finish"])
    res = env.solve(env.tasks()[0], [], llm, seed=0)  # os-1
    assert res.success
    assert res.memory_trajectory == (
        f"user: {OS_PREAMBLE}\n"
        "user: Task: Create an empty file named /tmp/marker.txt.\n"
        "assistant: Action: dance\n"
        f"user: Output: {OS_INVALID_HELP} (unknown action 'dance' (use bash or finish))\n"
        "assistant: Action: bash\n```bash\ntouch /tmp/marker.txt\n```\n"
        "user: Output: (no output)\n"
        "assistant: Action: finish")
    # the history holds no memory, and the preamble opens with the marker the display looks for
    assert OS_INSTRUCTION.startswith(OS_PREAMBLE_MARKER) and DB_INSTRUCTION.startswith(DB_PREAMBLE_MARKER)
    with_example = os_env(agent="react", shell=FakeShell())
    res = with_example.solve(with_example.tasks()[0], [], FakeLLM(["Action: finish"]), seed=0)
    assert res.memory_trajectory.startswith(f"user: {OS_INSTRUCTION.format(timeout=20)}\n\nExample:\n")
    assert res.memory_trajectory.endswith("Now your task.\nuser: Task: Create an empty file named /tmp/marker.txt.\n"
                                          "assistant: Action: finish")


def test_os_model_failure_drops_the_last_user_message_as_the_official_history_does():
    env = os_env(agent="react", with_example=False)
    res = env.solve(env.tasks()[0], [], FakeLLM(["Action: bash\n```bash\nls /\n```", LLMError("down")]), seed=0)
    assert res.memory_trajectory == (f"user: {OS_PREAMBLE}\nuser: Task: Create an empty file named /tmp/marker.txt.\n"
                                     "assistant: Action: bash\n```bash\nls /\n```")
    res = env.solve(env.tasks()[0], [], FakeLLM([LLMError("down")]), seed=0)
    assert res.memory_trajectory == f"user: {OS_PREAMBLE}"


def test_os_set_up_failures_have_an_empty_history():
    env = os_env(shell=FakeShell({"mkdir -p /opt/app": CommandResult(1, "read-only")}))
    res = env.solve(env.tasks()[2], [], None, seed=0)  # os-10: its set-up script fails
    assert res.outcome == "env_error" and res.memory_trajectory == ""

    def no_system(_root):
        raise ShellError("no overlay")

    broken = LifelongOsEnv(LifelongOsSettings(data_path=str(OS_TRAIN)), agent="gold", shell_factory=no_system)
    broken.rootfs = lambda: Path("/nonexistent-rootfs")
    res = broken.solve(broken.tasks()[0], [], None, seed=0)
    assert res.outcome == "env_error" and res.memory_trajectory == ""


def _db_task() -> DbTask:
    return DbTask.from_row("2", json.loads(DB_TRAIN.read_text())["2"])


def test_db_chat_history_ends_with_the_answer():
    task = _db_task()
    turns = [Turn(db_parse("Action: Operation\n```sql\nSELECT COUNT(*) FROM products WHERE price > 10;\n```"), "",
                  "[(2,)]"),
             Turn(db_parse("I think\nmore"), "I think\nmore", DB_INVALID_HELP),
             Turn(db_parse("Action: Answer\nFinal Answer: [(2,)]"), "", "Answer received.")]
    table = ('{"name": "products", "row_list": [[1, "pen", 2], [2, "lamp", 25], [3, "desk", 120]], '
             '"column_info_list": [{"name": "id", "type": "INT"}, {"name": "name", "type": "TEXT"}, '
             '{"name": "price", "type": "INT"}]}')
    preamble = DB_INSTRUCTION + "\n\nHere is your task."
    assert db_prompts.memory_trajectory(task, turns, with_example=False) == (
        f"user: {preamble}\n"
        f"user: Question: How many products cost more than 10? Return the count.\nTable information: {table}\n"
        "assistant: Action: Operation\n```sql\nSELECT COUNT(*) FROM products WHERE price > 10;\n```\n"
        "user: Output: [(2,)]\n"
        "assistant: Action: I think\n"
        f"user: Output: {DB_INVALID_HELP}\n"
        "assistant: Action: Answer\nFinal Answer: [(2,)]")
    # a failed model call after the first statement: its output goes too
    assert db_prompts.memory_trajectory(task, turns[:1], with_example=False, agent_failed=True).endswith(
        "assistant: Action: Operation\n```sql\nSELECT COUNT(*) FROM products WHERE price > 10;\n```")


class FakeDatabase:
    """Stands in for EpisodeDatabase: every statement returns the one answer."""

    name, timeouts = "ep_fake", 0

    def __init__(self, *args, **kw):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def execute(self, sql):
        return ExecResult(text="[(2,)]", ok=True, rows=[(2,)])

    def table_hash(self):
        return "0" * 32


def test_db_env_fills_the_history_on_its_results(tmp_path, monkeypatch):
    monkeypatch.setattr(db_env, "EpisodeDatabase", FakeDatabase)
    monkeypatch.setattr(LifelongDbEnv, "address", lambda self: None)
    env = db_env_of(tmp_path, val_path=None, with_example=False)
    task = next(t for t in env.tasks() if t.task_id == "db-2")
    res = env.solve(task, [], None, seed=0)
    assert res.success and res.memory_trajectory.endswith(
        "assistant: Action: Operation\n```sql\nSELECT COUNT(*) FROM products WHERE price > 10;\n```\n"
        "user: Output: [(2,)]\nassistant: Action: Answer\nFinal Answer: [(2,)]")
    assert "task_file" not in res.info
    merged = db_env_of(tmp_path, data_path=str(DB_TRAIN), val_path=str(DB_VAL))
    res = merged.solve(next(t for t in merged.tasks() if t.task_id == "db-1"), [], None, seed=0)
    assert res.info["task_file"] == str(DB_VAL)


# ================================================================== the official memory display
def _official_success(task: str, script: str, trajectory: str) -> str:  # memrl.memory.writer, layout=official
    return f"Task: {task}\n\nSCRIPT:\n{script}\n\nTRAJECTORY:\n{trajectory}"


def _official_failure(task: str, reflection: str, trajectory: str) -> str:
    return f"TASK REFLECTION:\nTask: {task}\n\nWhat went wrong:\n{reflection}\n\nFailed approach:\n{trajectory}\n"


def mem(mid: str, intent: str, experience: str, success: bool | None) -> RetrievedMemory:
    return RetrievedMemory(memory_id=mid, intent=intent, experience=experience, q=0.5, similarity=0.9,
                           score=1.0, success=success)


def _chat(task: str, *turns: tuple[str, str]) -> str:
    return chat_text([("user", OS_PREAMBLE), ("user", f"Task: {task}"), *turns])


BANK = [  # selection order
    mem("e001:os-7", "Remove the stale lock file.", _official_failure(
        "Remove the stale lock file.", "The lock was in /run, not /tmp.",
        _chat("Remove the stale lock file.", ("assistant", "Action: bash\n```bash\nrm /tmp/app.lock\n```"),
              ("user", "Output: (no output)"))), False),
    # a near-duplicate filed under another task's key: shown with its own task
    mem("e001:os-8", "Create user al", _official_success(
        "Create user bob", "1. Add the user.",
        _chat("Create user bob", ("assistant", "Action: bash\n```bash\nuseradd bob\n```"),
              ("user", "Output: (no output)"), ("assistant", "Action: finish"))), True),
    mem("e001:os-9", "An empty one", "   ", True),
    mem("e002:os-3", "Make /srv", "Task: Make /srv\nOutcome: solved\nPlan:\n1. mkdir\n"
        "Successful trajectory:\n> mkdir -p /srv\n(no output)", True),
    mem("e002:os-4", "Create group dev", "Task: Create group dev\nOutcome: failed\nReflection: used the wrong name\n"
        "Failed attempt:\n> groupadd devs\n(no output)", False),
    mem("e002:os-5", "Edit /etc/hosts", "Keep a copy before editing files under /etc.", None),
]

EXPECTED_BLOCK = """[Memories of earlier tasks]

=== Earlier tasks that were solved (build on what worked) ===
[Solved 1] [kind: script]
Task: Create user bob

SCRIPT:
1. Add the user.

TRAJECTORY:
user: Task: Create user bob
assistant: Action: bash
```bash
useradd bob
```
user: Output: (no output)
assistant: Action: finish

[Solved 3] [kind: script]
Task: Make /srv
Outcome: solved
Plan:
1. mkdir
Successful trajectory:
> mkdir -p /srv
(no output)


=== Earlier tasks that failed (do not repeat what went wrong) ===
[Failed 1] [kind: reflection]
TASK REFLECTION:
Task: Remove the stale lock file.

What went wrong:
The lock was in /run, not /tmp.

[Failed 2] [kind: reflection]
Task: Create group dev
Outcome: failed
Reflection: used the wrong name

[Failed 3] [kind: reflection]
Keep a copy before editing files under /etc."""


def test_official_block_groups_successes_first_cuts_failures_and_drops_the_preamble():
    assert format_official(BANK) == EXPECTED_BLOCK
    assert "Create user al" not in EXPECTED_BLOCK and OS_PREAMBLE_MARKER not in EXPECTED_BLOCK
    assert format_official([]) == ""
    only_failures = format_official([BANK[0]])
    assert only_failures.startswith("[Memories of earlier tasks]\n\n=== Earlier tasks that failed")
    assert "solved" not in only_failures


def test_os_official_prompt_puts_the_block_before_the_instructions():
    prompt = os_prompts.build_prompt("Create user carol", BANK, [], timeout_s=20, with_example=False,
                                     memory_format="official")
    assert prompt == (EXPECTED_BLOCK + "\n\n" + OS_INSTRUCTION.format(timeout=20)
                      + "\n\nNow your task.\nTask: Create user carol\nAction:")
    # memrl's layout stays as it was: instructions, example, the shared block, the task
    default = os_prompts.build_prompt("Create user carol", BANK, [])
    assert default == os_prompts.build_prompt("Create user carol", BANK, [], memory_format="memrl")
    assert default.startswith(OS_INSTRUCTION.format(timeout=20)) and "Past experiences" in default
    # no memories: the same prompt in both formats
    assert os_prompts.build_prompt("t", [], [], memory_format="official") == os_prompts.build_prompt("t", [], [])


def test_db_official_prompt_puts_the_block_before_the_instructions():
    task = _db_task()
    prompt = db_prompts.build_prompt(task, BANK[:2], [], with_example=False, memory_format="official")
    block = format_official(BANK[:2])
    assert block.index("[Solved 1]") < block.index("[Failed 1]")
    assert prompt == (block + "\n\n" + DB_INSTRUCTION + "\n\nHere is your task.\n"
                      + db_prompts.format_question(task) + "\nAction:")
    assert db_prompts.build_prompt(task, BANK, []).startswith(DB_INSTRUCTION)


def test_the_react_agent_sees_the_official_block_when_switched_on():
    env = os_env(agent="react", memory_format="official", with_example=False)
    llm = FakeLLM(["Action: finish"])
    env.solve(env.tasks()[0], BANK, llm, seed=0)
    assert llm.prompts[0].startswith(EXPECTED_BLOCK + "\n\n" + OS_INSTRUCTION.format(timeout=20))


def test_preamble_removal_follows_the_official_rule():
    db_chat = chat_text([("user", DB_INSTRUCTION + "\n\nHere is your task."), ("user", "Question: q"),
                         ("assistant", "Action: Answer\nFinal Answer: 1")])
    assert strip_preamble("Task: q\n\nTRAJECTORY:\n" + db_chat) == \
        "Task: q\n\nTRAJECTORY:\nuser: Question: q\nassistant: Action: Answer\nFinal Answer: 1"
    # up to the next assistant line when no other user message comes first
    assert strip_preamble(f"x\nuser: {OS_PREAMBLE_MARKER} ...\nmore rules\nassistant: ok\n") == "x\nassistant: ok"
    # only the first preamble goes; no preamble: unchanged; blank: empty
    twice = f"user: {OS_PREAMBLE_MARKER}\nuser: Task: a\nuser: {OS_PREAMBLE_MARKER}\nuser: Task: b"
    assert strip_preamble(twice) == f"user: Task: a\nuser: {OS_PREAMBLE_MARKER}\nuser: Task: b"
    assert strip_preamble("  no chat here \n") == "  no chat here \n" and strip_preamble(" \n ") == ""
    # the failure cut of an old text (no record): any case, the earlier of the two layouts' markers
    def failed(text: str) -> RetrievedMemory:
        return RetrievedMemory("m", "k", text, 0.0, 1.0, 1.0, False)

    assert shown_text(failed("Reflection: r\nFAILED APPROACH:\nuser: x")) == "Reflection: r"
    assert shown_text(failed("Reflection: r\nFailed attempt:\n> x")) == "Reflection: r"
    assert shown_text(failed("nothing to cut ")) == "nothing to cut "
