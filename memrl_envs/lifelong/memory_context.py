"""What the Lifelong envs share for the official code's memory handling (MemTensor/MemRL @
7c3beba): the episode as a chat history (the text its memory writer is given) and the
official display of the retrieved memories (`memory_format: official`).

The chat history (`chat_text`): one ``"<role>: <content>"`` entry per message, joined by
newlines, role ``user`` or ``assistant`` (LifelongAgentBench's ``ChatHistory.get_value_str``
as ``memrl/run/llb_rl_runner.py`` ``_session_to_trajectory`` calls it). When the agent's model
failed, the official history ends with an empty assistant message, which that function cuts
together with the user message before it; `chat_text(..., agent_failed=True)` does the same.

The display (`format_official`, ``memrl/lifelongbench_eval/memory_context.py``): successes
first, then the rest (a failure, or an outcome not recorded: the official code groups on a
truthy ``success``), each group in selection order, numbered within its group (a memory left
empty keeps its number); each memory's own text with the env's preamble taken out of its
trajectory (`strip_preamble`, ``sanitize.py``); a failure cut before its failed attempt
(`shown_text`, from the memory's record); no budget. The headings are the project's own words.
"""

from __future__ import annotations

from typing import Sequence

from memrl.core.records import RetrievedMemory

USER, ASSISTANT = "user", "assistant"

# The first line of each env's preamble message (os_prompts / db_prompts INSTRUCTION): what
# marks the preamble inside a stored trajectory. Both envs' markers are looked for in every
# memory, since OS and DB memories may share one bank.
OS_PREAMBLE_MARKER = "You are the administrator of a Linux machine"
DB_PREAMBLE_MARKER = "You work on a MySQL database"
PREAMBLE_MARKERS = (OS_PREAMBLE_MARKER, DB_PREAMBLE_MARKER)


BLOCK_TITLE = "[Memories of earlier tasks]"
SUCCESS_HEADING = "=== Earlier tasks that were solved (build on what worked) ==="
FAILURE_HEADING = "=== Earlier tasks that failed (do not repeat what went wrong) ==="
SUCCESS_LABEL, SUCCESS_KIND = "Solved", "script"
FAILURE_LABEL, FAILURE_KIND = "Failed", "reflection"


def chat_text(messages: Sequence[tuple[str, str]], agent_failed: bool = False) -> str:
    """The chat history as the official memory writer is given it. `agent_failed`: the
    episode ended on a failed model call; the last user message goes with it."""
    entries = list(messages)
    if agent_failed and entries and entries[-1][0] == USER:
        entries = entries[:-1]
    return "\n".join(f"{role}: {content}" for role, content in entries)


def _has_marker(line: str, markers: Sequence[str]) -> bool:
    return any(m in line for m in markers)


def strip_preamble(text: str, markers: Sequence[str] = PREAMBLE_MARKERS) -> str:
    """`text` without the first preamble message of a chat history inside it: from the first
    line that starts with ``user:`` and holds a marker, up to (not including) the next
    ``assistant:`` line or the next ``user:`` line without a marker; the rest stripped.
    No such line: `text` unchanged (blank text: "")."""
    if not text.strip():
        return ""
    lines = text.split("\n")
    start = next((i for i, ln in enumerate(lines)
                  if ln.lstrip().startswith(f"{USER}:") and _has_marker(ln, markers)), None)
    if start is None:
        return text
    end = len(lines)
    for i in range(start + 1, len(lines)):
        ln = lines[i].lstrip()
        if ln.startswith(f"{ASSISTANT}:") or (ln.startswith(f"{USER}:") and not _has_marker(ln, markers)):
            end = i
            break
    return "\n".join(lines[:start] + lines[end:]).strip()


def shown_text(memory: RetrievedMemory, markers: Sequence[str] = PREAMBLE_MARKERS) -> str:
    """A memory's text as the official display shows it: without the env's preamble in its
    trajectory, and -- a failure with a reflection -- cut before its failed attempt (its task
    and reflection, stripped at the end). Read from its record, never from its text."""
    parts = memory.parts()
    if not memory.success and parts.note_kind == "reflection":
        cut = parts.before_trajectory
        return strip_preamble(cut.rstrip() if len(cut) < len(parts.text) else cut, markers)
    return strip_preamble(parts.text, markers)


def _section(heading: str, label: str, kind: str, texts: Sequence[str]) -> list[str]:
    lines = ["\n" + heading]
    for i, text in enumerate(texts, 1):
        if text:  # an empty memory is left out but keeps its number, as the official code does
            lines.append(f"[{label} {i}] [kind: {kind}]\n{text}\n")
    return lines


def format_official(memories: Sequence[RetrievedMemory], markers: Sequence[str] = PREAMBLE_MARKERS) -> str:
    """The official block of retrieved memories (module doc); "" when there are none."""
    if not memories:
        return ""
    solved = [shown_text(m, markers) for m in memories if m.success]
    rest = [shown_text(m, markers) for m in memories if not m.success]
    lines = [BLOCK_TITLE]
    if solved:
        lines += _section(SUCCESS_HEADING, SUCCESS_LABEL, SUCCESS_KIND, solved)
    if rest:
        lines += _section(FAILURE_HEADING, FAILURE_LABEL, FAILURE_KIND, rest)
    return "\n".join(lines).strip()
