"""ALFWorld as the official code plays it (MemTensor/MemRL @ 7c3beba, memrl/agent/memp_agent.py):
a chat dialogue, its memory display, and its reading of a reply.

The dialogue (`env.layout=chat`), in order: a system message (the instructions and the
"Thought: ... / Action: ..." answer form); one worked example per demonstration as user /
assistant turns (its first user turn introduces it and gives its first observation, each
assistant turn is "Thought: ...\\nAction: ...", each later user turn "Observation: ...");
the memories as a second system message, if any; the new task (`NEW_TASK` and the first
observation); then each step's raw reply and the user turn "Observation: <obs>". The whole
history, no window. The official examples file is not shipped, so the example is made from
ReAct's demonstration of the same task type (`demo_turns`): its `think:` lines become the
next action's thought, and an action that no `think:` line precedes gets `GENERIC_THOUGHT`,
so every assistant turn has the two-line form the instructions ask for.

The same message list, built for either layout, is what a memory of the episode stores
(`EpisodeResult.memory_trajectory`, as JSON): the official writer is handed the whole dialogue
up to the last reply (the final observation is never appended). `format_official_memories`
shows such memories as the official code does (`env.memory_format=official`).

`parse_action_official` (`env.action_parse=official`) reads a reply as the official agent
does: the text after the last "Action:", else the whole reply.
"""

from __future__ import annotations

import json
from typing import Sequence

from memrl.core.records import RetrievedMemory

Message = dict[str, str]  # {"role": ..., "content": ...}, as the official code's list holds

EXAMPLE_INTRO = "Here is an example of a task being solved:\n"  # the example's first user turn
NEW_TASK = "Now it is your turn, on a new task.\n"  # the user turn that opens the episode's task
OBSERVATION = "Observation: "
GENERIC_THOUGHT = "I go on with my plan."  # an example action that no think: line precedes
# what the system message adds to the instructions (prompts.chat_instruction)
CHAT_FORMAT = ("After each of your turns the environment answers with 'Observation: ...'. "
               "Write every turn in this form:\n\nThought: <your reasoning>\nAction: <one command>")

# memory_format=official: the labels and headings (the official structure, the project's words)
SCRIPT_LABEL = "Recorded script:"  # the same label for a success's script and a failure's reflection
TRAJECTORY_LABEL = "Recorded trajectory:"
MEMORY_INTRO = ("Besides the example, here are memories of your own earlier attempts. "
                "Use them where they fit this task:")
SUCCESS_HEADING = "--- Attempts that succeeded (worth following) ---"
FAILURE_HEADING = "--- Attempts that failed (learn from their mistakes) ---"


def _msg(role: str, content: str) -> Message:
    return {"role": role, "content": content}


def observation_turn(observation: str) -> Message:
    return _msg("user", OBSERVATION + observation.strip())


def _demo_steps(demo: str) -> tuple[str, list[tuple[str, str]]]:
    """(first observation, [(action, observation)]) of a ReAct demonstration: the lines up to
    the first `>` line, then each `> action` line with the lines after it."""
    lines = demo.strip("\n").splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith(">")), len(lines))
    steps: list[tuple[str, str]] = []
    for line in lines[first:]:
        if line.startswith(">"):
            steps.append((line[1:].strip(), ""))
        elif steps:
            action, obs = steps[-1]
            steps[-1] = (action, f"{obs}\n{line}" if obs else line)
    return "\n".join(lines[:first]).strip(), steps


def demo_turns(demo: str, merge_thoughts: bool) -> list[Message]:
    """A ReAct demonstration as chat turns: its first observation, then assistant / user turns
    ending with the last action (the final observation is left out, as in the official
    examples; a step without an observation has no user turn). `merge_thoughts`: each action's
    turn is "Thought: <the think: lines before it, joined>\\nAction: <action>" (`GENERIC_THOUGHT`
    when none precedes it) and the think steps' "OK." go; otherwise each `>` line is an
    assistant turn as written (think steps included)."""
    start, steps = _demo_steps(demo)
    turns = [_msg("user", start)]
    thoughts: list[str] = []
    pending: str | None = None  # the observation of the last action, shown before the next one
    for action, obs in steps:
        if merge_thoughts and action.lower().startswith("think:"):
            thoughts.append(action.split(":", 1)[1].strip())
            continue
        if pending:  # a think: line shown without its "OK." has no observation turn
            turns.append(observation_turn(pending))
        content = action
        if merge_thoughts:
            content = f"Thought: {' '.join(t for t in thoughts if t) or GENERIC_THOUGHT}\nAction: {action}"
        turns.append(_msg("assistant", content))
        thoughts, pending = [], obs
    return turns


