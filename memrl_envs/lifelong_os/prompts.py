"""Prompt and action parsing for Lifelong-OS.

The protocol is the benchmark's, worded for this project: each turn the agent writes
``Action: bash`` followed by a ```bash block (the system runs it and the output comes back
after ``Output:``), or ``Action: finish`` when the task is done; the task's own check runs
after that. The prompt is plain text ending in ``Action:``, so a base model continues it with
one action and a chat model answers it as a user message. The parser accepts the usual
variations: the kind word missing, no code fence, a ``$`` prompt before the command, a
``Think:`` line first, "done" for finish.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from memrl.core.records import RetrievedMemory, Step
from memrl.env.displays import display
from memrl_envs.lifelong.memory_context import ASSISTANT, USER, chat_text

INSTRUCTION = (
    "You are the administrator of a Linux machine (root shell, bash, no network) and carry out "
    "a task on it. You act in turns. In a turn you either run a shell command or say that you "
    "are done.\n"
    "To run a command, write \"Action: bash\" and then the command inside a ```bash code block. "
    "It runs as root in a fresh bash in the directory /, and its output (stdout and stderr) "
    "comes back after \"Output:\". Files you change stay changed; the working directory and "
    "shell variables do not carry over to the next command. Commands must not wait for input; "
    "a command that runs longer than {timeout:g} seconds is stopped.\n"
    "When the task is complete, write \"Action: finish\". The system is then checked; there is "
    "nothing to answer."
)

EXAMPLE = """Task: Create a directory /srv/reports owned by group 'staff' with permissions 750.
Action: bash
```bash
mkdir -p /srv/reports && chgrp staff /srv/reports && chmod 750 /srv/reports
```
Output: (no output)
Action: bash
```bash
stat -c '%G %a' /srv/reports
```
Output: staff 750
Action: finish"""

STOP = ("\nOutput:", "\nTask:")
FINISH = "finish"
INVALID_MARK = "[invalid] "  # transcript actions that were not understood

INVALID_HELP = ("Error: no action found. Write \"Action: bash\" and a command in a ```bash block, "
                "or \"Action: finish\" when the task is done.")

_KIND = re.compile(r"\bact(?:ion)?\s*:\s*([A-Za-z_]+)", re.IGNORECASE)
_FENCE = re.compile(r"```[ \t]*(?:bash|sh|shell|console)?[ \t]*\n?(.*?)(?:```|\Z)", re.IGNORECASE | re.DOTALL)
_FINISH_WORD = re.compile(r"^\s*(?:act(?:ion)?\s*:\s*)?(finish|finished|done|complete|task complete)\s*\.?\s*$",
                          re.IGNORECASE)
_BARE_KIND = re.compile(r"^\s*(?:bash|sh|shell|finish|finished)\b[ \t:]*(?:\n|$|```)", re.IGNORECASE)
_THINK = re.compile(r"^\s*(?:think|thought|reasoning)\s*:", re.IGNORECASE)
_PROMPT = re.compile(r"^\s*(?:\$|#|root@[^\s]*[#$])\s+")
_LABEL = re.compile(r"^\s*(?:bash|command|cmd|shell)\s*:\s*", re.IGNORECASE)


@dataclass(frozen=True)
class Action:
    """A parsed reply: kind "bash" (``text`` = the script), "finish", or "invalid"
    (``text`` = why)."""

    kind: str
    text: str = ""


def _code(reply: str) -> str | None:
    m = _FENCE.search(reply)
    if m is None:
        return None
    body = m.group(1).strip("\n")
    lines = [_PROMPT.sub("", ln, count=1) if _PROMPT.match(ln) and not ln.lstrip().startswith("#!") else ln
             for ln in body.splitlines()]
    code = "\n".join(lines).strip()
    return code or None


def _bare_command(reply: str) -> str | None:
    """The first line that is not a thought or a label-only line, as a command."""
    for line in reply.splitlines():
        if not line.strip() or _THINK.match(line):
            continue
        if re.match(r"^\s*act(?:ion)?\s*:", line, re.IGNORECASE):
            rest = re.sub(r"^\s*act(?:ion)?\s*:\s*(?:bash\b)?\s*", "", line, flags=re.IGNORECASE)
            if not rest.strip():
                continue
            line = rest
        line = _LABEL.sub("", line, count=1)
        line = _PROMPT.sub("", line, count=1).strip().strip("`").strip()
        if line:
            return line
    return None


def parse_action(reply: str) -> Action:
    """One action from a reply; never raises."""
    text = (reply or "").replace("\r\n", "\n")
    if not text.strip():
        return Action("invalid", "the reply was empty")
    if "\0" in text:
        return Action("invalid", "the reply contains a NUL character")
    if _KIND.search(text) is None and _BARE_KIND.match(text):
        text = "Action: " + text.lstrip()  # a continuation of the prompt's final "Action:"
    kind = _KIND.search(text)
    if kind is not None:
        word = kind.group(1).lower()
        if word in ("finish", "finished", "done", "complete", "answer"):
            return Action(FINISH)
        if word in ("bash", "sh", "shell", "command", "run", "execute"):
            rest = text[kind.end():].lstrip(" \t:")
            code = _code(rest) or _code(text) or _bare_command(rest)
            if code:
                return Action("bash", code)
            return Action("invalid", "\"Action: bash\" without a command")
        return Action("invalid", f"unknown action {kind.group(1)!r} (use bash or finish)")
    code = _code(text)
    if code:
        return Action("bash", code)
    first = next((ln for ln in text.splitlines() if ln.strip() and not _THINK.match(ln)), "")
    if _FINISH_WORD.match(first):
        return Action(FINISH)
    bare = _bare_command(text)
    if bare:
        return Action("bash", bare)
    return Action("invalid", "no command found")


def format_observation(output: str, exit_code: int | None, timed_out: bool, truncated: bool,
                       timeout_s: float, max_chars: int) -> str:
    """What the agent sees after ``Output:``."""
    body = output.rstrip("\n")
    cut = truncated
    if len(body) > max_chars:
        body, cut = body[:max_chars], True
    parts = [body] if body.strip() else []
    if cut:
        parts.append("[output truncated]")
    if timed_out:
        parts.append(f"[the command was stopped: it ran longer than {timeout_s:g} seconds]")
    elif exit_code not in (0, None):
        parts.append(f"[exit code {exit_code}]")
    return "\n".join(parts) if parts else "(no output)"


def render_action(step: Step) -> str:
    if step.action == FINISH:
        return "Action: finish"
    return f"Action: bash\n```bash\n{step.action}\n```"


def _history_lines(history: Sequence[Step]) -> list[tuple[str, str | None]]:
    """Each turn of the episode as the prompt shows it: (the action, the output after
    ``Output:``; None for finish, after which nothing comes back)."""
    turns: list[tuple[str, str | None]] = []
    for step in history:
        if step.action == FINISH:
            turns.append(("Action: finish", None))
        elif step.action.startswith(INVALID_MARK):
            raw = re.sub(r"^\s*action\s*:\s*", "", step.action[len(INVALID_MARK):], flags=re.IGNORECASE)
            turns.append((f"Action: {raw}", step.observation))
        else:
            turns.append((render_action(step), step.observation))
    return turns


def _preamble(timeout_s: float, with_example: bool) -> list[str]:
    parts = [INSTRUCTION.format(timeout=timeout_s)]
    if with_example:
        parts.append("Example:\n" + EXAMPLE)
    return parts


def _memory_block(memories: Sequence[RetrievedMemory], memory_format: str) -> str:
    return display("lifelong_os", memory_format)(memories)  # memrl.env.displays


def build_prompt(instruction_text: str, memories: Sequence[RetrievedMemory], history: Sequence[Step],
                 timeout_s: float = 20.0, with_example: bool = True, memory_format: str = "memrl") -> str:
    """The whole prompt for the next action; it ends with ``Action:``.

    ``memory_format``: "memrl" puts the shared memory block (memrl.env.memory_block) after
    the instructions and the example; "official" puts the official block (memory_context)
    first, ahead of the instructions and their output format, as the official agent's system
    prompt holds its memories before its format rules and the benchmark's own instructions."""
    parts = _preamble(timeout_s, with_example)
    block = _memory_block(memories, memory_format)
    if block:
        parts.insert(0 if memory_format == "official" else len(parts), block)
    episode = [f"Task: {instruction_text.strip()}"]
    for action, output in _history_lines(history):
        if output is None:  # finish ends the episode: never followed by another prompt
            continue
        episode += [action, f"Output: {output}"]
    parts.append("Now your task.\n" + "\n".join(episode))
    return "\n\n".join(parts) + "\nAction:"


def chat_messages(instruction_text: str, history: Sequence[Step], timeout_s: float = 20.0,
                  with_example: bool = True) -> list[tuple[str, str]]:
    """The episode as a chat, in the prompt's own words (the official memory writer's input,
    memory_context): the instructions (with the example) as the preamble user message, the
    task as the next user message, then each action (assistant) and its output (user).
    No memories: the official history holds none."""
    preamble = "\n\n".join(_preamble(timeout_s, with_example)) + "\n\nNow your task."
    messages = [(USER, preamble), (USER, f"Task: {instruction_text.strip()}")]
    for action, output in _history_lines(history):
        messages.append((ASSISTANT, action))
        if output is not None:
            messages.append((USER, f"Output: {output}"))
    return messages


def memory_trajectory(instruction_text: str, history: Sequence[Step], timeout_s: float = 20.0,
                      with_example: bool = True, agent_failed: bool = False) -> str:
    """`EpisodeResult.memory_trajectory`: `chat_messages` as text (memory_context.chat_text)."""
    return chat_text(chat_messages(instruction_text, history, timeout_s, with_example), agent_failed)
