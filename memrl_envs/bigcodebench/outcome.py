"""Outcome classes of one BigCodeBench episode, and how a sandboxed check maps to them.
Each class is the episode's `outcome_detail`; `SHARED` maps it to the shared outcome.

  pass          every test passed (reward 1)
  fail          a test failed or errored, the code crashed, or it killed its own checker
  timeout       the tests ran past the time limit (or the sandbox's wall limit)
  early_exit    the test process ended before the time limit without a result (the code
                called os._exit, crashed the interpreter, or was killed): bigcodebench
                reports that as a timeout, which it was not
  syntax_error  no code in the reply, or code that does not compile (never executed)
  env_error     the environment, not the model: a library the task needs does not import
                here (ModuleNotFoundError/ImportError of a task library), data a library
                needs is not installed (nltk), or the checker itself could not run
  llm_error     the model call failed (recorded as an error; not a benchmark outcome)

env_error and llm_error episodes also carry an entry in `EpisodeResult.errors`, so they are
counted apart from model failures (metrics' `errored_episodes`) and, by default, no memory
is learnt from them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from memrl_envs.bigcodebench.executor import CheckResult

OUTCOMES = ("pass", "fail", "timeout", "early_exit", "syntax_error", "env_error", "llm_error")
SHARED = {"pass": "success", "fail": "failure", "timeout": "timeout", "early_exit": "failure",
          "syntax_error": "failure", "env_error": "env_error", "llm_error": "llm_error"}
ENDED_EARLY = ("exited", "exited_nonzero", "signaled")  # sandbox_runner.ENDINGS but "running"
_NLTK_MISSING = re.compile(r"Resource\s+['\"]?([\w/.-]+?)['\"]?\s+not found")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NO_MODULE = re.compile(r"(?:No module named|Missing optional dependency) '([\w.]+)'")
_REASON_CHARS = 300
_TIMED_OUT = "bigcodebench.eval.utils.TimeoutException"
_FRAME = re.compile(r'File "([^"]+)", line \d+')
_TESTED_MODULE = "__test__.py"   # the file name bigcodebench compiles code + tests under


@dataclass
class Outcome:
    """The class of one episode and a one-line reason a person can act on."""

    kind: str
    reason: str = ""
    failed_tests: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    @property
    def success(self) -> bool:
        return self.kind == "pass"

    @property
    def shared(self) -> str:
        """The episode's outcome in the vocabulary every env shares."""
        return SHARED[self.kind]


def _last_line(trace: str) -> str:
    """The last line that says something (not a rule of asterisks)."""
    lines = [ln.strip() for ln in trace.strip().splitlines() if any(c.isalnum() for c in ln)]
    return lines[-1] if lines else ""


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _REASON_CHARS else text[:_REASON_CHARS - 3] + "..."


def classify(check: CheckResult, time_limit_s: float,
             solution_modules: Iterable[str] = ()) -> Outcome:
    """Map a sandboxed check to an outcome class. `solution_modules` are the top-level modules
    the solution itself imports: a missing one of those that is no task library is the model's
    failure; a missing module that only a library pulls in (pandas -> openpyxl) is not."""
    if check.status == "harness_error":
        return Outcome("env_error", _short(check.error or "the checker could not run"))
    if check.status == "pass":
        return Outcome("pass", "all tests passed")
    if check.status == "timeout" and check.test_process in ENDED_EARLY:
        return Outcome("early_exit", _short("the test process ended " + _when(check.test_seconds)
                                            + f"without a result ({_how(check)}): the code ended or crashed it"))
    if check.status == "timeout" or (check.status == "no_result" and check.sandbox_timed_out):
        return Outcome("timeout", f"tests did not finish within the time limit ({time_limit_s:g} s)")
    if check.status == "no_result":
        if not check.ready:
            return Outcome("env_error", _short("the checker did not start in the sandbox: "
                                               + (_last_line(check.stderr_tail) or f"exit {check.returncode}")))
        how = f"signal {-check.returncode}" if check.returncode is not None and check.returncode < 0 \
            else f"exit {check.returncode}"
        return Outcome("fail", _short(f"the checker process died before reporting ({how}); "
                                      "the code under test killed or crashed it"))
    failed = sorted(check.details)
    if any(_last_line(t).startswith(_TIMED_OUT) for t in check.details.values()):
        # the checker's alarm interrupted a test: it records that as a failing test
        return Outcome("timeout", f"a test ran past the time limit ({time_limit_s:g} s)",
                       failed_tests=failed)
    if check.unimportable:
        names = sorted(check.unimportable)
        first = check.unimportable[names[0]]
        return Outcome("env_error", _short(f"task library not importable here: {', '.join(names)} ({first})"),
                       failed_tests=failed, missing=names)
    indirect = _missing_dependencies(check.details.values(), solution_modules)
    if indirect:
        return Outcome("env_error", _short(f"a library the task uses needs a module that is not "
                                           f"installed: {', '.join(indirect)}"),
                       failed_tests=failed, missing=indirect)
    nltk = _nltk_resources(check.details.values())
    if nltk:
        return Outcome("env_error", _short(f"nltk data not installed: {', '.join(nltk)}"),
                       failed_tests=failed, missing=[f"nltk:{r}" for r in nltk])
    if not failed:
        return Outcome("fail", "the checker reported failure without details")
    name = failed[0]
    where = "loading the code" if name == "ALL" else name
    return Outcome("fail", _short(f"{where}: {_last_line(check.details[name]) or 'failed'}"
                                  + (f" (+{len(failed) - 1} more)" if len(failed) > 1 else "")),
                   failed_tests=failed)


def _when(seconds: float | None) -> str:
    return f"after {seconds:.2f} s " if seconds is not None else "before the time limit "


def _how(check: CheckResult) -> str:
    code = check.test_exitcode
    if check.test_process == "signaled":
        how = f"signal {-code}" if code is not None and code < 0 else "a signal"
        if check.oom_kills:
            how += f"; the sandbox's memory cap killed {check.oom_kills} process(es)"
        return how
    return f"exit code {code}" if code is not None else "an exit"


def _missing_dependencies(traces: Iterable[str], solution_modules: Iterable[str]) -> list[str]:
    """Modules that a library (not the code under test) failed to import: the innermost real
    frame of the trace lies outside the tested module and the solution does not import the
    module itself. Traces without frames (an import at the top of the code) do not count."""
    own = set(solution_modules)
    found: list[str] = []
    for trace in traces:
        frames = [f for f in _FRAME.findall(trace) if not f.startswith("<")]
        if not frames or frames[-1] == _TESTED_MODULE:
            continue
        for m in _NO_MODULE.finditer(trace):
            top = m.group(1).split(".")[0]
            if top not in own and top not in found:
                found.append(top)
    return found


def _nltk_resources(traces: Iterable[str]) -> list[str]:
    found: list[str] = []
    for trace in traces:
        if "nltk" not in trace.lower() or "not found" not in trace:
            continue
        for m in _NLTK_MISSING.finditer(_ANSI.sub("", trace)):
            if m.group(1) not in found:
                found.append(m.group(1))
    return found


def outcome_counts(kinds: Sequence[str]) -> dict[str, int]:
    """Counts per outcome class, every class present (zeros included), in a fixed order."""
    counts = {k: 0 for k in OUTCOMES}
    for k in kinds:
        counts[k] = counts.get(k, 0) + 1
    return counts