def dialogue_head(instruction: str, demos: Sequence[str], memory_block: str, task_start: str,
                  merge_thoughts: bool) -> list[Message]:
    """The messages before the first reply: the system message, the example turns (each
    demonstration's first turn introduced by `EXAMPLE_INTRO`), the memories' system message
    (none without memories), and the new task's user turn."""
    messages = [_msg("system", instruction)]
    for demo in demos:
        turns = demo_turns(demo, merge_thoughts)
        turns[0] = _msg("user", EXAMPLE_INTRO + turns[0]["content"])
        messages += turns
    if memory_block:
        messages.append(_msg("system", memory_block))
    messages.append(_msg("user", NEW_TASK + task_start))
    return messages


def dialogue(head: Sequence[Message], replies: Sequence[str],
             observations: Sequence[str]) -> list[Message]:
    """`head`, then each reply as an assistant turn followed by its observation's user turn
    while there is one (`observations` has as many items as `replies`, or one fewer: the
    dialogue then ends with the last reply)."""
    messages = list(head)
    for i, reply in enumerate(replies):
        messages.append(_msg("assistant", reply))
        if i < len(observations):
            messages.append(observation_turn(observations[i]))
    return messages


def as_chat(messages: Sequence[Message]) -> list[tuple[str, str]]:
    """The (role, content) pairs a model call takes; a message without content is left out
    (an empty reply; the official agent filters those before each call)."""
    return [(m["role"], m["content"]) for m in messages if m["content"].strip()]


def trajectory_json(messages: Sequence[Message]) -> str:
    """The dialogue as a memory stores it (`EpisodeResult.memory_trajectory`)."""
    return json.dumps(list(messages), ensure_ascii=False)


def parse_action_official(reply: str) -> str:
    """The official agent's action: the text after the last "Action:" (stripped; it may span
    lines), else the whole reply stripped; "" for an empty reply (the official runner then
    plays "look")."""
    if not reply:
        return ""
    return reply.split("Action:")[-1].strip() if "Action:" in reply else reply.strip()


# -- memory_format=official -----------------------------------------------------------------


def _dialogue_lines(text: str) -> list[str] | None:
    """The lines of a stored dialogue (a JSON list of messages) from the last user turn that
    opens a task (`NEW_TASK`) on: system messages dropped, an assistant turn as "> <content>",
    a user turn as written. None when `text` is not such a list."""
    try:
        messages = json.loads(text)
    except ValueError:
        return None
    if not isinstance(messages, list) or not all(
            isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages):
        return None
    starts = [i for i, m in enumerate(messages)
              if m.get("role") == "user" and m["content"].startswith(NEW_TASK)]
    lines = []
    for m in messages[starts[-1]:] if starts else messages:
        if m.get("role") == "assistant":
            lines.append(f"> {m['content']}")
        elif m.get("role") == "user":
            lines.append(m["content"])
    return lines


def format_official_memory(mem: RetrievedMemory) -> str:
    """One memory as the official display shows it, from its own record (never the key's
    task): its script (a success) or its reflection (a failure) under `SCRIPT_LABEL`, then its
    dialogue from its own task on under `TRAJECTORY_LABEL`, blank-line separated; no cut. A
    memory whose trajectory is not a stored dialogue (memrl's layout, another env's text) is
    shown as stored."""
    parts = mem.parts()
    if parts.layout != "official" or not parts.trajectory:
        return mem.experience.strip()
    lines = _dialogue_lines(parts.trajectory)
    if lines is None:
        return mem.experience.strip()
    shown = [f"{SCRIPT_LABEL}\n{parts.note.strip()}"]
    if lines:
        shown.append(f"{TRAJECTORY_LABEL}\n" + "\n".join(lines))
    return "\n\n".join(shown)


def format_official_memories(memories: Sequence[RetrievedMemory]) -> str:
    """The memories' block: the intro, then the successes and then the failures (each group in
    selection order, under its heading, its memories joined by single newlines); an empty
    group is left out; "" when no memory has anything to show."""
    shown = [(mem.success is True, format_official_memory(mem)) for mem in memories]
    groups = [(SUCCESS_HEADING, [t for ok, t in shown if ok and t]),
              (FAILURE_HEADING, [t for ok, t in shown if not ok and t])]
    parts = [f"{heading}\n" + "\n".join(texts) for heading, texts in groups if texts]
    return "\n\n".join([MEMORY_INTRO, *parts]) if parts else ""
