"""One Lifelong-DB episode: the turn loop, the two policies (LLM, gold), and the verdict.

The loop is the same for every policy: the policy writes a reply, ``parse_action`` reads it,
SQL runs in the episode's database and its output (shortened to ``observation_max_chars``)
is the next observation; an unreadable reply is answered with an error and costs its turn;
``Action: Answer`` or the turn limit ends the episode. The verdict is then taken on the live
database (table hash) or on the final answer (see ``db_scoring``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from memrl.core.records import Step
from memrl.env.base import Policy
from memrl.llm.base import LLMError
from memrl_envs.lifelong_db.data import DbTask
from memrl_envs.lifelong_db.databases import EpisodeDatabase, ExecResult
from memrl_envs.lifelong_db.prompts import INVALID_HELP, STOP, Turn, build_prompt, parse_action
from memrl_envs.lifelong_db.scoring import direct_answer_matches, hash_matches

# Outcome classes (EpisodeResult.outcome_detail).
CORRECT = "correct"
WRONG_ANSWER = "wrong_answer"      # SELECT task: a final answer that does not match
NO_ANSWER = "no_answer"            # SELECT task: no final answer within the turn limit
TABLE_MISMATCH = "table_mismatch"  # change task: the table's hash differs
ENV_ERROR = "env_error"            # the database could not be set up / read / cleaned
LLM_ERROR = "llm_error"            # the model call failed
# ... and the shared outcome of each (EpisodeResult.outcome)
SHARED = {CORRECT: "success", WRONG_ANSWER: "failure", NO_ANSWER: "failure",
          TABLE_MISMATCH: "failure", ENV_ERROR: "env_error", LLM_ERROR: "llm_error"}


class Actor(Protocol):
    def reply(self, task: DbTask, history: Sequence[Turn], last: ExecResult | None) -> str:
        """The next reply text (raises LLMError when the model fails)."""


class LLMPolicy(Policy):
    """The LLM agent: the plain-text prompt, one completion per turn."""

    STOP = STOP

    def prompt(self, task: DbTask, history: Sequence[Turn]) -> str:
        s = self.s
        return build_prompt(task, self.memories, history, s.prompt_rows, s.with_example, s.memory_format)

    def reply(self, task: DbTask, history: Sequence[Turn], last: ExecResult | None) -> str:
        return self.llm.complete(self.prompt(task, history), purpose="act", max_tokens=self.s.max_tokens,
                                 stop=STOP, budget_key="env.max_tokens")


class GoldPolicy(Policy):
    """The oracle: the ground-truth SQL as an Operation, then the full (unshortened) output
    of that statement as the final answer (any answer for a change task). No LLM."""

    needs_llm = False
    reads_memories = False

    def reply(self, task: DbTask, history: Sequence[Turn], last: ExecResult | None) -> str:
        if not history:
            return f"Action: Operation\n```sql\n{task.gold_sql}\n```"
        answer = last.text if (last is not None and task.answer_type == "direct") else "done"
        return f"Action: Answer\nFinal Answer: {answer}"


@dataclass
class EpisodeOutcome:
    success: bool
    outcome: str
    turns: list[Turn] = field(default_factory=list)
    final_answer: str | None = None
    errors: list[str] = field(default_factory=list)
    table_hash: str | None = None
    sql_errors: int = 0
    timeouts: int = 0
    seconds: float = 0.0

    def steps(self) -> list[Step]:
        """The transcript for records and memories: the SQL (or the answer) and its output."""
        out = []
        for t in self.turns:
            if t.action.kind == "sql":
                out.append(Step(action=t.action.text, observation=t.observation))
            elif t.action.kind == "answer":
                out.append(Step(action=f"Final Answer: {t.action.text}", observation=t.observation))
            else:
                out.append(Step(action=t.raw.strip()[:300], observation=t.observation))
        return out


def shorten(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return text[:max_chars] + f" ... [output cut: {len(text)} characters in all]"


def play(db: EpisodeDatabase, task: DbTask, policy: Actor, max_steps: int,
         observation_max_chars: int) -> EpisodeOutcome:
    """Run the turn loop on a set-up database and judge the result (the caller owns ``db``)."""
    started = time.monotonic()
    out = EpisodeOutcome(success=False, outcome=NO_ANSWER)
    last: ExecResult | None = None
    llm_failed = False
    while len(out.turns) < max_steps:
        try:
            reply = policy.reply(task, out.turns, last)
        except LLMError as exc:
            out.errors.append(f"LLMError at step {len(out.turns) + 1}: {exc}")
            llm_failed = True
            break
        action = parse_action(reply)
        if action.kind == "answer":
            out.final_answer = action.text
            out.turns.append(Turn(action, reply, "Answer received."))
            break
        if action.kind == "invalid":
            out.turns.append(Turn(action, reply, INVALID_HELP))
            continue
        last = db.execute(action.text)
        if not last.ok:
            out.sql_errors += 1
        out.turns.append(Turn(action, reply, shorten(last.text, observation_max_chars)))
    out.timeouts = db.timeouts
    if llm_failed:
        out.outcome = LLM_ERROR
    elif task.answer_type == "md5":
        out.table_hash = db.table_hash()
        out.success = hash_matches(out.table_hash, task.md5 or "")
        out.outcome = CORRECT if out.success else TABLE_MISMATCH
    else:
        answer = out.final_answer if out.final_answer is not None else ""
        out.success = direct_answer_matches(answer, task.direct_rows or ())
        if out.success:
            out.outcome = CORRECT
        else:
            out.outcome = WRONG_ANSWER if out.final_answer is not None else NO_ANSWER
    out.seconds = time.monotonic() - started
    return out
