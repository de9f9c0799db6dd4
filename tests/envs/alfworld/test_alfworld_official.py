"""ALFWorld as the official code plays it (memrl_envs/alfworld/chat.py): the chat dialogue the model
receives (`env.layout=chat`), the official memory display (`env.memory_format=official`), the
official reading of a reply (`env.action_parse=official`) and the dialogue every episode
leaves for its memory (`EpisodeResult.memory_trajectory`). A scripted stand-in for the game
(no TextWorld) and a fake model; every expectation is written out by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from memrl.core.records import RetrievedMemory, Task
from memrl.llm.base import LLMError

ROOT = Path(__file__).resolve().parents[3]
TASK_ID = "pick_and_place_simple-Pen-None-Shelf-1/trial_T1"

DEMO = ("You are in a room with a desk 1 and a shelf 1.\nYour task is to: put a pen on shelf.\n"
        "> think: I need a pen first.\nOK.\n> think: It is probably on the desk.\nOK.\n"
        "> go to desk 1\nOn the desk 1, you see a pen 1.\n"
        "> take pen 1 from desk 1\nYou pick up the pen 1 from the desk 1.\n"
        "> think: Now the shelf.\n"  # a think: line without its "OK." (as in ReAct's react_put_0)
        "> go to shelf 1\nOn the shelf 1, you see nothing.\n"
        "> put pen 1 in/on shelf 1\nYou put the pen 1 in/on the shelf 1.\n")

# the demonstration as the chat layout's example turns
EXAMPLE = [
    ("user", "Here is an example of a task being solved:\nYou are in a room with a desk 1 and a shelf 1.\n"
             "Your task is to: put a pen on shelf."),
    ("assistant", "Thought: I need a pen first. It is probably on the desk.\nAction: go to desk 1"),
    ("user", "Observation: On the desk 1, you see a pen 1."),
    ("assistant", "Thought: I go on with my plan.\nAction: take pen 1 from desk 1"),
    ("user", "Observation: You pick up the pen 1 from the desk 1."),
    ("assistant", "Thought: Now the shelf.\nAction: go to shelf 1"),
    ("user", "Observation: On the shelf 1, you see nothing."),
    ("assistant", "Thought: I go on with my plan.\nAction: put pen 1 in/on shelf 1"),
]
# the same demonstration as the text layout showed it (its equivalent dialogue)
EXAMPLE_AS_WRITTEN = [
    ("user", "Here is an example of a task being solved:\nYou are in a room with a desk 1 and a shelf 1.\n"
             "Your task is to: put a pen on shelf."),
    ("assistant", "think: I need a pen first."), ("user", "Observation: OK."),
    ("assistant", "think: It is probably on the desk."), ("user", "Observation: OK."),
    ("assistant", "go to desk 1"), ("user", "Observation: On the desk 1, you see a pen 1."),
    ("assistant", "take pen 1 from desk 1"), ("user", "Observation: You pick up the pen 1 from the desk 1."),
    ("assistant", "think: Now the shelf."),  # shown without an observation
    ("assistant", "go to shelf 1"), ("user", "Observation: On the shelf 1, you see nothing."),
    ("assistant", "put pen 1 in/on shelf 1"),
]

BANNER = "-= Welcome to TextWorld, ALFRED! =-"
ROOM = "You are in the middle of a room. Looking around you, you see a desk 1 and a shelf 1."
FIRST_OBS = f"{BANNER}\n\n{ROOM}\n\nYour task is to: put a pen on shelf."
TASK_TURN = ("user", f"Now it is your turn, on a new task.\n{ROOM}\nYour task is to: put a pen on shelf.")
GAME = {"go to desk 1": "On the desk 1, you see a pen 1.", "look": "You are facing the desk 1.",
        "take pen 1 from desk 1": "You pick up the pen 1 from the desk 1.",
        "go to shelf 1": "On the shelf 1, you see nothing.",
        "put pen 1 in/on shelf 1": "You put the pen 1 in/on the shelf 1."}
WIN = "put pen 1 in/on shelf 1"


class ScriptedGame:
    """Stands in for AlfworldGame: a fixed first observation, `GAME`'s answers, a win on `WIN`."""

    played: list[str] = []

    def __init__(self, game_file: str, max_env_steps: int, with_expert: bool = False) -> None:
        self.steps = 0

    def reset(self):
        return FIRST_OBS, {}

    def step(self, command: str):
        type(self).played.append(command)
        self.steps += 1
        return GAME.get(command, "Nothing happens."), command == WIN, command == WIN, {}

    def close(self) -> None:
        pass


