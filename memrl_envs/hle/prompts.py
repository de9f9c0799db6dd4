"""What the solver model is asked: a system prompt per answer type (explanation, final answer,
confidence), the injected memories, the question and its image; and how its reply is read.

Messages are chat messages. Rendered for the embedded base model (contents joined by blank
lines) the user message comes last and ends with the question, so it reads as one document.

Where the memories go (`env.memory_format`):
- "memrl" (default): numbered notes at the top of the user message, each clipped to
  `memory_max_chars`.
- "official" (MemTensor/MemRL memrl/run/hle_runner.py `_build_memory_context` and
  `_build_messages`): a system message of their own between the answer-format system message
  and the user message; the memories of successes first, then those of failures (success
  False or unknown), each group under its heading and in selection order, each memory's whole
  stored experience (its own task text, never the key's), joined by blank lines.
"""

from __future__ import annotations

import re
from typing import Sequence

from memrl.core.records import RetrievedMemory
from memrl.env.displays import display, formats
from memrl.llm.base import Content, ImagePart, TextPart
from memrl_envs.hle.data import HLEQuestion

EXACT_SYSTEM = (
    "You will be given a hard exam question. Think it through, then commit to a single final "
    "answer. Reply in exactly this format:\n"
    "Explanation: <the reasoning that leads to your answer>\n"
    "Exact Answer: <only the final answer, as short as it can be while complete>\n"
    "Confidence: <how likely it is that your answer is right, from 0% to 100%>"
)

CHOICE_SYSTEM = (
    "You will be given a hard multiple-choice exam question. Think it through, then pick "
    "exactly one of the options. Reply in exactly this format:\n"
    "Explanation: <the reasoning that leads to your choice>\n"
    "Answer: <the letter of the option you choose>\n"
    "Confidence: <how likely it is that your choice is right, from 0% to 100%>"
)

MEMORY_OPEN = ("Notes from earlier attempts at similar questions. Use what applies; an attempt "
               "marked as failed shows what not to repeat.")
MEMORY_CLOSE = "End of notes."

# memory_format=official: a heading per group (the official's structure, the project's words)
OFFICIAL_SUCCESS_HEADING = "=== Memories of questions solved before ==="
OFFICIAL_FAILURE_HEADING = "=== Memories of failed attempts (do not repeat them) ==="
MEMORY_FORMATS = formats("hle")


def system_prompt(answer_type: str) -> str:
    return CHOICE_SYSTEM if answer_type == "multipleChoice" else EXACT_SYSTEM


def _clip(text: str, max_chars: int) -> str:
    text = text.strip()
    if len(text) <= max_chars:
        return text
    half = max_chars // 2
    return text[:half].rstrip() + "\n[...]\n" + text[-half:].lstrip()


def format_memories(memories: Sequence[RetrievedMemory], max_chars: int = 4000) -> str:
    """The block of injected memories (each clipped to `max_chars`); "" when there are none."""
    if not memories:
        return ""
    parts = [MEMORY_OPEN]
    for i, mem in enumerate(memories, 1):
        parts.append(f"--- Note {i} ---\n{_clip(mem.experience, max_chars)}")
    parts.append(MEMORY_CLOSE)
    return "\n\n".join(parts)


def format_official_memories(memories: Sequence[RetrievedMemory]) -> str:
    """memory_format=official: the memories of successes, then of failures, each group under
    its heading in selection order, every experience whole; "" when there are none."""
    wins = [m.experience for m in memories if m.success is True]
    losses = [m.experience for m in memories if m.success is not True]
    sections = []
    if wins:
        sections.append(OFFICIAL_SUCCESS_HEADING + "\n" + "\n\n".join(wins))
    if losses:
        sections.append(OFFICIAL_FAILURE_HEADING + "\n" + "\n\n".join(losses))
    return "\n\n".join(sections)


def _user_message(q: HLEQuestion, block: str, with_image: bool) -> Content:
    """The question (after the memrl memory block, if any), with its image if sent."""
    text = (block + "\n\n" if block else "") + f"Question:\n{q.question.strip()}"
    if q.has_image and with_image:
        text += "\n\n(The image the question refers to is attached.)"
        return (TextPart(text), ImagePart(q.image))
    return text


def build_messages(q: HLEQuestion, memories: Sequence[RetrievedMemory], with_image: bool = True,
                   memory_max_chars: int = 4000, memory_format: str = "memrl") -> list[tuple[str, Content]]:
    """memrl: [(system, instructions), (user, memories + question [+ image])];
    official: [(system, instructions), (system, memories), (user, question [+ image])], the
    memory message only when there are memories (module doc)."""
    show = display("hle", memory_format)  # memrl.env.displays
    head: list[tuple[str, Content]] = [("system", system_prompt(q.answer_type))]
    if memory_format == "official":
        block = show(memories)
        if block:
            head.append(("system", block))
        return head + [("user", _user_message(q, "", with_image))]
    return head + [("user", _user_message(q, show(memories, memory_max_chars), with_image))]


_ANSWER = re.compile(r"^\s*\**\s*(?:exact\s+answer|final\s+answer|answer)\s*\**\s*:\s*(.+?)\s*$",
                     re.I | re.M)
_CONFIDENCE = re.compile(r"confidence\s*\**\s*:\s*\**\s*(\d{1,3}(?:\.\d+)?)\s*%?", re.I)


def parse_answer(response: str) -> str | None:
    """The final answer the response states (its last 'Answer:' line), if any."""
    found = _ANSWER.findall(response or "")
    if not found:
        return None
    answer = found[-1].strip().strip("*").strip()
    return answer or None


def parse_confidence(response: str) -> float | None:
    """The stated confidence in [0, 100], if any."""
    found = _CONFIDENCE.findall(response or "")
    if not found:
        return None
    value = float(found[-1])
    return value if 0.0 <= value <= 100.0 else None


def gold_response(q: HLEQuestion) -> str:
    """The oracle agent's reply: the reference answer in the solver's format."""
    label = "Answer" if q.answer_type == "multipleChoice" else "Exact Answer"
    return f"Explanation: This is the reference answer.\n{label}: {q.answer}\nConfidence: 100%"
