"""Prompt assembly for ALFWorld: instructions, demonstrations, memories, history.

The prompt (`env.layout=text`, the default) is plain text that ends with "\\n>", so any model
continues it with one action: a base model through text completion, a chat model as the
content of a user message. `env.layout=chat` (chat.py) is the official code's dialogue instead.

Demonstrations come in two styles from ReAct's prompt file (`DEMO_STYLES`): `react`
(keys `react_<type>_<i>`: actions interleaved with `think:` lines) and `act` (keys
`act_<type>_<i>`: ReAct's "Act" variant, actions only). `auto` picks `act` for the embedded
models (a small model copies the `think:` lines instead of acting, and the teacher
trajectories it could copy have none) and `react` for every other model.

Memories are shown as episodes (`memrl.env.memory_block.format_memories_as_episodes`): the
task line and the `> action` / observation lines exactly as the current history is written,
so that an earlier attempt at the same game reads as a continuation of the current episode;
`memory_format=text` shows each memory as stored, `official` as the official code does (chat.py).

Reply formats (`REPLY_FORMATS`, `env.reply_format`): `line` (the default) asks for one command
on the line after '>' (the stop sequence "\n" ends it where the provider takes stops);
`thought_action` asks for two lines, "Thought: ..." and "Action: ...", as the official code's
chat ReAct agent answers (`experiment=alfworld_official`). Either way `parse_action` reads the
reply as the format allows: an `Action:` line, else a `>` line, else the first line that is not
a thought; a reply of thoughts only is a think step, never played as a command.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Sequence

from memrl.core.records import RetrievedMemory, Step
from memrl.env.displays import display, formats
from memrl_envs.alfworld.chat import CHAT_FORMAT

PROMPTS_FILENAME = "react_alfworld_3prompts.json"
DEMO_STYLES = ("react", "act")
MEMORY_FORMATS = formats("alfworld")
TASK_MARKER = "Your task is to: "
STOP = ("\n",)  # an action is one line
REPLY_FORMATS = ("line", "thought_action")

_COMMANDS = (
    "You control an agent inside a text-based simulation of a household. After each '>' "
    "write exactly one command on a single line; the environment replies on the next line.\n"
    "Commands: go to <place>, open <receptacle>, close <receptacle>, take <object> from "
    "<place>, put <object> in/on <place>, clean <object> with <place>, heat <object> with "
    "<place>, cool <object> with <place>, use <object>, examine <thing>, inventory, look.\n"
    "Name things exactly as the environment does, numbers included (e.g. 'cabinet 2'). "
)
_THINK = ("To reason or plan without acting, write 'think: <your thoughts>'; the reply is 'OK.' "
          "and nothing changes. ")
_NO_EFFECT = ("A command the environment does not understand has no effect ('Nothing happens.'). "
              "The task is over as soon as its goal holds.")
INSTRUCTION = _COMMANDS + _THINK + _NO_EFFECT  # with ReAct's demonstrations
INSTRUCTION_ACT = _COMMANDS + _NO_EFFECT  # the same without thinking: act-only demonstrations
INSTRUCTIONS = {"react": INSTRUCTION, "act": INSTRUCTION_ACT}
# reply_format=thought_action: what replaces "after each '>' write exactly one command"
THOUGHT_ACTION = ("Answer every turn with exactly two lines: first 'Thought: <your reasoning about "
                  "the situation and your plan>', then 'Action: <one command>'. ")


def instruction_for(style: str, reply_format: str = "line") -> str:
    """The instruction text of a demonstration style and a reply format."""
    if reply_format not in REPLY_FORMATS:
        raise ValueError(f"reply_format: {' | '.join(REPLY_FORMATS)} (got {reply_format!r})")
    text = INSTRUCTIONS[style]
    if reply_format == "thought_action":
        text = text.replace("After each '>' write exactly one command on a single line; the "
                            "environment replies on the next line.\n", THOUGHT_ACTION + "\n")
    return text


def chat_instruction() -> str:
    """The system message of the chat layout (chat.py): the instructions without `think:` (the
    two-line answer holds the thought) and the answer form."""
    return instruction_for("act", "thought_action") + "\n\n" + CHAT_FORMAT


def resolve_style(style: str, llm: object) -> str:
    """`react` | `act` for an episode: `auto` means `act` for an embedded model, else `react`."""
    if style == "auto":
        return "act" if getattr(llm, "embedded", False) else "react"
    if style not in DEMO_STYLES:
        raise ValueError(f"demo_style: auto | react | act (got {style!r})")
    return style


def default_prompts_file(data_root: Path) -> Path | None:
    candidate = data_root / PROMPTS_FILENAME
    return candidate if candidate.is_file() else None


def load_demonstrations(path: str | os.PathLike[str]) -> dict[str, str]:
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise ValueError(f"{path}: expected a JSON object of prompt strings")
    return data


def select_demonstrations(
    demos: dict[str, str], task_type: str, demo_index: int = 0, num_demos: int = 1,
    style: str = "react",
) -> list[str]:
    """`num_demos` demonstrations `<style>_<task_type>_<i>`, starting at `demo_index`, wrapping."""
    if num_demos <= 0:
        return []
    if style not in DEMO_STYLES:
        raise ValueError(f"demonstration style {style!r}: expected one of {DEMO_STYLES}")
    available = sorted(
        int(key.rsplit("_", 1)[1])
        for key in demos
        if key.startswith(f"{style}_{task_type}_") and key.rsplit("_", 1)[1].isdigit()
    )
    if len(available) < num_demos:
        raise ValueError(
            f"{num_demos} demonstrations requested for task type {task_type!r}, "
            f"the prompts file has {len(available)} (keys {style}_{task_type}_<i>)"
        )
    if demo_index not in available:
        raise ValueError(f"no demonstration {style}_{task_type}_{demo_index} in the prompts file")
    start = available.index(demo_index)
    chosen = [available[(start + k) % len(available)] for k in range(num_demos)]
    return [demos[f"{style}_{task_type}_{i}"].strip("\n") for i in chosen]


def format_task_start(room: str, task: str) -> str:
    """The first observation the way the demonstrations show it (no TextWorld banner)."""
    return f"{room}\n{TASK_MARKER}{task}" if room else f"{TASK_MARKER}{task}"


def memory_task_line(intent: str) -> str:
    """A memory's first line as an episode shows it: its intent is the task sentence (or,
    with `intent_with_observation`, already the whole first observation)."""
    return intent.strip() if TASK_MARKER in intent else f"{TASK_MARKER}{intent.strip()}"


def memory_block(memories: Sequence[RetrievedMemory], memory_format: str = "episode") -> str:
    """The memories as `memory_format` shows them: `episode` (each memory as an episode, see
    the module docstring), `text` (each memory's text as stored, the block other envs use) or
    `official` (the official code's display, chat.format_official_memories); "" for none."""
    show = display("alfworld", memory_format)  # memrl.env.displays
    return show(memories, memory_task_line) if memory_format == "episode" else show(memories)


def build_prompt(
    demonstrations: Sequence[str],
    memories: Sequence[RetrievedMemory],
    task_start: str,
    history: Sequence[Step],
    instruction: str = INSTRUCTION,
    memory_format: str = "episode",
    reply_format: str = "line",
) -> str:
    """The prompt of one step (`layout=text`). `memory_format`: see `memory_block`.
    `reply_format`: `line` ends the prompt with '>' (the command follows it), `thought_action`
    with a reminder of the two-line answer."""
    parts = [instruction]
    if demonstrations:
        head = (
            "Here is an example of a task being solved:"
            if len(demonstrations) == 1
            else f"Here are {len(demonstrations)} examples of tasks being solved:"
        )
        parts.append(head + "\n\n" + "\n\n".join(demonstrations))
    block = memory_block(memories, memory_format)
    if block:
        parts.append(block)
    episode = [task_start]
    for step in history:
        episode.append(f"> {step.action}")
        episode.append(step.observation)
    parts.append("Here is your task.\n" + "\n".join(episode))
    if reply_format == "thought_action":
        return "\n\n".join(parts) + "\nYour next turn (Thought: ..., then Action: ...):\n"
    return "\n\n".join(parts) + "\n>"


_ACTION_LINE = re.compile(r"^[*_]*action[*_]*\s*:[*_]*\s*(.*)$", re.IGNORECASE)
_THOUGHT_LINE = re.compile(r"^[*_]*(?:thought|thinking|reasoning)[*_]*\s*:[*_]*\s*(.*)$", re.IGNORECASE)


def parse_action(reply: str) -> str:
    """The command in a reply (module doc): its first line that acts, read top down. A
    thought line ("Thought: ...") is skipped; an "Action: <command>" line gives its command;
    a line starting with '>' gives what follows; any other line is the command itself (the
    line format's reply; later lines are the model imagining further turns). A reply of
    thoughts only becomes `think: <the first thought>`, a step that changes nothing."""
    thoughts = []
    for raw in (reply or "").splitlines():
        line = raw.strip().lstrip(">").strip()
        if not line:
            continue
        thought = _THOUGHT_LINE.match(line)
        if thought:
            thoughts.append(thought.group(1).strip())
            continue
        action = _ACTION_LINE.match(line)
        if action:
            line = action.group(1).strip().lstrip(">").strip().strip("`").strip()
            if not line:
                continue
        return line
    return f"think: {thoughts[0]}" if thoughts and thoughts[0] else ""


def is_think(action: str) -> bool:
    return action.lower().startswith("think:")
