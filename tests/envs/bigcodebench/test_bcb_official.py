"""BigCodeBench as the official code (MemTensor/MemRL @ 7c3beba) shows memories and hands an
episode to its writer: a fixed bank state (a list of RetrievedMemory) and a fixed task give an
exact prompt (order, each memory's own task, the per-memory cut, the success-header bug on and
off), and every episode result carries the official `memory_trajectory`."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from memrl.config.validate import validate
from memrl.core.records import RetrievedMemory
from memrl.llm.base import LLMError
from memrl_envs.bigcodebench import BigCodeBenchEnv, BigCodeBenchSettings
from memrl_envs.bigcodebench.data import BCBProblem
from memrl_envs.bigcodebench.env import memory_trajectory
from memrl_envs.bigcodebench.executor import CheckResult
from memrl_envs.bigcodebench.prompts import (_INSTRUCT, OFFICIAL_NOTE, OFFICIAL_OPEN, build_prompt,
                                             official_memory_block, own_task_text)

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "tests" / "fixtures" / "bigcodebench" / "tiny.jsonl"

PROBLEM = BCBProblem(
    task_id="BigCodeBench/7", complete_prompt="def task_func(xs):\n    \"\"\"Reverse xs.\"\"\"\n",
    instruct_prompt=("Reverse a list.\nYou should write self-contained code starting with:\n"
                     "```\ndef task_func(xs):\n```"),
    canonical_solution="    return xs[::-1]\n", code_prompt="def task_func(xs):\n", test="", entry_point="task_func",
    libs=())

# the bank state: selection order failure (official layout), success (official layout, long
# enough to be cut), failure (memrl's layout); each filed under another task's key (`intent`)
FAIL_OFFICIAL = RetrievedMemory(
    memory_id="e001:BigCodeBench/3", intent="KEY OF ANOTHER TASK A", q=0.1, similarity=0.8, score=0.9, success=False,
    experience=("TASK REFLECTION:\nTask: Parse a date.\n\nWhat went wrong:\nThe format string was wrong.\n\n"
                "Failed approach:\n```python\ndef task_func(s):\n    return s\n```\n"))
SUCCESS_OFFICIAL = RetrievedMemory(
    memory_id="e001:BigCodeBench/1", intent="KEY OF ANOTHER TASK B", q=0.7, similarity=0.7, score=0.8, success=True,
    experience="Task: Sort a list.\n\nSCRIPT:\n1. Call sorted.\n\nTRAJECTORY:\n" + "x" * 1000)
FAIL_MEMRL = RetrievedMemory(
    memory_id="e001:BigCodeBench/2", intent="KEY OF ANOTHER TASK C", q=0.0, similarity=0.6, score=0.1, success=False,
    experience=("Task: Count words\nOutcome: failed\nReflection: Split on whitespace, not on commas.\n"
                "Failed attempt:\n> def task_func(t): return t.split(',')\nOutcome: fail - test_basic failed"))
BANK = [FAIL_OFFICIAL, SUCCESS_OFFICIAL, FAIL_MEMRL]
CAP = 2000 // 3  # 666 characters per entry

ENTRY_FAIL_OFFICIAL = (  # the whole stored text is the reflection (no line starts "Reflection:")
    "[Memory kind] failed attempt, with reflection\n[Its task]\nParse a date.\n\n[Reflection]\n"
    "TASK REFLECTION:\nTask: Parse a date.\n\nWhat went wrong:\nThe format string was wrong.\n\n"
    "Failed approach:\n```python\ndef task_func(s):\n    return s\n```")
HEAD_BUG = ("[Memory kind] successful procedure\n[Its task]\nSort a list.\n\n[How it was solved]\n"
            "Task: Sort a list.\n\nSCRIPT:\n1. Call sorted.\n\nTRAJECTORY:\n")
HEAD_FIXED = ("[Memory kind] successful procedure\n[Its task]\nSort a list.\n\n[How it was solved]\n"
              "SCRIPT:\n1. Call sorted.\n\nTRAJECTORY:\n")
ENTRY_FAIL_MEMRL = (  # memrl's layout has a "Reflection:" line: the text after it
    "[Memory kind] failed attempt, with reflection\n[Its task]\nCount words\n\n[Reflection]\n"
    "Split on whitespace, not on commas.\nFailed attempt:\n> def task_func(t): return t.split(',')\n"
    "Outcome: fail - test_basic failed")


def expected_prompt(success_entry: str) -> str:
    return (_INSTRUCT + "\n\n" + OFFICIAL_OPEN + "\n" + OFFICIAL_NOTE + "\n\n"
            "## Memory 1 [FAILURE]\n" + ENTRY_FAIL_OFFICIAL + "\n\n"
            "## Memory 2 [SUCCESS]\n" + success_entry + "\n\n"
            "## Memory 3 [FAILURE]\n" + ENTRY_FAIL_MEMRL + "\n\n"
            "Task:\n" + PROBLEM.instruct_prompt + "\n\nSolution:\n```python\n")


def test_official_prompt_with_the_header_bug_is_exact():
    got = build_prompt(PROBLEM, "instruct", BANK, memory_format="official", memory_chars=2000,
                       official_header_bug=True)
    success = HEAD_BUG + "x" * (CAP - len(HEAD_BUG)) + "..."
    assert got == expected_prompt(success)
    assert len(success) == CAP + 3
    # in selection order (not successes first), never the key's text
    assert got.index("Parse a date") < got.index("Sort a list") < got.index("Count words")
    assert "KEY OF ANOTHER TASK" not in got


def test_official_prompt_without_the_header_bug_strips_the_success_header():
    got = build_prompt(PROBLEM, "instruct", BANK, memory_format="official", memory_chars=2000,
                       official_header_bug=False)
    assert got == expected_prompt(HEAD_FIXED + "x" * (CAP - len(HEAD_FIXED)) + "...")
    assert got.count("Sort a list.") == 1  # the bug shows the task twice, the fix once


def test_the_cut_is_an_even_share_of_the_budget_per_memory_shown():
    one = official_memory_block([SUCCESS_OFFICIAL], 100, header_bug=True)
    assert one == f"{OFFICIAL_OPEN}\n{OFFICIAL_NOTE}\n\n## Memory 1 [SUCCESS]\n{HEAD_BUG[:100]}..."
    short = official_memory_block([FAIL_OFFICIAL], 2000)  # under its share: not cut, no marker
    assert short.endswith("## Memory 1 [FAILURE]\n" + ENTRY_FAIL_OFFICIAL)
    assert official_memory_block([], 2000) == ""


def test_other_layouts_outcomes_and_empty_memories():
    def mem(text: str, success: bool | None, intent: str = "the key") -> RetrievedMemory:
        return RetrievedMemory(memory_id="m", intent=intent, experience=text, q=0.0, similarity=0.5,
                               score=0.0, success=success)

    memrl_success = mem("Task: Sum a list\nOutcome: solved\nPlan:\n1. Use sum.", True)
    bare = mem("Use a dict comprehension.", None, intent="Invert a dict")
    empty = mem("   ", True)
    block = official_memory_block([memrl_success, empty, bare], 3000, header_bug=False)
    assert block == (f"{OFFICIAL_OPEN}\n{OFFICIAL_NOTE}\n\n"
                     "## Memory 1 [SUCCESS]\n[Memory kind] successful procedure\n[Its task]\nSum a list\n\n"
                     "[How it was solved]\nOutcome: solved\nPlan:\n1. Use sum.\n\n"
                     # the empty memory is skipped but keeps its number; no outcome: UNKNOWN,
                     # shown as a success; no Task line: the intent is its task
                     "## Memory 3 [UNKNOWN]\n[Memory kind] successful procedure\n[Its task]\nInvert a dict\n\n"
                     "[How it was solved]\nUse a dict comprehension.")
    bugged = official_memory_block([memrl_success], 3000, header_bug=True)
    assert bugged.endswith("[How it was solved]\nTask: Sum a list\nOutcome: solved\nPlan:\n1. Use sum.")
    # a task text with a blank line inside ends at the official layout's marker
    assert own_task_text(mem("Task: A\n\nB\n\nSCRIPT:\ns\n\nTRAJECTORY:\nt", True)) == "A\n\nB"
    assert own_task_text(mem("TASK REFLECTION:\nTask: A\n\nB\n\nWhat went wrong:\nr", False)) == "A\n\nB"


def test_memrl_format_stays_the_default():
    assert build_prompt(PROBLEM, "instruct", BANK) == build_prompt(PROBLEM, "instruct", BANK, memory_format="memrl")
    assert "Past experiences" in build_prompt(PROBLEM, "instruct", BANK)
    s = BigCodeBenchSettings()
    assert (s.memory_format, s.memory_chars, s.official_header_bug) == ("memrl", 2000, False)


# ----------------------------------------------------------------------------- the episode
class StubExecutor:
    time_limit_s = 5.0

    def __init__(self, result: CheckResult) -> None:
        self.result = result

    def check(self, code, test, entry_point, modules=()):
        return self.result


class FakeLLM:
    def __init__(self, reply):
        self.reply, self.prompts = reply, []

    def complete(self, prompt, **kw):
        self.prompts.append(prompt)
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply


def env_with(result: CheckResult, tmp_path, **fields) -> BigCodeBenchEnv:
    settings = BigCodeBenchSettings(data_path=str(TINY), cache_dir=str(tmp_path), part="all", **fields)
    return BigCodeBenchEnv(settings, agent="react", executor=StubExecutor(result))


def test_the_trajectory_is_the_raw_reply_and_the_prompt_follows_the_settings(tmp_path):
    env = env_with(CheckResult(status="pass", ready=True), tmp_path, memory_format="official",
                   official_header_bug=True)
    task = env.tasks()[0]
    reply = "  Here it is:\n```python\ndef task_func(a, b):\n    return a + b\n```\nDone.\n"
    llm = FakeLLM(reply)
    r = env.solve(task, [SUCCESS_OFFICIAL], llm, seed=0)
    assert r.success and r.memory_trajectory == reply  # exactly, whitespace and prose kept
    assert "## Memory 1 [SUCCESS]\n" + HEAD_BUG + "x" * 1000 + "\n\nTask:\n" in llm.prompts[0]  # under its share
    fail = env_with(CheckResult(status="fail", ready=True, details={"test_x": "AssertionError"}), tmp_path)
    r = fail.solve(task, [], FakeLLM(reply), seed=0)
    assert not r.success and r.memory_trajectory == reply  # no test result in it


def test_an_empty_reply_or_a_failed_call_gets_the_fallback_account(tmp_path):
    env = env_with(CheckResult(status="pass", ready=True), tmp_path)
    task = env.tasks()[0]
    prompt = env.problem(task.task_id).instruct_prompt
    r = env.solve(task, [FAIL_OFFICIAL], FakeLLM(""), seed=0)
    assert r.memory_trajectory == (
        "[1] Task prompt\n" + prompt + "\n\n[2] Memories retrieved\ncount: 1\nbest similarity: 0.8000\n"
        "ids: ['e001:BigCodeBench/3']\n\n[3] Code tested\n```python\n\n```\n\n[4] Test result\n"
        "status: syntax_error\nerror:\nthe reply holds no code")
    r = env.solve(task, [], FakeLLM(LLMError("rate limited")), seed=0)
    assert r.outcome == "llm_error" and r.memory_trajectory == (
        "[1] Task prompt\n" + prompt + "\n\n[3] Code tested\n```python\n\n```\n\n[4] Test result\n"
        "status: llm_error\nerror:\nrate limited")
    # a passing check has no error line
    assert memory_trajectory("", "P", "code", "pass", "").endswith("[4] Test result\nstatus: pass")


# ----------------------------------------------------------------------------- the preset
def compose_cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        return compose(config_name="config", overrides=list(overrides))


@pytest.mark.parametrize("preset", ["bcb_official", "bcb_paper"])
def test_the_official_preset_sets_the_display_and_the_test_limits(preset):
    v = validate(compose_cfg(f"experiment={preset}"))
    e = v.env
    got = (e.memory_format, e.memory_chars, e.official_header_bug, e.memory_mb, e.time_limit_s, e.sandbox_memory_mb)
    if preset == "bcb_official":
        assert got == ("official", 2000, True, 30 * 1024, 119, 4096)
    else:
        assert got == ("memrl", 2000, False, 4096, 240, 4096)