class FakeLLM:
    """What of EpisodeLLM the adapter uses; replies come from `replies` (an exception is raised)."""

    honors_stop = True

    def __init__(self, replies):
        self.replies = list(replies)
        self.prompts: list = []
        self.kwargs: list[dict] = []

    def complete(self, prompt, *, purpose, max_tokens=None, stop=(), **_):
        self.prompts.append(prompt)
        self.kwargs.append({"max_tokens": max_tokens, "stop": stop})
        reply = self.replies[len(self.prompts) - 1]
        if isinstance(reply, Exception):
            raise reply
        return reply


def _traj(*messages: tuple[str, str]) -> str:
    return json.dumps([{"role": r, "content": c} for r, c in messages], ensure_ascii=False)


# two memories in the official stored layout (memrl.memory.writer OFFICIAL_SUCCESS / _FAILURE),
# their trajectories the JSON dialogues this env leaves (nested system messages included)
SUCCESS_TRAJ = _traj(
    ("system", "SYSTEM OF AN EARLIER EPISODE"),
    ("user", "Here is an example of a task being solved:\nEXAMPLE ROOM"),
    ("assistant", "Thought: ex\nAction: look"),
    ("system", "AN EVEN EARLIER MEMORY BLOCK"),
    ("user", "Now it is your turn, on a new task.\nA room with a desk 2.\nYour task is to: put a pen on shelf."),
    ("assistant", "Thought: The pen may be on the desk.\nAction: go to desk 2"),
    ("user", "Observation: On the desk 2, you see a pen 3."),
    ("assistant", "Thought: Take it.\nAction: take pen 3 from desk 2"),
)
FAILURE_TRAJ = _traj(
    ("system", "SYSTEM OF AN EARLIER EPISODE"),
    ("user", "Now it is your turn, on a new task.\nA room with a drawer 1.\nYour task is to: put a pen in drawer."),
    ("assistant", "Thought: Maybe the drawer.\nAction: go to drawer 1"),
    ("user", "Observation: The drawer 1 is closed."),
    ("assistant", "Thought: Put it in.\nAction: put pen 1 in/on drawer 1"),
)
SUCCESS = RetrievedMemory(
    "m-s", "room A\nYour task is to: put a pen on shelf.",
    "Task: A room with a desk 2.\nYour task is to: put a pen on shelf.\n\nSCRIPT:\n1. Find the pen.\n"
    f"2. Put it on the shelf.\n\nTRAJECTORY:\n{SUCCESS_TRAJ}", 0.5, 0.9, 1.0, success=True)
FAILURE = RetrievedMemory(  # filed under another task's key (a joined near-duplicate)
    "m-f", "KEY OF ANOTHER TASK",
    "TASK REFLECTION:\nTask: A room with a drawer 1.\nYour task is to: put a pen in drawer.\n\n"
    f"What went wrong:\nI never opened the drawer.\n\nFailed approach:\n{FAILURE_TRAJ}\n", -0.5, 0.8, 0.5,
    success=False)

