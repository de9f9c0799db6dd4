"""The code-writing prompt: the instruction, past experiences (injected memories), the task,
and an opening ```python fence, so a chat model answers with a code block and a base model
(text completion) simply continues with code. The complete split puts the function header
inside that fence. What changes least comes first (the instruction is the same for every
task, the memories for every task that retrieves them), so a provider's prompt cache, which
matches a prompt's prefix, can serve it.

Two displays of the memories (`env.memory_format`): `memrl` (the block every text env shares,
memrl.env.memory_block) and `official`, the structure of the official runner (MemTensor/MemRL
@ 7c3beba, memrl/run/bcb_runner.py `_format_memory_context` and `_coerce_bcb_memory_content`)
in the project's own words: the memories in selection order, each as a typed entry (its kind,
its own task text, then its body), each entry cut to an even share of `memory_chars`.
"""

from __future__ import annotations

from typing import Literal, Sequence

from memrl.core.records import RetrievedMemory
from memrl.env.displays import display
from memrl_envs.bigcodebench.data import BCBProblem

_INSTRUCT = ("Write one self-contained Python script that solves the task below: the imports it "
             "needs, then the function exactly as the task specifies it. Answer with the code "
             "in a single ```python block.")
_COMPLETE = ("Complete the Python function below so that it does what its docstring says; keep "
             "the imports and the signature. Answer with the whole function in a single "
             "```python block.")
FENCE = "```python\n"

# the official display (memory_format=official)
MemoryFormat = Literal["memrl", "official"]
OFFICIAL_MEMORY_CHARS = 2000  # run/run_bcb.py: memory_budget_tokens (2000, used as characters)
OFFICIAL_OPEN = "# Code from similar earlier tasks (memory)"
OFFICIAL_NOTE = ("These are references, not answers: a successful procedure shows an approach "
                 "that passed its tests, a failed attempt comes with a reflection on what to avoid. "
                 "Work out the present task on its own terms.")
OFFICIAL_CUT = "..."
OUTCOME_WORDS = {True: "SUCCESS", False: "FAILURE", None: "UNKNOWN"}


def task_intent(problem: BCBProblem, split: str, whole_prompt: bool = False) -> str:
    """What retrieval embeds: the natural-language task (instruct prompt without its code
    header; for the complete split, the same description). `whole_prompt`: the split's
    prompt as it is (what the official code embeds: its runner's get_prompt)."""
    if whole_prompt:
        return (problem.instruct_prompt if split == "instruct" else problem.complete_prompt).strip()
    text = problem.instruct_prompt or problem.complete_prompt
    head, sep, _ = text.partition("You should write self-contained code starting with")
    return (head if sep else text).strip()


def build_prompt(problem: BCBProblem, split: str, memories: Sequence[RetrievedMemory], *,
                 memory_format: MemoryFormat = "memrl", memory_chars: int = OFFICIAL_MEMORY_CHARS,
                 official_header_bug: bool = False) -> str:
    """Instruction, memories, task; ends inside an opened ```python fence. `memory_format`,
    `memory_chars`, `official_header_bug`: how the memories are shown (`memory_block`)."""
    parts = [_COMPLETE if split == "complete" else _INSTRUCT]
    block = memory_block(memories, memory_format, memory_chars=memory_chars,
                         official_header_bug=official_header_bug)
    if block:
        parts.append(block)
    if split == "complete":
        return "\n\n".join(parts) + "\n\n" + FENCE + completion_prefix(problem, split)
    parts.append("Task:\n" + problem.instruct_prompt.strip())
    return "\n\n".join(parts) + "\n\nSolution:\n" + FENCE


def completion_prefix(problem: BCBProblem, split: str) -> str:
    """The code the prompt already wrote inside the fence (a bare continuation follows it)."""
    return problem.complete_prompt.rstrip("\n") + "\n" if split == "complete" else ""


def memory_block(memories: Sequence[RetrievedMemory], memory_format: MemoryFormat = "memrl", *,
                 memory_chars: int = OFFICIAL_MEMORY_CHARS, official_header_bug: bool = False) -> str:
    """The injected memories as `memory_format` shows them; "" when there are none."""
    show = display("bigcodebench", memory_format)  # memrl.env.displays
    if memory_format == "official":
        return show(memories, memory_chars, official_header_bug)
    return show(memories, max_chars_each=2500, max_intent_chars=300)


def own_task_text(memory: RetrievedMemory) -> str:
    """The memory's own task (the one its record names: the official code shows the stored
    task of the memory itself, never the key it was filed under), else its intent."""
    task = memory.parts().task
    return task.strip() if task and task.strip() else memory.intent.strip()


def official_entry(memory: RetrievedMemory, header_bug: bool) -> str:
    """One memory as a typed entry: its kind, its own task, its body ("" for an empty memory).
    A failure's body is its text from its reflection on (the official code's body: the text
    after a `Reflection:` line, which memrl's layout writes), else the whole text (the official
    failure layout has no such line). A success's body is its text after the task header, or,
    `header_bug` (the official code's header pattern, written with doubled backslashes, never
    matches), the whole text, header included."""
    text = memory.experience.strip()
    if not text:
        return ""
    parts = memory.parts()
    task = own_task_text(memory)
    if memory.success is False:
        body = (parts.from_note if parts.from_note is not None and parts.layout != "official" else text).strip()
        return f"[Memory kind] failed attempt, with reflection\n[Its task]\n{task}\n\n[Reflection]\n{body}".strip()
    body = text if header_bug or parts.task is None else parts.rest.strip()
    return f"[Memory kind] successful procedure\n[Its task]\n{task}\n\n[How it was solved]\n{body}".strip()


def official_memory_block(memories: Sequence[RetrievedMemory], memory_chars: int = OFFICIAL_MEMORY_CHARS,
                          header_bug: bool = False) -> str:
    """The official layout: a heading and a note, then per memory (selection order, numbered
    from 1; an empty one keeps its number) a line with its number and outcome and its entry,
    each entry cut to `memory_chars // len(memories)` characters (its head, then "...")."""
    if not memories:
        return ""
    cap = memory_chars // len(memories)
    lines = [OFFICIAL_OPEN, OFFICIAL_NOTE, ""]
    for i, mem in enumerate(memories, 1):
        entry = official_entry(mem, header_bug)
        if not entry:
            continue
        if len(entry) > cap:
            entry = entry[:cap] + OFFICIAL_CUT
        lines += [f"## Memory {i} [{OUTCOME_WORDS.get(mem.success, 'UNKNOWN')}]", entry, ""]
    return "\n".join(lines).rstrip()
