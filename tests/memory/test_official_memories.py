"""What a memory holds under the official writer layout (`memory.writer.layout=official`), a
memory shown under its own task when it was filed under another task's key, and ε-greedy's
order of its random picks (`memory.epsilon_order`)."""

from __future__ import annotations

import numpy as np
import pytest

from memrl.core.records import EpisodeResult, RetrievedMemory, Step
from memrl.env.memory_block import format_memories, own_task
from memrl.llm.base import LLMRequest
from clients import make_client

from memrl.llm.scripted import ScriptedBackend
from memrl.memory.retrieval import epsilon_greedy
from memrl.memory.writer import ExperienceWriter


def _llm(answer: str | Exception, seen: list[LLMRequest]):
    def fn(request: LLMRequest) -> str:
        seen.append(request)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return make_client(ScriptedBackend(fn), max_retries=0).episode(sample_prefix="s/e1/t", seed=0)


TRAJ = '[{"role": "user", "content": "Now do it."}, {"role": "assistant", "content": "Action: look"}]'
STEPS = [Step("look", "You see a desk 1."), Step("go to desk 1", "On the desk 1, you see a pen 1.")]


def test_the_official_success_holds_task_script_and_the_envs_whole_trajectory() -> None:
    seen: list[LLMRequest] = []
    writer = ExperienceWriter(layout="official", max_tokens=4096, reflection_temperature=0.3,
                              max_trajectory_chars=20)
    result = EpisodeResult(True, 1.0, 2, transcript=STEPS, memory_trajectory=TRAJ * 50)
    out = writer.write("find the pen.", result, _llm("1. look around\n\n2. take it", seen))
    assert out["error"] is None and out["kind"] == "script"
    # the stored text: the official headers, the whole script (blank lines kept, no 6-line cut)
    # and the env's trajectory uncut (max_trajectory_chars is the memrl layout's)
    assert out["experience"] == ("Task: find the pen.\n\nSCRIPT:\n1. look around\n\n2. take it\n\n"
                                 "TRAJECTORY:\n" + TRAJ * 50)
    (req,) = seen
    prompt = req.messages[0][1]
    assert TRAJ * 50 in prompt and "find the pen." not in prompt  # the script sees the trajectory only
    assert req.stop == () and req.max_tokens == 4096 and req.purpose == "write-script"


def test_the_official_failure_holds_a_reflection_at_its_own_temperature() -> None:
    seen: list[LLMRequest] = []
    writer = ExperienceWriter(layout="official", max_tokens=512, reflection_temperature=0.3)
    result = EpisodeResult(False, 0.0, 2, transcript=STEPS, memory_trajectory="the raw reply")
    out = writer.write("x" * 5000, result, _llm("Looked in the wrong place.", seen))
    assert out["experience"] == ("TASK REFLECTION:\nTask: " + "x" * 4096 + "\n\nWhat went wrong:\n"
                                 "Looked in the wrong place.\n\nFailed approach:\nthe raw reply\n")
    (req,) = seen
    assert req.temperature == pytest.approx(0.3) and "x" * 4096 in req.messages[0][1]
    assert "the raw reply" in req.messages[0][1] and req.purpose == "write-reflection"


def test_a_failed_writer_call_as_the_official_code_handles_it() -> None:
    from memrl.llm.base import LLMError

    writer = ExperienceWriter(layout="official")
    boom = LLMError("provider down")
    ok = writer.write("t", EpisodeResult(True, 1.0, 1, memory_trajectory="r"), _llm(boom, []))
    assert ok["experience"] is None and "provider down" in ok["error"]  # no memory for that success
    bad = writer.write("t", EpisodeResult(False, 0.0, 1, memory_trajectory="r"), _llm(boom, []))
    assert "What went wrong:\nReflection not available" in bad["experience"] and bad["error"]
    # no env text: the transcript, uncut
    assert writer.official_trajectory(EpisodeResult(False, 0.0, 2, transcript=STEPS)) == \
        "> look\nYou see a desk 1.\n> go to desk 1\nOn the desk 1, you see a pen 1."
    with pytest.raises(ValueError):
        ExperienceWriter(layout="paper")