MEMORY_MESSAGE = (
    "Besides the example, here are memories of your own earlier attempts. Use them where they fit this task:"
    "\n\n--- Attempts that succeeded (worth following) ---\n"
    "Recorded script:\n1. Find the pen.\n2. Put it on the shelf.\n\n"
    "Recorded trajectory:\n"
    "Now it is your turn, on a new task.\nA room with a desk 2.\nYour task is to: put a pen on shelf.\n"
    "> Thought: The pen may be on the desk.\nAction: go to desk 2\n"
    "Observation: On the desk 2, you see a pen 3.\n"
    "> Thought: Take it.\nAction: take pen 3 from desk 2"
    "\n\n--- Attempts that failed (learn from their mistakes) ---\n"
    "Recorded script:\nI never opened the drawer.\n\n"
    "Recorded trajectory:\n"
    "Now it is your turn, on a new task.\nA room with a drawer 1.\nYour task is to: put a pen in drawer.\n"
    "> Thought: Maybe the drawer.\nAction: go to drawer 1\n"
    "Observation: The drawer 1 is closed.\n"
    "> Thought: Put it in.\nAction: put pen 1 in/on drawer 1"
)

OFFICIAL = {"layout": "chat", "reply_format": "thought_action", "memory_format": "official",
            "action_parse": "official", "demo_style": "react", "max_tokens": 4096}


@pytest.fixture
def make_env(tmp_path, monkeypatch):
    """An AlfworldEnv on a one-game data folder whose game is `ScriptedGame`."""
    from memrl_envs.alfworld import AlfworldEnv, AlfworldSettings
    from memrl_envs.alfworld import env as alfworld_env

    root = tmp_path / "data"
    (root / "json_2.1.1" / "valid_seen" / TASK_ID).mkdir(parents=True)
    (root / "json_2.1.1" / "valid_seen" / TASK_ID / "game.tw-pddl").write_text("{}")
    demos = {f"{s}_{t}_0": f"Room.\nYour task is to: {t}.\n> look\nNothing." for s in ("react", "act")
             for t in ("put", "clean", "heat", "cool", "examine", "puttwo")}
    demos["react_put_0"] = DEMO
    (root / "react_alfworld_3prompts.json").write_text(json.dumps(demos))
    monkeypatch.setattr(alfworld_env, "AlfworldGame", ScriptedGame)
    ScriptedGame.played = []

    def make(**fields):
        settings = AlfworldSettings(data_root=str(root), split="valid_seen", cache_dir=str(tmp_path / "c"),
                                    **fields)
        return AlfworldEnv(settings, agent="react", show_progress=False)
    return make


def solve(env, memories, llm):
    task = Task(task_id=TASK_ID, intent="", payload={
        "game_file": str(Path(env.split_dir) / TASK_ID / "game.tw-pddl")})
    return env.solve(task, memories, llm, seed=0)


def as_dicts(messages):
    return [{"role": r, "content": c} for r, c in messages]


REPLIES = [
    "Thought: The pen is likely on the desk.\nAction: go to desk 1",
    "",  # an empty reply: the official runner plays "look"
    "Thought: Take it, not walk.\nAction: go to shelf 1\nAction: take pen 1 from desk 1",  # the last Action:
    "Thought: Now to the shelf, café style.\nAction: go to shelf 1",
    "Thought: Put it down.\nAction: put pen 1 in/on shelf 1",
]


def test_chat_layout_sends_the_official_dialogue_with_both_memories(make_env):
    from memrl_envs.alfworld.prompts import chat_instruction

    llm = FakeLLM(REPLIES)
    r = solve(make_env(**OFFICIAL), [FAILURE, SUCCESS], llm)  # selection order: the failure first
    head = [("system", chat_instruction()), *EXAMPLE, ("system", MEMORY_MESSAGE), TASK_TURN]
    assert llm.prompts[0] == head
    # the whole history: each raw reply, then its observation; the empty reply is not sent
    assert llm.prompts[1] == head + [("assistant", REPLIES[0]),
                                     ("user", "Observation: On the desk 1, you see a pen 1.")]
    assert llm.prompts[2] == llm.prompts[1] + [("user", "Observation: You are facing the desk 1.")]
    assert llm.prompts[4] == llm.prompts[2] + [
        ("assistant", REPLIES[2]), ("user", "Observation: You pick up the pen 1 from the desk 1."),
        ("assistant", REPLIES[3]), ("user", "Observation: On the shelf 1, you see nothing.")]
    assert all(k == {"max_tokens": 4096, "stop": ()} for k in llm.kwargs)  # no stop sequence
    # the key's text of the joined failure is never shown; its own task is
    assert not any("KEY OF ANOTHER TASK" in c for _, c in llm.prompts[-1])
    assert ScriptedGame.played == ["go to desk 1", "look", "take pen 1 from desk 1", "go to shelf 1", WIN]
    assert r.success and r.info["empty_actions"] == 1 and r.steps == 5


