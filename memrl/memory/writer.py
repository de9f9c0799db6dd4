"""Experience writing (docs/design.md §4 "Write"): a success becomes a short reusable plan plus the
trajectory; a failure becomes a reflection plus the failed attempt. The prompts are plain
text that ends where the model should continue, so base models and chat models both work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from memrl.llm.base import LLMError, ModelProbe
from memrl.records import EpisodeResult

if TYPE_CHECKING:
    from memrl.llm.client import EpisodeLLM

SCRIPT_PROMPT = """The attempt below solved its task. Distil it into advice for solving similar tasks later.

Task: {intent}
Attempt:
{trajectory}

Write a general plan of three to five numbered steps. Describe kinds of objects and places rather than numbered instances, and keep each step to one line.
Plan:
1."""

REFLECTION_PROMPT = """The attempt below did not solve its task. Work out what to change next time.

Task: {intent}
Attempt:
{trajectory}

In two or three sentences, say what went wrong and what to do differently on a similar task.
Reflection:"""


def format_trajectory(result: EpisodeResult, max_chars: int) -> str:
    """The episode as '> action / observation' lines, shortened in the middle if too long."""
    text = "\n".join(f"> {s.action}\n{s.observation}" for s in result.transcript)
    if len(text) <= max_chars:
        return text
    half = max_chars // 2
    return text[:half] + "\n[...]\n" + text[-half:]


def _first_lines(text: str, max_lines: int) -> str:
    lines = [ln.rstrip() for ln in text.strip().splitlines() if ln.strip()]
    return "\n".join(lines[:max_lines])


# the writer's answer budget, as the config spells it (named by a budget that ran out)
BUDGET_KEY = "memory.writer.max_tokens"
# what the preflight's writer call shows as the attempt (memrl.preflight)
SAMPLE_ATTEMPT = "> look\nYou are in the middle of a room. Nothing happens.\n> inventory\nYou are not carrying anything."


@dataclass
class ExperienceWriter:
    max_trajectory_chars: int = 3000
    max_tokens: int = 160
    include_trajectory: bool = True

    def probe(self, intent: str) -> ModelProbe:
        """A reflection call like the ones `write` makes (memrl.preflight)."""
        return ModelProbe(role="llm", purpose="write-reflection",
                          prompt=REFLECTION_PROMPT.format(intent=intent, trajectory=SAMPLE_ATTEMPT),
                          answer_tokens=self.max_tokens, budget_key=BUDGET_KEY, stop=("\n\n",))

    def write(self, intent: str, result: EpisodeResult, llm: "EpisodeLLM | None") -> dict:
        """Returns {"experience", "kind", "error"}; a failed model call still yields an entry."""
        traj = format_trajectory(result, self.max_trajectory_chars)
        kind = "script" if result.success else "reflection"
        prompt = (SCRIPT_PROMPT if result.success else REFLECTION_PROMPT).format(
            intent=intent, trajectory=traj or "(no actions)")
        summary, error = "", None
        if llm is not None:
            try:
                summary = llm.complete(prompt, purpose=f"write-{kind}", max_tokens=self.max_tokens,
                                       stop=("\n\n",), budget_key=BUDGET_KEY)
            except LLMError as exc:
                error = f"writer: {exc}"
        summary = _first_lines(summary, 6)
        if llm is not None and error is None and not summary:
            error = f"writer: the model's {kind} was empty"
        if result.success:
            head = f"Task: {intent}\nOutcome: solved\nPlan:\n1. {summary}" if summary else \
                f"Task: {intent}\nOutcome: solved"
            tail = "Successful trajectory:"
        else:
            head = f"Task: {intent}\nOutcome: failed\nReflection: {summary}" if summary else \
                f"Task: {intent}\nOutcome: failed"
            tail = "Failed attempt:"
        experience = head + (f"\n{tail}\n{traj}" if self.include_trajectory and traj else "")
        return {"experience": experience, "kind": kind, "error": error}
