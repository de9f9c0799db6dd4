"""BigCodeBench adapter without a sandbox: loading (local JSONL, hub through `datasets`,
malformed rows), the seeded train/validation division and its split file, prompts, code
extraction, outcome classification and the episode logic with a stand-in executor."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from memrl.config.validate import validate
from memrl.core.errors import ConfigError
from memrl.core.records import RetrievedMemory
from memrl.llm.base import LLMError
from memrl_envs.bigcodebench import BigCodeBenchEnv, BigCodeBenchSettings
from memrl_envs.bigcodebench import data as bcb_data
from memrl_envs.bigcodebench import sandbox_runner as runner
from memrl_envs.bigcodebench.executor import FRAME, READY, CheckResult, parse_channel, required_modules
from memrl_envs.bigcodebench.extract import extract_code
from memrl_envs.bigcodebench.outcome import classify, outcome_counts
from memrl_envs.bigcodebench.prompts import FENCE, build_prompt, task_intent
from memrl_envs.sandbox import SandboxResult
from data_paths import BCB_HARD_TRAIN

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "tests" / "fixtures" / "bigcodebench" / "tiny.jsonl"
SHARED = BCB_HARD_TRAIN
CONFIGS = str(ROOT / "configs")


def bcb_env(*, agent: str = "react", executor=None, **fields) -> BigCodeBenchEnv:
    """The env from its settings (paths given as Path are passed as strings)."""
    settings = BigCodeBenchSettings(**{k: str(v) if isinstance(v, Path) else v for k, v in fields.items()})
    return BigCodeBenchEnv(settings, agent=agent, executor=executor)


def tiny_rows() -> list[dict]:
    return [json.loads(line) for line in TINY.read_text().splitlines()]


# ----------------------------------------------------------------------------- loading
def test_malformed_rows_are_reported_by_line_and_skipped(tmp_path):
    good = tiny_rows()
    bad_libs = dict(good[1], task_id="Bad/libs", libs="not a list (")
    no_test = {k: v for k, v in good[2].items() if k != "test"}
    bad_entry = dict(good[0], task_id="Bad/entry", entry_point="task func")
    lines = [json.dumps(good[0]), "{this is not json", json.dumps(bad_libs), "",
             json.dumps(no_test), json.dumps(good[0]), json.dumps(bad_entry), json.dumps([1, 2]),
             json.dumps(good[1])]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n")
    report = bcb_data.read_jsonl(path)
    assert [p.task_id for p in report.problems] == ["Tiny/1", "Tiny/2"]
    skipped = "\n".join(report.skipped)
    assert len(report.skipped) == 6
    assert "mixed.jsonl:2: not valid JSON" in skipped
    assert "mixed.jsonl:3: libs is not a Python list literal" in skipped
    assert "mixed.jsonl:5: missing field(s) test" in skipped
    assert "mixed.jsonl:6: task_id 'Tiny/1' repeats mixed.jsonl:1" in skipped
    assert "mixed.jsonl:7: entry_point 'task func' is not a Python identifier" in skipped
    assert "mixed.jsonl:8: expected a JSON object" in skipped
    assert report.problems[1].libs == ("collections",)
    # the env hands the same list to the run card, one {item, reason} per row (issue 13.7)
    env = bcb_env(data_path=str(path), part="all")
    assert [t.task_id for t in env.tasks()] == ["Tiny/1", "Tiny/2"]
    listed = env.data_skipped()
    assert len(listed) == 6 and listed[0]["item"] == "mixed.jsonl:2"
    assert listed[0]["reason"].startswith("not valid JSON")


def test_a_source_without_usable_rows_is_an_error(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("nope\n{}\n")
    with pytest.raises(ValueError, match=r"no usable BigCodeBench task .*bad.jsonl:1"):
        bcb_data.load_problems(str(path), "hard", "v0.1.4")


def test_hub_loading_goes_through_datasets(monkeypatch):
    calls = []

    def load_dataset(name, split):
        calls.append((name, split))
        return [dict(r) for r in tiny_rows()[:2]] + [{"task_id": "broken"}]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    report = bcb_data.load_problems(None, "hard", "v0.1.4")
    assert calls == [("bigcode/bigcodebench-hard", "v0.1.4")]
    assert [p.task_id for p in report.problems] == ["Tiny/1", "Tiny/2"]
    assert report.skipped and "row 2: missing field(s)" in report.skipped[0]
    bcb_data.load_problems(None, "full", "v0.1.4")
    assert calls[-1] == ("bigcode/bigcodebench", "v0.1.4")


def test_hub_failure_says_what_to_do(monkeypatch):
    def load_dataset(name, split):
        raise ConnectionError("offline")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    with pytest.raises(RuntimeError, match="env.data_path"):
        bcb_data.load_problems(None, "hard", "v0.1.4")


# ----------------------------------------------------------------------------- division
def test_division_is_seeded_seven_to_three_and_kept_in_a_split_file(tmp_path):
    ids = [f"BigCodeBench/{i}" for i in range(148)]
    train, val = bcb_data.divide(ids, 42, 0.7)
    assert (len(train), len(val)) == (103, 45) and not set(train) & set(val)
    assert bcb_data.divide(list(reversed(ids)), 42, 0.7) == (train, val)  # input order is irrelevant
    assert bcb_data.divide(ids, 7, 0.7)[0] != train
    path = tmp_path / "split.json"
    division = bcb_data.load_or_create_division(path, ids, 42, 0.7)
    assert json.loads(path.read_text())["train"] == train == division.train
    # the file is the authority once written: an edited file is what the next run reads
    data = json.loads(path.read_text())
    data["train"], data["validation"] = data["train"][1:], [data["train"][0]] + data["validation"]
    path.write_text(json.dumps(data))
    again = bcb_data.load_or_create_division(path, ids, 42, 0.7)
    assert again.validation[0] == train[0] and len(again.train) == 102
    with pytest.raises(ValueError, match="does not assign 1 task"):
        bcb_data.load_or_create_division(path, ids + ["BigCodeBench/999"], 42, 0.7)


# The validation part of the paper code's Hard division (its configs/bigcodebench/splits/
# hard_seed42.json, MemTensor/MemRL @ 7c3beba); the 103 others are ../shared/data's hard_train.
HARD_SEED42_VAL = [13, 17, 34, 82, 89, 100, 120, 129, 139, 184, 239, 241, 267, 287, 308, 326, 341,
                   346, 367, 374, 445, 486, 501, 567, 593, 655, 723, 752, 765, 785, 865, 897, 916,
                   964, 985, 998, 1012, 1013, 1015, 1022, 1039, 1040, 1085, 1124, 1137]
HARD_TRAIN = BCB_HARD_TRAIN


@pytest.mark.skipif(not HARD_TRAIN.is_file(), reason=f"no {HARD_TRAIN}")
def test_division_is_the_one_the_papers_code_makes():
    import hashlib

    train_ids = [json.loads(x)["task_id"] for x in HARD_TRAIN.read_text().splitlines() if x.strip()]
    hard = train_ids + [f"BigCodeBench/{i}" for i in HARD_SEED42_VAL]
    train, val = bcb_data.divide(hard, 42, 0.7)
    assert set(train) == set(train_ids) and val == [f"BigCodeBench/{i}" for i in HARD_SEED42_VAL]
    # Full, seed 123: the official runner's default split file (798 train ids), by fingerprint
    full_train, full_val = bcb_data.divide([f"BigCodeBench/{i}" for i in range(1140)], 123, 0.7)
    assert (len(full_train), len(full_val)) == (798, 342)
    assert hashlib.sha256(",".join(full_train).encode()).hexdigest()[:16] == "e9978c7021017aba"
    assert {"BigCodeBench/582", "BigCodeBench/994"} <= set(full_train)
    assert {"BigCodeBench/89", "BigCodeBench/1119"} <= set(full_val)


def test_env_parts_partition_the_tasks_and_agree_across_instances(tmp_path):
    kw = dict(data_path=TINY, cache_dir=tmp_path, executor=StubExecutor())
    train = bcb_env(part="train", **kw)
    val = bcb_env(part="validation", **kw)
    every = bcb_env(part="all", **kw)
    t_ids = [t.task_id for t in train.tasks()]
    v_ids = [t.task_id for t in val.tasks()]
    assert len(t_ids) == 3 and len(v_ids) == 2  # floor(5 * 0.7)
    assert sorted(t_ids + v_ids) == sorted(t.task_id for t in every.tasks())
    assert train.split_path == val.split_path and train.split_path.is_file()
    assert every.split_path is None  # part=all needs no division
    assert [t.task_id for t in bcb_env(part="train", **kw).tasks()] == t_ids


def test_task_selection_and_bad_arguments(tmp_path):
    kw = dict(data_path=TINY, cache_dir=tmp_path, executor=StubExecutor(), part="all")
    env = bcb_env(task_ids=["Tiny/3", "Tiny/1"], **kw)
    assert [t.task_id for t in env.tasks()] == ["Tiny/1", "Tiny/3"]
    assert [t.task_id for t in bcb_env(max_tasks=2, **kw).tasks()] == ["Tiny/1", "Tiny/2"]
    with pytest.raises(ValueError, match="unknown task ids"):
        bcb_env(task_ids=["Tiny/99"], **kw).tasks()
    with pytest.raises(ValueError, match=r"env 'bigcodebench' has no agent 'expert' \(its agents: canonical, react\)"):
        bcb_env(agent="expert", **kw)
    with pytest.raises(ValueError, match=r"split\n.*'instruct' or 'complete'"):
        bcb_env(split="chat", **kw)
    with pytest.raises(ValueError, match="task_ids: an empty list selects no task"):
        bcb_env(task_ids=[], **kw)
    with pytest.raises(TypeError, match="takes a BigCodeBenchSettings"):
        BigCodeBenchEnv({"part": "all"}, agent="react")
    task = env.tasks()[0]
    assert task.intent == "Add two numbers and return their sum."
    assert task.payload["content_hash"] and task.payload["entry_point"] == "task_func"


# ----------------------------------------------------------------------------- config
def compose_cfg(*overrides: str):
    with initialize_config_dir(config_dir=CONFIGS, version_base=None):
        return compose(config_name="config", overrides=["env=bigcodebench", f"env.data_path={TINY}",
                                                        *overrides])


def test_config_group_validates_and_names_bad_keys():
    v = validate(compose_cfg())
    assert v.env.split == "instruct" and v.env.time_limit_s == 240 and v.env.part == "train"
    v = validate(compose_cfg("agent=canonical"))
    assert v.agent.name == "canonical" and v.policy.needs_llm is False
    with pytest.raises(ConfigError, match=r"agent: env 'bigcodebench' has no agent 'gold'"):
        validate(compose_cfg("agent=gold"))
    with pytest.raises(ConfigError, match="env.split"):
        validate(compose_cfg("env.split=chat"))
    with pytest.raises(ConfigError, match="env.data_path: no file"):
        validate(compose_cfg("env.data_path=/nonexistent.jsonl"))
    with pytest.raises(ConfigError, match="env.time_limit"):
        validate(compose_cfg("+env.time_limit=3"))


def test_paper_preset():
    v = validate(compose_cfg("experiment=bcb_paper"))
    assert v.env.split == "instruct" and v.runner.epochs == 10
    assert (v.memory.delta, v.memory.k1, v.memory.k2) == (0.38, 10, 5)
    assert v.llm.model == "openai/gpt-4o" and v.embedder.model == "openai/text-embedding-3-large"
    env = v.env_cls(v.env, agent=v.agent.name)
    assert isinstance(env, BigCodeBenchEnv) and env.agent == "react" and env.s is v.env


# ----------------------------------------------------------------------------- prompts
def memory(text: str) -> RetrievedMemory:
    return RetrievedMemory(memory_id="e001:x", intent="Sum a list", experience=text, q=0.5,
                           similarity=0.9, score=1.0, success=True)


def test_prompt_ends_in_an_open_python_fence_and_carries_memories():
    problem = bcb_data.read_jsonl(TINY).problems[1]
    plain = build_prompt(problem, "instruct", [])
    assert plain.endswith(FENCE) and problem.instruct_prompt.strip() in plain
    assert "Past experiences" not in plain
    with_mem = build_prompt(problem, "instruct", [memory("Use collections.Counter.")])
    assert "Use collections.Counter." in with_mem and "earlier task: Sum a list" in with_mem
    assert with_mem.index("Use collections.Counter.") < with_mem.index(problem.instruct_prompt.strip())
    # the static part first (a provider's prompt cache matches prefixes): the instruction, then
    # the memories, then the task
    assert with_mem.startswith(plain.split("\n\n")[0]) and plain.startswith("Write one self-contained")
    complete = build_prompt(problem, "complete", [])
    assert complete.endswith(FENCE + problem.complete_prompt)
    assert task_intent(problem, "instruct").startswith("Count the words")
    assert "You should write" not in task_intent(problem, "instruct")
    # the official code's key: the whole prompt of the split
    assert task_intent(problem, "instruct", whole_prompt=True) == problem.instruct_prompt.strip()
    assert task_intent(problem, "complete", whole_prompt=True) == problem.complete_prompt.strip()
    env = bcb_env(data_path=TINY, part="all", intent="prompt", executor=StubExecutor())
    assert env.tasks()[1].intent == problem.instruct_prompt.strip()
    with pytest.raises(ValueError, match="intent"):
        bcb_env(data_path=TINY, part="all", intent="code", executor=StubExecutor())


# ----------------------------------------------------------------------------- extraction
def test_extraction_of_fenced_bare_and_broken_code():
    fenced = "Here you go:\n```python\nimport os\ndef task_func(x):\n    return x\n```\nDone."
    e = extract_code(fenced, "task_func")
    assert (e.source, e.ok) == ("fenced", True) and e.code.startswith("import os")
    # the block that defines the entry point wins over a longer helper block
    two = ("```python\n" + "# helper\n" * 30 + "X = 1\n```\nand\n```py\ndef task_func():\n    return 1\n```")
    assert "def task_func" in extract_code(two, "task_func").code
    # a base model continuing the prompt's open fence: code up to the closing fence
    bare = "def task_func(a, b):\n    return a + b\n```\nSome chatter ```python\nnope(\n```"
    e = extract_code(bare, "task_func")
    assert (e.source, e.ok) == ("bare", True) and "chatter" not in e.code
    # the complete split: a body continuation gets the header back
    header = 'def task_func(a, b):\n    """Sum."""\n'
    e = extract_code("    return a + b\n```", "task_func", prefix=header)
    assert e.ok and e.code.startswith("def task_func(a, b):") and "return a + b" in e.code
    broken = extract_code("def task_func(:\n    pass", "task_func")
    assert broken.source == "bare" and not broken.ok and "SyntaxError" in broken.syntax_error
    assert not extract_code("return 1", "task_func").ok  # parses, but does not compile
    empty = extract_code("   ", "task_func")
    assert (empty.source, empty.ok) == ("empty", False)


# ----------------------------------------------------------------------------- outcomes
def check(status: str, **kw) -> CheckResult:
    return CheckResult(status=status, ready=True, **kw)


def test_classification_of_checker_results():
    assert classify(check("pass"), 5).kind == "pass"
    fail = classify(check("fail", details={"test_b": "Traceback\nAssertionError: 1 != 2",
                                           "test_a": "Traceback\nValueError: bad"}), 5)
    assert fail.kind == "fail" and fail.reason == "test_a: ValueError: bad (+1 more)"
    assert fail.failed_tests == ["test_a", "test_b"]
    assert classify(check("timeout"), 5).kind == "timeout"
    assert classify(check("timeout", test_process="running"), 5).kind == "timeout"
    early = classify(check("timeout", test_process="exited", test_exitcode=0, test_seconds=0.42), 240)
    assert (early.kind, early.shared) == ("early_exit", "failure")
    assert early.reason == ("the test process ended after 0.42 s without a result (exit code 0): "
                            "the code ended or crashed it")
    oom = classify(check("timeout", test_process="signaled", test_exitcode=-9, oom_kills=1), 240)
    assert oom.kind == "early_exit" and "signal 9; the sandbox's memory cap killed 1 process(es)" in oom.reason
    alarm = check("fail", details={"test_a": 'File "utils.py", line 84, in signal_handler\n'
                                             "bigcodebench.eval.utils.TimeoutException: Timed out!\n"})
    assert classify(alarm, 5).kind == "timeout"  # the checker records its alarm as a failed test
    assert classify(CheckResult(status="no_result", ready=True, sandbox_timed_out=True), 5).kind == "timeout"
    died = classify(CheckResult(status="no_result", ready=True, returncode=-9), 5)
    assert died.kind == "fail" and "signal 9" in died.reason
    not_started = classify(CheckResult(status="no_result", ready=False, returncode=1,
                                       stderr_tail="ImportError: no numpy"), 5)
    assert not_started.kind == "env_error"
    assert classify(check("harness_error", error="cannot import bigcodebench.eval"), 5).kind == "env_error"
    missing = classify(check("fail", details={"ALL": "No module named 'seaborn'"},
                             unimportable={"seaborn": "ModuleNotFoundError: No module named 'seaborn'"}), 5)
    assert missing.kind == "env_error" and missing.missing == ["seaborn"]
    # a module a library needs (pandas -> openpyxl) is the environment's fault ...
    lib_trace = ('Traceback (most recent call last):\n  File "__test__.py", line 9, in test_x\n'
                 '  File "/venv/site-packages/pandas/io/excel/_openpyxl.py", line 56, in __init__\n'
                 "ModuleNotFoundError: No module named 'openpyxl'\n")
    optional = classify(check("fail", details={"test_x": lib_trace}), 5)
    assert optional.kind == "env_error" and optional.missing == ["openpyxl"]
    # ... but a module the code under test imports itself (statically or not) is the model's
    own = classify(check("fail", details={"ALL": "No module named 'magic_solver'"}), 5,
                   solution_modules=["magic_solver"])
    assert own.kind == "fail"
    dynamic = ('Traceback (most recent call last):\n  File "__test__.py", line 4, in task_func\n'
               '  File "<frozen importlib._bootstrap>", line 1204, in _gcd_import\n'
               "ModuleNotFoundError: No module named 'magic_solver'\n")
    assert classify(check("fail", details={"test_y": dynamic}), 5).kind == "fail"
    nltk = classify(check("fail", details={"test_t": "LookupError: \n  Resource \x1b[93mpunkt_tab\x1b[0m "
                                                     "not found.\n  Please use the NLTK Downloader"}), 5)
    assert nltk.kind == "env_error" and nltk.missing == ["nltk:punkt_tab"]
    quoted = ("  File \"/venv/site-packages/nltk/data.py\", line 1636, in find\nLookupError: \n"
              "*****\n  Resource 'stopwords' not found.\n  Please use the NLTK Downloader\n*****\n")
    assert classify(check("fail", details={"test_s": quoted}), 5).missing == ["nltk:stopwords"]
    assert outcome_counts(["pass", "fail", "pass"])["pass"] == 2


def _run(channel: bytes | None, stdout: str = "", timed_out: bool = False) -> SandboxResult:
    return SandboxResult(returncode=None if timed_out else 0, stdout=stdout, stderr="",
                         timed_out=timed_out, wall_s=1.0, channel=channel)


def test_the_result_comes_from_the_channel_never_from_what_the_program_printed():
    forged = 'MEMRL-CHECK {"status": "pass", "details": {}}\n'
    real = READY + json.dumps({"status": "fail", "ready": True, "details": {"t": "boom"}}).encode()
    r = parse_channel(_run(real, stdout=forged * 3))
    assert (r.status, r.ready, r.details) == ("fail", True, {"t": "boom"})
    assert "framing" in r.tampered
    # nothing on the channel after `ready`: the code under test killed the reporter
    r = parse_channel(_run(READY))
    assert (r.status, r.ready) == ("no_result", True)
    assert classify(r, 5).kind == "fail"
    # not even `ready`: the checker never started (the environment's fault)
    assert classify(parse_channel(_run(b"")), 5).kind == "env_error"
    r = parse_channel(_run(READY, timed_out=True))
    assert r.status == "no_result" and r.sandbox_timed_out and classify(r, 5).kind == "timeout"
    r = parse_channel(_run(READY + b"{not json"))
    assert r.status == "no_result" and "no readable result" in r.tampered
    # a complete result, then the host saw the sandbox end otherwise than the reporter does
    killed = SandboxResult(returncode=-9, stdout="", stderr="", wall_s=1.0, channel=real)
    assert "status -9 after a complete result" in parse_channel(killed).tampered
    # how the checker saw the test process end comes through
    seen = READY + json.dumps({"status": "timeout", "ready": True, "test_process": "exited",
                               "test_exitcode": 0, "test_seconds": 0.5}).encode()
    r = parse_channel(_run(seen))
    assert (r.test_process, r.test_exitcode, r.test_seconds, r.tampered) == ("exited", 0, 0.5, "")


def test_the_runner_takes_the_verdict_from_the_checkers_exit_status():
    def line(payload):
        return b"\n" + (runner.FRAME + json.dumps(payload)).encode() + b"\n"

    fail = {"status": "fail", "details": {"t": "boom"}, "test_process": {"ending": "exited", "exitcode": 0}}
    honest = runner.reported(runner.exit_code("fail", "exited"), runner.READY + line(fail))
    assert (honest["status"], honest["ready"], honest["details"]) == ("fail", True, {"t": "boom"})
    assert "tampered" not in honest
    # a forged pass line from the code under test, then the checker's own fail: still a fail
    two = runner.reported(runner.exit_code("fail", "exited"), runner.READY + b"junk no newline" +
                          line({"status": "pass", "details": {}}) + line(fail))
    assert two["status"] == "fail" and "2 details lines" in two["tampered"]
    # the forged line is the last one (a daemon wrote after the checker): the exit status wins
    late = runner.reported(runner.exit_code("fail", "exited"), runner.READY + line(fail) + line({"status": "pass"}))
    assert late["status"] == "fail" and late["details"] == {} and "does not match" in late["tampered"]
    # a glued line cannot be parsed: no details, the verdict stands
    glued = runner.reported(runner.exit_code("pass", "exited"),
                            runner.READY + b"MEMRL-CHECK {" + line({"status": "pass"})[1:])
    assert glued["status"] == "pass" and glued["tampered"]
    # the checker died (a signal, a plain exit): no verdict, whatever was printed
    died = runner.reported(-9, runner.READY + line({"status": "pass", "details": {}}))
    assert died["status"] == "no_result" and died["ready"] and died["tampered"]
    assert runner.reported(1, b"")["ready"] is False
    # a pass that disagrees with what the checker saw is flagged (the verdict stands)
    passed = {"status": "pass", "details": {}, "test_process": {"ending": "signaled", "exitcode": -9}}
    odd = runner.reported(runner.exit_code("pass", "signaled"), runner.READY + line(passed))
    assert odd["status"] == "pass" and "saw the test process end signaled" in odd["tampered"]
    with_failures = {"status": "pass", "details": {"t": "boom"}, "test_process": {"ending": "exited"}}
    odd = runner.reported(runner.exit_code("pass", "exited"), runner.READY + line(with_failures))
    assert "pass with failed tests" in odd["tampered"]
    # the ending in the details line must be the one the exit status carries
    lied = runner.reported(runner.exit_code("timeout", "running"), runner.READY + line(
        {"status": "timeout", "details": {}, "test_process": {"ending": "exited"}}))
    assert "does not match" in lied["tampered"] and lied["test_process"] == "running"
    early = runner.reported(runner.exit_code("timeout", "exited"), runner.READY + line(
        {"status": "timeout", "details": {}, "test_process": {"ending": "exited", "exitcode": 0, "seconds": 0.4}}))
    assert (early["test_process"], early["test_exitcode"], early["test_seconds"]) == ("exited", 0, 0.4)
    assert "tampered" not in early
    assert [runner.decode(runner.exit_code(v, e)) for v in runner.VERDICTS for e in runner.ENDINGS] == \
        [(v, e) for v in runner.VERDICTS for e in runner.ENDINGS]
    assert runner.decode(0) is None and runner.decode(runner.HARNESS_ERROR) == ("harness_error", "")
    # the words the two sides share agree (the runner must stay self-contained)
    assert (runner.FRAME, runner.READY) == (FRAME, READY)


def test_required_modules_are_libs_plus_test_imports():
    test = "import unittest\nfrom unittest.mock import patch\nimport pandas as pd\nfrom . import x\n"
    assert required_modules(["os", "sklearn.model_selection"], test) == ["os", "sklearn", "unittest", "pandas"]


# ----------------------------------------------------------------------------- episodes
class StubExecutor:
    """Records what would run; answers with a fixed CheckResult."""

    time_limit_s = 5.0

    def __init__(self, result: CheckResult | None = None) -> None:
        self.result = result or CheckResult(status="pass", ready=True)
        self.calls: list[tuple[str, str, str, list[str]]] = []

    def check(self, code, test, entry_point, modules=()):
        self.calls.append((code, test, entry_point, list(modules)))
        return self.result


class FakeLLM:
    def __init__(self, reply):
        self.reply, self.prompts, self.kwargs = reply, [], []

    def complete(self, prompt, *, purpose, max_tokens=None, stop=(), **kw):
        self.prompts.append(prompt)
        self.kwargs.append({"purpose": purpose, "max_tokens": max_tokens})
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply


def make_env(tmp_path, **kw) -> BigCodeBenchEnv:
    kw.setdefault("executor", StubExecutor())
    return bcb_env(data_path=TINY, cache_dir=tmp_path, part="all", **kw)


def test_react_episode_runs_the_calibrated_program(tmp_path):
    env = make_env(tmp_path, max_tokens=77)
    task = env.tasks()[1]
    llm = FakeLLM("from collections import Counter\ndef task_func(text):\n    return {}\n```")
    r = env.solve(task, [memory("remember Counter")], llm, seed=0)
    assert r.success and r.reward == 1.0 and r.steps == 1 and not r.errors
    assert (r.outcome, r.outcome_detail) == ("success", "pass") and r.info["memories_injected"] == 1
    assert "remember Counter" in llm.prompts[0] and llm.kwargs[0]["max_tokens"] == 77
    code, test, entry, modules = env.executor.calls[0]
    problem = env.problem(task.task_id)
    assert code.startswith(problem.code_prompt + "\n    pass\n") and code.endswith("return {}\n")
    assert test == problem.test and entry == "task_func" and "collections" in modules
    assert r.transcript[0].action.startswith("from collections import Counter")
    assert r.transcript[0].observation.startswith("Outcome: pass")


def test_syntax_errors_are_never_executed_and_llm_errors_are_recorded(tmp_path):
    env = make_env(tmp_path)
    task = env.tasks()[0]
    r = env.solve(task, [], FakeLLM("def task_func(a, b)\n    return a+b"), seed=0)
    assert not r.success and (r.outcome, r.outcome_detail) == ("failure", "syntax_error")
    assert not env.executor.calls
    r = env.solve(task, [], FakeLLM(LLMError("rate limited")), seed=0)
    assert r.outcome == r.outcome_detail == "llm_error" and r.errors and not r.success
    with pytest.raises(ValueError, match="needs an LLM"):
        env.solve(task, [], None, seed=0)


def test_canonical_agent_submits_the_reference_through_the_same_path(tmp_path):
    fail = CheckResult(status="fail", ready=True, details={"ALL": "No module named 'memrl_no_such_library'"},
                       unimportable={"memrl_no_such_library": "ModuleNotFoundError: No module named "
                                                              "'memrl_no_such_library'"})
    env = make_env(tmp_path, agent="canonical", executor=StubExecutor(fail))
    task = [t for t in env.tasks() if t.task_id == "Tiny/4"][0]
    r = env.solve(task, [memory("ignored")], None, seed=0)
    problem = env.problem("Tiny/4")
    assert problem.canonical_solution.strip() in env.executor.calls[0][0]
    assert r.outcome == r.outcome_detail == "env_error" and r.info["missing_libs"] == ["memrl_no_such_library"]
    assert r.errors and r.errors[0].startswith("env_error:")  # counted apart from model failures
    assert r.info["memories_injected"] == 0


@pytest.mark.skipif(not SHARED.is_file(), reason=f"BigCodeBench data not at {SHARED}")
def test_shared_data_loads_whole():
    report = bcb_data.read_jsonl(SHARED)
    assert len(report.problems) == 103 and not report.skipped
    env = bcb_env(data_path=SHARED, part="all", executor=StubExecutor())
    tasks = env.tasks()
    assert len(tasks) == 103 and tasks[0].task_id == "BigCodeBench/15"
    assert all(t.intent and "```" not in t.intent for t in tasks)