def test_the_chat_system_message_asks_for_thought_and_action_without_think():
    from memrl_envs.alfworld.prompts import chat_instruction

    text = chat_instruction()
    assert text.endswith("Write every turn in this form:\n\nThought: <your reasoning>\nAction: <one command>")
    assert "think:" not in text and "'>'" not in text and "Commands: go to <place>" in text


def test_memory_trajectory_is_the_last_call_plus_its_reply(make_env):
    from memrl_envs.alfworld.prompts import chat_instruction

    llm = FakeLLM(REPLIES)
    r = solve(make_env(**OFFICIAL), [FAILURE, SUCCESS], llm)
    messages = json.loads(r.memory_trajectory)
    head = [("system", chat_instruction()), *EXAMPLE, ("system", MEMORY_MESSAGE), TASK_TURN]
    assert messages == as_dicts(head + [
        ("assistant", REPLIES[0]), ("user", "Observation: On the desk 1, you see a pen 1."),
        ("assistant", ""), ("user", "Observation: You are facing the desk 1."),  # kept, as the official list
        ("assistant", REPLIES[2]), ("user", "Observation: You pick up the pen 1 from the desk 1."),
        ("assistant", REPLIES[3]), ("user", "Observation: On the shelf 1, you see nothing."),
        ("assistant", REPLIES[4])])  # the final observation is never appended
    assert "café" in r.memory_trajectory  # ensure_ascii=False
    # what a memory of this episode shows next time: its own dialogue from its task on
    from memrl_envs.alfworld.chat import format_official_memory
    stored = RetrievedMemory("n", "k", f"Task: t\n\nSCRIPT:\nS\n\nTRAJECTORY:\n{r.memory_trajectory}", 0, 1, 1, True)
    shown = format_official_memory(stored)
    assert shown.startswith(f"Recorded script:\nS\n\nRecorded trajectory:\n{TASK_TURN[1]}\n> {REPLIES[0]}\n")
    assert shown.endswith(f"> {REPLIES[3]}\nObservation: On the shelf 1, you see nothing.\n> {REPLIES[4]}")
    assert "Besides the example" not in shown and "Here is an example" not in shown


def test_a_failed_call_leaves_the_dialogue_it_was_sent(make_env):
    llm = FakeLLM([REPLIES[0], LLMError("down")])
    r = solve(make_env(**OFFICIAL), [], llm)
    messages = json.loads(r.memory_trajectory)
    assert r.outcome == "llm_error" and messages == as_dicts(llm.prompts[1])
    assert messages[-1] == {"role": "user", "content": "Observation: On the desk 1, you see a pen 1."}
    assert not any(m["role"] == "system" and "Besides the example" in m["content"] for m in messages)


def test_the_text_layout_leaves_its_equivalent_dialogue(make_env):
    from memrl_envs.alfworld.prompts import instruction_for

    llm = FakeLLM(["go to desk 1\nmore text", "think: the pen", WIN])
    r = solve(make_env(demo_style="react"), [], llm)
    assert isinstance(llm.prompts[0], str) and llm.kwargs[0]["stop"] == ("\n",)  # unchanged: one text prompt
    assert ScriptedGame.played == ["go to desk 1", WIN] and r.success  # memrl parsing: think: is a step
    assert json.loads(r.memory_trajectory) == as_dicts([
        ("system", instruction_for("react", "line")), *EXAMPLE_AS_WRITTEN, TASK_TURN,
        ("assistant", "go to desk 1\nmore text"), ("user", "Observation: On the desk 1, you see a pen 1."),
        ("assistant", "think: the pen"), ("user", "Observation: OK."),
        ("assistant", WIN)])