def test_a_memory_joined_to_another_key_is_shown_under_its_own_task() -> None:
    memrl_text = "Task: heat an egg.\nOutcome: solved\nPlan:\n1. find the egg"
    official_fail = ("TASK REFLECTION:\nTask: cool an apple.\nIn the kitchen.\n\n"
                     "What went wrong:\nr\n\nFailed approach:\nx\n")
    joined = [RetrievedMemory("a", "heat a potato.", memrl_text, 0.0, 0.95, 0.0, True),
              RetrievedMemory("b", "cool a pear.", official_fail, 0.0, 0.93, 0.0, False),
              RetrievedMemory("c", "the key", "no header here", 0.0, 0.9, 0.0, None)]
    assert [own_task(m) for m in joined] == ["heat an egg.", "cool an apple.\nIn the kitchen.", "the key"]
    block = format_memories(joined)
    assert "(earlier task: heat an egg.)" in block and "heat a potato." not in block
    assert "cool a pear." not in block and "(earlier task: the key)" in block


def test_epsilon_returns_its_random_picks_in_rank_order_or_as_drawn() -> None:
    ranked = np.arange(40)
    ordered = epsilon_greedy(ranked, 5, 1.0, np.random.default_rng(3))
    drawn = epsilon_greedy(ranked, 5, 1.0, np.random.default_rng(3), random_order=True)
    assert sorted(drawn.tolist()) == ordered.tolist()  # the same draw
    assert drawn.tolist() != ordered.tolist()  # in the order drawn (this seed's draw is unsorted)
    assert epsilon_greedy(ranked, 5, 0.0, np.random.default_rng(3), random_order=True).tolist() == [0, 1, 2, 3, 4]


def test_the_provider_emulation_answers_the_official_layouts() -> None:
    """The fault server's replies (memrl.testing.replies) to the official prompts: the ALFWorld
    chat dialogue gets the room tour as Thought/Action (the expert's actions where recorded),
    the official writer's script prompt a script, the official judge its four lines."""
    from memrl.testing import replies
    from memrl_envs.alfworld import chat
    from memrl_envs.hle import judge

    assert replies.ALFWORLD_NEW_TASK == chat.NEW_TASK  # the emulation's copy of the marker
    start = "You are in the middle of a room. Looking quickly around you, you see a desk 1, and a shelf 2.\n" \
            "Your task is to: put a pen on the shelf."
    dialogue = [{"role": "system", "content": "Answer with Thought: ... then Action: ..."},
                {"role": "user", "content": "Here is an example:\nYou are in a room."},
                {"role": "assistant", "content": "Thought: go.\nAction: go to desk 9"},
                {"role": "user", "content": chat.NEW_TASK + start}]
    tour = [replies.reply_for(dialogue + [{"role": "assistant", "content": "x"}, {"role": "user", "content": "o"}] * n)
            for n in range(5)]
    assert [t.split("Action: ")[-1] for t in tour] == ["look", "look", "inventory", "go to desk 1", "open desk 1"]
    assert all(t.startswith("Thought: ") for t in tour)
    expert = {start: ["go to desk 1", "take pen 1 from desk 1"]}
    assert replies.reply_for(dialogue, expert=expert).endswith("Action: go to desk 1")
    from memrl.memory.writer import OFFICIAL_SCRIPT_PROMPT
    assert replies.reply_for([{"role": "user", "content": OFFICIAL_SCRIPT_PROMPT.format(trajectory="t")}]) \
        == replies.SCRIPT_REPLY
    official = judge.build_prompt("2+2?", "Exact Answer: 4", "4", rule="official")
    lines = replies.reply_for([{"role": "user", "content": official}])
    verdict = judge.parse_verdict(lines, "official")
    assert lines.splitlines()[2] == "correct: yes" and verdict.correct and "{" not in lines
    assert replies.reply_for([{"role": "user", "content": judge.build_prompt("2+2?", "Exact Answer: 5", "4")}]) \
        .startswith("{")  # memrl's rule asks for JSON
