"""One Lifelong-OS episode: set-up script, the agent's turns, evaluation script.

The order is the benchmark's: a fresh system, the task's initialisation script (a failure
there is the environment's fault: outcome ``env_error``), then up to ``max_steps`` turns in
which the agent runs one bash command or finishes, then the task's evaluation script, whose
exit status 0 is success. An unreadable reply costs a turn and comes back as an error message
(the benchmark ends the episode there; the project's protocol lets the agent retry). The
evaluation runs however the turns ended (finish, out of turns, or the model failing).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from memrl.core.records import Step
from memrl.env.base import Policy
from memrl.llm.base import LLMError
from memrl_envs.lifelong_os.prompts import (FINISH, INVALID_HELP, INVALID_MARK, STOP, Action, build_prompt,
                                            format_observation, parse_action)
from memrl_envs.lifelong_os.shell import Shell, ShellError, ShellLost

# outcome classes (EpisodeResult.outcome_detail)
SUCCESS = "success"
FAILED = "failed"              # the evaluation script exited non-zero
EVAL_TIMEOUT = "eval_timeout"  # the evaluation script ran out of time (a failure, as upstream)
ENV_ERROR = "env_error"        # the system could not be set up, or broke down
LLM_ERROR = "llm_error"        # the model call failed; the evaluation still ran
# the agent's own commands broke its sandbox (`kill -9 -1`: the shell is gone; `kill -STOP -1`:
# it stops answering), during one of its commands or, armed by one (`(sleep 5; kill -9 -1) &`),
# during the task's check: the task's failure, not the environment's (no error is recorded)
SANDBOX_KILLED = "sandbox_killed"
SANDBOX_FROZEN = "sandbox_frozen"
# ... and the shared outcome of each (EpisodeResult.outcome)
SHARED = {SUCCESS: "success", FAILED: "failure", EVAL_TIMEOUT: "timeout", ENV_ERROR: "env_error",
          LLM_ERROR: "llm_error", SANDBOX_KILLED: "failure", SANDBOX_FROZEN: "failure"}


@dataclass(frozen=True)
class OsTask:
    """One OS task: what the agent is told and the three scripts that frame its episode."""

    key: str
    instruction: str
    init_script: str
    eval_script: str
    gold_script: str
    skills: tuple[str, ...] = ()


class Actor(Protocol):
    """What the episode loop asks: the next action from the episode so far."""

    def next_action(self, task: OsTask, history: Sequence[Step]) -> tuple[Action, str]:
        """(the parsed action, the raw reply)."""


class GoldPolicy(Policy):
    """The benchmark's ground-truth script as one command, then finish (no LLM)."""

    needs_llm = False
    reads_memories = False

    def next_action(self, task: OsTask, history: Sequence[Step]) -> tuple[Action, str]:
        if not history:
            return Action("bash", task.gold_script), task.gold_script
        return Action(FINISH), FINISH


class LLMPolicy(Policy):
    """The model continues the episode's prompt with one action."""

    STOP = STOP

    def prompt(self, task: OsTask, history: Sequence[Step]) -> str:
        s = self.s
        return build_prompt(task.instruction, self.memories, history, s.command_timeout_s, s.with_example,
                            s.memory_format)

    def next_action(self, task: OsTask, history: Sequence[Step]) -> tuple[Action, str]:
        reply = self.llm.complete(self.prompt(task, history), purpose="act", max_tokens=self.s.max_tokens,
                                  stop=STOP, budget_key="env.max_tokens")
        return parse_action(reply or ""), reply or ""


@dataclass
class EpisodeOutcome:
    """What happened, for EpisodeResult and its info."""

    outcome: str
    success: bool
    steps: list[Step] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    finished: bool = False
    invalid_actions: int = 0
    timeouts: int = 0
    init_exit: int | None = None
    eval_exit: int | None = None
    eval_output: str = ""
    seconds: float = 0.0
    agent_started: bool = False  # the set-up went through and the agent got the task
    agent_failed: bool = False   # the turns ended on a failed model call
    commands: int = 0            # commands of the agent that ran in the system


def play(shell: Shell, task: OsTask, policy: Actor, max_steps: int, timeout_s: float,
         max_chars: int) -> EpisodeOutcome:
    """Run the episode on `shell` (already started, fresh). Never raises for the agent's or the
    model's failures; `ShellError` (the system itself broke: setting up, the task's own scripts)
    is recorded as ``env_error``; the shell lost during the agent's own command, or during the
    check once the agent has run a command (something it left behind can have done it), is the
    task's failure (``sandbox_killed`` / ``sandbox_frozen``), with no error recorded."""
    start = time.monotonic()
    out = EpisodeOutcome(outcome=FAILED, success=False)
    try:
        if task.init_script.strip():
            init = shell.run(task.init_script, timeout_s)
            out.init_exit = init.exit_code
            if not init.ok:
                why = "timed out" if init.timed_out else f"exit code {init.exit_code}"
                out.errors.append(f"initialisation script failed ({why}): {init.output.strip()[-300:]}")
                out.outcome = ENV_ERROR
                return out
        else:
            out.init_exit = 0
        out.agent_started = True
        while len(out.steps) < max_steps:
            try:
                action, reply = policy.next_action(task, out.steps)
            except LLMError as exc:
                out.errors.append(f"LLMError at step {len(out.steps) + 1}: {exc}")
                out.agent_failed = True
                break
            if action.kind == FINISH:
                out.steps.append(Step(action=FINISH, observation="The task's check runs now."))
                out.finished = True
                break
            if action.kind == "invalid":
                out.invalid_actions += 1
                out.steps.append(Step(action=INVALID_MARK + reply.strip()[:300],
                                      observation=f"{INVALID_HELP} ({action.text})"))
                continue
            out.commands += 1
            try:
                result = shell.run(action.text, timeout_s)
            except ShellLost as exc:  # the agent's command took its own sandbox down
                out.steps.append(Step(action=action.text, observation=f"The system stopped responding: {exc}"))
                out.outcome, out.success = (SANDBOX_FROZEN if exc.frozen else SANDBOX_KILLED), False
                return out
            out.timeouts += int(result.timed_out)
            out.steps.append(Step(action=action.text, observation=format_observation(
                result.output, result.exit_code, result.timed_out, result.truncated, timeout_s, max_chars)))
        try:
            check = shell.run(task.eval_script, timeout_s)
        except ShellLost as exc:
            if not out.commands:
                raise  # the agent ran nothing: the system broke on its own (env_error)
            out.eval_output = f"the task's check could not run: {exc}"[:500]
            out.outcome, out.success = (SANDBOX_FROZEN if exc.frozen else SANDBOX_KILLED), False
            return out
        out.eval_exit, out.eval_output = check.exit_code, check.output[-500:]
        out.success = check.ok
        if out.success:
            out.outcome = SUCCESS
        elif check.timed_out:
            out.outcome = EVAL_TIMEOUT
        else:
            out.outcome = LLM_ERROR if out.agent_failed else FAILED
    except ShellError as exc:
        out.errors.append(f"ShellError: {exc}")
        out.outcome, out.success = ENV_ERROR, False
    finally:
        out.seconds = time.monotonic() - start
    return out