def test_the_text_layout_shows_the_official_block_where_memories_go(make_env):
    llm = FakeLLM(["look"])
    solve(make_env(demo_style="react", memory_format="official", max_steps=1), [FAILURE, SUCCESS], llm)
    prompt = llm.prompts[0]
    assert f"\n\n{MEMORY_MESSAGE}\n\nHere is your task.\n{ROOM}\nYour task is to: put a pen on shelf.\n>" in prompt
    assert prompt.index("Here is an example of a task being solved:") < prompt.index(MEMORY_MESSAGE)


def test_official_display_groups_and_keeps_legacy_text():
    from memrl_envs.alfworld.chat import format_official_memories

    legacy = RetrievedMemory("l", "key", "Task: cool an apple.\nOutcome: failed\nReflection: use the fridge.\n"
                             "Failed attempt:\n> look\nNothing.", 0, 1, 1, success=None)
    not_json = RetrievedMemory("j", "key", "Task: t\n\nSCRIPT:\nplan\n\nTRAJECTORY:\nuser: hi\nassistant: yo",
                               0, 1, 1, success=True)
    block = format_official_memories([legacy, SUCCESS, not_json])
    success_part = MEMORY_MESSAGE.split("\n\n--- Attempts that failed")[0].split("---\n", 1)[1]
    assert block == (
        "Besides the example, here are memories of your own earlier attempts. Use them where they fit this task:"
        "\n\n--- Attempts that succeeded (worth following) ---\n"
        f"{success_part}\n"  # two memories of a group: one newline between them
        "Task: t\n\nSCRIPT:\nplan\n\nTRAJECTORY:\nuser: hi\nassistant: yo"  # not a dialogue: as stored
        "\n\n--- Attempts that failed (learn from their mistakes) ---\n"
        "Task: cool an apple.\nOutcome: failed\nReflection: use the fridge.\nFailed attempt:\n> look\nNothing.")
    assert format_official_memories([]) == "" and "succeeded" not in format_official_memories([FAILURE])


def test_official_action_parsing_takes_the_last_action():
    from memrl_envs.alfworld.chat import parse_action_official
    from memrl_envs.alfworld.prompts import parse_action

    reply = "Thought: a\nAction: go to desk 1\nAction: open drawer 1"
    assert parse_action_official(reply) == "open drawer 1" and parse_action(reply) == "go to desk 1"
    assert parse_action_official("Thought: only thinking") == "Thought: only thinking"
    assert parse_action("Thought: only thinking") == "think: only thinking"
    assert parse_action_official("Action: take x 1 from y 1\nmore") == "take x 1 from y 1\nmore"
    assert parse_action_official("  go to x  ") == "go to x" and parse_action_official("") == ""


def test_the_official_preset_switches_and_their_guard(tmp_path):
    from memrl_envs.alfworld import AlfworldSettings

    (tmp_path / "json_2.1.1" / "valid_train").mkdir(parents=True)
    env = yaml.safe_load((ROOT / "configs" / "official" / "alfworld.yaml").read_text())["env"]
    s = AlfworldSettings(data_root=str(tmp_path), **env)
    assert (s.layout, s.memory_format, s.action_parse, s.reply_format, s.demo_style) == \
        ("chat", "official", "official", "thought_action", "react")
    d = AlfworldSettings(data_root=str(tmp_path))
    assert (d.layout, d.memory_format, d.action_parse) == ("text", "episode", "memrl")  # today's behaviour
    with pytest.raises(ValueError, match="reply_format=thought_action"):
        AlfworldSettings(data_root=str(tmp_path), layout="chat")
