"""The code-writing prompt: the instruction, past experiences (injected memories), the task,
and an opening ```python fence, so a chat model answers with a code block and a base model
(text completion) simply continues with code. The complete split puts the function header
inside that fence. What changes least comes first (the instruction is the same for every
task, the memories for every task that retrieves them), so a provider's prompt cache, which
matches a prompt's prefix, can serve it.
"""

from __future__ import annotations

from typing import Sequence

from memrl.records import RetrievedMemory
from memrl_envs.memory_block import format_memories as _memory_block

from .loader import BCBProblem

_INSTRUCT = ("Write one self-contained Python script that solves the task below: the imports it "
             "needs, then the function exactly as the task specifies it. Answer with the code "
             "in a single ```python block.")
_COMPLETE = ("Complete the Python function below so that it does what its docstring says; keep "
             "the imports and the signature. Answer with the whole function in a single "
             "```python block.")
FENCE = "```python\n"


def task_intent(problem: BCBProblem, split: str, whole_prompt: bool = False) -> str:
    """What retrieval embeds: the natural-language task (instruct prompt without its code
    header; for the complete split, the same description). `whole_prompt`: the split's
    prompt as it is (what the official code embeds: its runner's get_prompt)."""
    if whole_prompt:
        return (problem.instruct_prompt if split == "instruct" else problem.complete_prompt).strip()
    text = problem.instruct_prompt or problem.complete_prompt
    head, sep, _ = text.partition("You should write self-contained code starting with")
    return (head if sep else text).strip()


def build_prompt(problem: BCBProblem, split: str, memories: Sequence[RetrievedMemory]) -> str:
    """Instruction, memories, task; ends inside an opened ```python fence."""
    parts = [_COMPLETE if split == "complete" else _INSTRUCT]
    block = _memory_block(memories, max_chars_each=2500, max_intent_chars=300)
    if block:
        parts.append(block)
    if split == "complete":
        return "\n\n".join(parts) + "\n\n" + FENCE + completion_prefix(problem, split)
    parts.append("Task:\n" + problem.instruct_prompt.strip())
    return "\n\n".join(parts) + "\n\nSolution:\n" + FENCE


def completion_prefix(problem: BCBProblem, split: str) -> str:
    """The code the prompt already wrote inside the fence (a bare continuation follows it)."""
    return problem.complete_prompt.rstrip("\n") + "\n" if split == "complete" else ""
