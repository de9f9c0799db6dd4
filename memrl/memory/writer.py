"""Experience writing (docs/design.md §4 "Write"): a success becomes a short reusable plan plus the
trajectory; a failure becomes a reflection plus the failed attempt. The prompts are plain
text that ends where the model should continue, so base models and chat models both work.

Two layouts (`memory.writer.layout`):
- `memrl` (default): the transcript as `> action` / observation lines, cut in the middle to
  `max_trajectory_chars`; the plan and the reflection in at most six lines, stop "\n\n";
  the reflection sees the task and the attempt, the plan sees the task too.
- `official` (MemTensor/MemRL @ 7c3beba, service/updater.py and builders.py): the episode as the
  env hands it over (`EpisodeResult.memory_trajectory`: ALFWorld the whole dialogue, BigCodeBench
  the raw reply, HLE question + solution, Lifelong the chat history), never cut; the script
  prompt shows the trajectory only, the reflection prompt the task and the trajectory; no stop
  sequence; the script at the model's temperature, the reflection at `reflection_temperature`
  (official 0.3); the stored text is `Task: ... / SCRIPT: ... / TRAJECTORY: ...` or
  `TASK REFLECTION: / Task: ... / What went wrong: ... / Failed approach: ...` with the task text
  cut to `max_task_chars` (4096).

Either way the stored text comes with its record (memrl.core.memory_record: the layouts'
text and where each part lies in it), returned as `record` and kept in the entry, so a
display shows the parts without reading the text apart. A script call that fails leaves the success without a memory,
  a reflection call that fails stores a placeholder reflection (both as the official code does;
  the error is recorded either way).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from memrl.core.memory_record import memrl_text, official_text
from memrl.core.records import EpisodeResult
from memrl.llm.base import LLMError, ModelProbe

if TYPE_CHECKING:
    from memrl.llm.client import EpisodeLLM

SCRIPT_PROMPT = """The attempt below solved its task. Distil it into advice for solving similar tasks later.

Task: {intent}
Attempt:
{trajectory}

Write a general plan of three to five numbered steps. Describe kinds of objects and places rather than \
numbered instances, and keep each step to one line.
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
# what the preflight's writer call shows as the attempt (memrl.control.preflight)
SAMPLE_ATTEMPT = ("> look\nYou are in the middle of a room. Nothing happens.\n"
                  "> inventory\nYou are not carrying anything.")


# layout=official: the prompts (the project's own wording of the official structure) and the
# stored texts (the official section headers, which the official displays split on)
OFFICIAL_SCRIPT_PROMPT = """Read the trajectory below and write a short high-level script of how it went about \
its task: three to five steps at most, general enough to reuse on similar tasks but specific enough to act on, \
naming the strategy and the key decisions rather than every action.

Trajectory:
{trajectory}

High-level script:"""

OFFICIAL_REFLECTION_PROMPT = """Task: {intent}

Failed trajectory:
{trajectory}

This attempt failed. Say what went wrong and how to do better on similar tasks: the wrong \
assumptions, the steps to change, and what to avoid next time.

Reflection:"""

OFFICIAL_NO_REFLECTION = "Reflection not available (the model call failed)."
LAYOUTS = ("memrl", "official")


@dataclass
class ExperienceWriter:
    max_trajectory_chars: int = 3000
    max_tokens: int = 160
    include_trajectory: bool = True
    layout: str = "memrl"
    reflection_temperature: float | None = None  # None: the model's temperature
    max_task_chars: int = 4096  # layout=official: the task text in the stored memory

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"memory.writer.layout: {' | '.join(LAYOUTS)} (got {self.layout!r})")

    def probe(self, intent: str) -> ModelProbe:
        """A reflection call like the ones `write` makes (memrl.control.preflight)."""
        if self.layout == "official":
            return ModelProbe(role="llm", purpose="write-reflection",
                              prompt=OFFICIAL_REFLECTION_PROMPT.format(intent=intent, trajectory=SAMPLE_ATTEMPT),
                              answer_tokens=self.max_tokens, budget_key=BUDGET_KEY)
        return ModelProbe(role="llm", purpose="write-reflection",
                          prompt=REFLECTION_PROMPT.format(intent=intent, trajectory=SAMPLE_ATTEMPT),
                          answer_tokens=self.max_tokens, budget_key=BUDGET_KEY, stop=("\n\n",))

    def write(self, intent: str, result: EpisodeResult, llm: "EpisodeLLM | None") -> dict:
        """Returns {"experience", "kind", "error", "record"}; a failed model call still yields an entry
        (layout=official: `experience` is None when a success's script call failed)."""
        if self.layout == "official":
            return self._write_official(intent, result, llm)
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
        trajectory = traj if self.include_trajectory else ""
        if result.success:
            notes, note = (f"Plan:\n1. {summary}", f"1. {summary}") if summary else ("", None)
            heading, note_kind = "Successful trajectory:", "plan"
        else:
            notes, note = (f"Reflection: {summary}", summary) if summary else ("", None)
            heading, note_kind = "Failed attempt:", "reflection"
        experience, record = memrl_text(intent, solved=bool(result.success), notes=notes, note=note,
                                        note_kind=note_kind, heading=heading, trajectory=trajectory)
        return {"experience": experience, "kind": kind, "error": error, "record": record.to_dict()}

    def official_trajectory(self, result: EpisodeResult) -> str:
        """What the official writer is given: the env's own text of the episode, or (an env
        that gives none) the transcript uncut."""
        if result.memory_trajectory is not None:
            return result.memory_trajectory
        return format_trajectory(result, max_chars=10**12)

    def _write_official(self, intent: str, result: EpisodeResult, llm: "EpisodeLLM | None") -> dict:
        traj = self.official_trajectory(result)
        task = intent[: self.max_task_chars]
        kind = "script" if result.success else "reflection"
        text, error = "", None
        if llm is not None:
            if result.success:
                prompt, temperature = OFFICIAL_SCRIPT_PROMPT.format(trajectory=traj), None
            else:
                prompt = OFFICIAL_REFLECTION_PROMPT.format(intent=task, trajectory=traj)
                temperature = self.reflection_temperature
            try:
                text = llm.complete(prompt, purpose=f"write-{kind}", max_tokens=self.max_tokens,
                                    temperature=temperature, budget_key=BUDGET_KEY).strip()
            except LLMError as exc:
                error = f"writer: {exc}"
            if error is None and not text:
                error = f"writer: the model's {kind} was empty"
        if result.success and error is not None:  # the official code files no memory for this success
            return {"experience": None, "kind": kind, "error": error}
        note = text if result.success else (text or OFFICIAL_NO_REFLECTION)
        experience, record = official_text(task, note, traj, solved=bool(result.success),
                                           actions=result.memory_trajectory is None)
        return {"experience": experience, "kind": kind, "error": error, "record": record.to_dict()}
