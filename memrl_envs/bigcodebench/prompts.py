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

import re
from typing import Literal, Sequence

from memrl.core.records import RetrievedMemory
from memrl.env.memory_block import format_memories as _memory_block
from memrl.memory.writer import SCRIPT_MARK, WRONG_MARK
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
# where the task text of a stored memory ends: the marker after it in the official success
# or failure layout (memrl.memory.writer OFFICIAL_*), else the first of memrl's own layout's
# next line and a blank line
_OFFICIAL_TASK_ENDS = (SCRIPT_MARK, WRONG_MARK)
_OTHER_TASK_ENDS = ("\nOutcome: ", "\n\n")
_TASK_LINE = re.compile(r"^Task:[ \t]*", re.M)
# the official failure body: the text after a line that starts with "Reflection:", else all
_REFLECTION = re.compile(r"(?is)(?:^|\n)reflection\s*:\s*(.*)$")


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
    if memory_format == "official":
        return official_memory_block(memories, memory_chars, official_header_bug)
    return _memory_block(memories, max_chars_each=2500, max_intent_chars=300)


def split_task_header(experience: str) -> tuple[str, str] | None:
    """(task text, the rest) of a stored memory: the text of its first `Task:` line up to the
    end of the header (the marker that follows it in the official or memrl layout, else the
    first blank line); the rest is what follows the header when the text starts with it, else
    the whole text. None: no `Task:` line."""
    m = _TASK_LINE.search(experience)
    if m is None:
        return None
    tail = experience[m.end():]
    cut, end = _task_end(tail)
    rest = tail[cut + len(end):] if end == "\n\n" else tail[cut:]
    return tail[:cut].strip(), (rest.strip() if m.start() == 0 else experience.strip())


def _task_end(tail: str) -> tuple[int, str]:
    """(position, marker) where the task text at the start of `tail` ends; (len, "") at none."""
    for end in _OFFICIAL_TASK_ENDS:
        if (cut := tail.find(end)) >= 0:
            return cut, end
    found = [(cut, end) for end in _OTHER_TASK_ENDS if (cut := tail.find(end)) >= 0]
    return min(found) if found else (len(tail), "")


def own_task_text(memory: RetrievedMemory) -> str:
    """The memory's own task (from its text's `Task:` header; the official code shows the
    stored task of the memory itself, never the key it was filed under), else its intent."""
    header = split_task_header(memory.experience)
    return header[0] if header and header[0] else memory.intent.strip()


def official_entry(memory: RetrievedMemory, header_bug: bool) -> str:
    """One memory as a typed entry: its kind, its own task, its body ("" for an empty memory).
    A failure's body is the text after a `Reflection:` line, else the whole text (the stored
    official failure has no such line: all of it). A success's body is its text without the
    `Task:` header, or, `header_bug` (the official code's header pattern, written with doubled
    backslashes, never matches), the whole text, header included."""
    text = memory.experience.strip()
    if not text:
        return ""
    task = own_task_text(memory)
    if memory.success is False:
        m = _REFLECTION.search(text)
        body = (m.group(1) if m else text).strip()
        return f"[Memory kind] failed attempt, with reflection\n[Its task]\n{task}\n\n[Reflection]\n{body}".strip()
    header = None if header_bug else split_task_header(text)
    body = header[1] if header is not None else text
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
