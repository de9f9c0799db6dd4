"""A memory is a record (memrl.core.memory_record): its writer keeps where each part lies in
the text it wrote, every display reads the parts from that record (memrl.env.displays), and
a text without one (an old bank) is read by the one reader of old text
(memrl.core.memory_parts). These tests hold the three together:

- every display shows every stored layout the same from the record as the old reader did
  from the text (so old banks and new ones read alike, and the golden prompts stand);
- where the text alone misleads (a model's note with a ``> `` line, a task with a blank
  line), the record is right and the text-reading was not;
- a record that does not fit its text is not trusted; records survive the bank;
- the index of displays names a callable for every format each benchmark offers.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from clients import make_client
from memrl.core.memory_parts import legacy_parts, parts_of
from memrl.core.memory_record import MemoryRecord, memrl_text, official_text
from memrl.core.records import EpisodeResult, RetrievedMemory, Step
from memrl.env import displays
from memrl.env.memory_block import format_memories, format_memories_as_episodes, own_task
from memrl.llm.base import LLMRequest
from memrl.llm.scripted import ScriptedBackend
from memrl.memory.writer import ExperienceWriter
from memrl_baselines.awm import workflows_entry
from memrl_baselines.memp import compose_entry
from memrl_baselines.reasoningbank import items_entry
from memrl_baselines.rag import trajectory_entry
from memrl_baselines.reflection import success_memory

STEPS = [Step("look", "You see a desk 1."), Step("go to desk 1", "On the desk 1, you see a pen 1. ")]
CHAT = json.dumps([{"role": "user", "content": "Your task is to: find the pen."},
                   {"role": "assistant", "content": "Thought: look.\nAction: look"},
                   {"role": "user", "content": "Observation: You see a desk 1."}])
LIFELONG = "user: You are the administrator of a Linux machine. Rules...\nuser: Task: q\nassistant: ls"


def _llm(answer: str):
    def fn(request: LLMRequest) -> str:
        return answer

    return make_client(ScriptedBackend(fn), max_retries=0).episode(sample_prefix="s/e1/t", seed=0)


def _written() -> list[tuple[str, str, dict, bool]]:
    """(label, text, record, success) of every stored layout the project writes."""
    out = []
    for layout in ("memrl", "official"):
        for include in (True, False):
            writer = ExperienceWriter(layout=layout, include_trajectory=include)
            for success in (True, False):
                for answer in ("1. go to the desk\n2. take the pen", ""):
                    for env_text in (None, CHAT, LIFELONG):
                        for steps in (STEPS, []):
                            result = EpisodeResult(success, float(success), len(steps), transcript=steps,
                                                   memory_trajectory=env_text)
                            got = writer.write("find the pen.", result, _llm(answer) if answer else None)
                            if got["experience"] is not None:
                                out.append((f"{layout}/{include}/{success}/{bool(answer)}/{env_text is None}",
                                            got["experience"], got["record"], success))
    for success in (True, False):
        for steps in (STEPS, []):
            res = EpisodeResult(success, float(success), len(steps), transcript=steps)
            out.append(("rag", *trajectory_entry("heat an egg.", res, None), success))
            out.append(("memp", *compose_entry("heat an egg.", success, "1. a\n2. b" if steps else "",
                                               "> look\nok" if steps else ""), success))
        out.append(("reflection", *success_memory("heat an egg.", EpisodeResult(True, 1.0, 2, transcript=STEPS), 100),
                    True))
    return out


WRITTEN = _written()


def _shows(mems: list[RetrievedMemory]) -> dict[str, str]:
    from memrl_envs.alfworld.chat import format_official_memories
    from memrl_envs.bigcodebench.prompts import official_memory_block
    from memrl_envs.hle.prompts import format_memories as hle_memories
    from memrl_envs.lifelong.memory_context import format_official

    return {"text": format_memories(mems), "episode": format_memories_as_episodes(mems, lambda t: f"Your task: {t}"),
            "alfworld.official": format_official_memories(mems), "bcb.official": official_memory_block(mems),
            "bcb.official.bug": official_memory_block(mems, header_bug=True),
            "lifelong.official": format_official(mems),
            "hle": hle_memories(mems), "own_task": "|".join(own_task(m) for m in mems)}


@pytest.mark.parametrize("label,text,record,success", WRITTEN, ids=[w[0] for w in WRITTEN])
def test_every_display_shows_a_record_as_the_old_reader_showed_its_text(label, text, record, success) -> None:
    assert record is not None and MemoryRecord.from_dict(record).length == len(text)
    with_record = RetrievedMemory("m", "the key's task", text, 0.0, 1.0, 1.0, success, record=record)
    as_old_text = replace(with_record, record=None)
    assert _shows([with_record]) == _shows([as_old_text])
    parts = with_record.parts()
    assert parts.task is not None and parts.task.strip() in text


def test_the_record_is_right_where_the_text_alone_misleads() -> None:
    # a reflection whose second line starts like an action: read from the text, the
    # trajectory would start there
    reflection = "I looked in the wrong place.\n> go to desk 1 came too late"
    text, record = memrl_text("find the pen.", solved=False, notes=f"Reflection: {reflection}", note=reflection,
                              note_kind="reflection", heading="Failed attempt:", trajectory="> look\nYou see a desk 1.")
    mem = RetrievedMemory("m", "k", text, 0.0, 1.0, 1.0, False, record=record.to_dict())
    block = format_memories_as_episodes([mem], lambda t: f"Your task: {t}")
    assert f"Reflection: {reflection}\nYour task: find the pen.\n> look\nYou see a desk 1." in block
    old = legacy_parts(text)
    assert old.trajectory.startswith("> go to desk 1")  # what reading the text found
    # a task with a blank line in the official layout: the whole task, from the record
    text, record = official_text("cool an apple.\n\nIt is in the fridge.", "r", "x", solved=False, actions=False)
    assert parts_of(text, record.to_dict()).task == "cool an apple.\n\nIt is in the fridge."


def test_a_memory_without_an_outcome_line_is_shown_under_its_task_alone() -> None:
    # AWM's workflows and ReasoningBank's items have no Outcome line: reading the text, the
    # task ran on to the end of the text; the record names it
    for text, record in (workflows_entry(" heat bread ", [{"title": "heat", "steps": ["a", "b"]}]),
                         items_entry("heat bread", [{"title": "t", "content": "c"}])):
        mem = RetrievedMemory("m", "k", text, 0.0, 1.0, 1.0, True, record=record)
        assert own_task(mem) == "heat bread" and "(earlier task: heat bread) ---" in format_memories([mem])
        assert legacy_parts(text).task != "heat bread"  # what reading the text found


def test_a_record_that_does_not_fit_its_text_is_not_trusted() -> None:
    text, record = memrl_text("t", solved=True, notes="Plan:\n1. a", note="1. a", note_kind="plan")
    changed = text + "\nmore"
    assert parts_of(changed, record.to_dict()) == legacy_parts(changed)
    assert parts_of(text, {"layout": "memrl"}) == legacy_parts(text)  # damaged: read as old text
    assert parts_of(text, record).notes == "Plan:\n1. a" and parts_of(text, record).note == "1. a"
    with pytest.raises(ValueError):
        memrl_text("t", notes="Plan:\n1. a", note="2. b")


def test_records_survive_the_bank(tmp_path) -> None:
    from memrl.memory.bank import ChromaBank
    from memrl.memory.entry import BankUpdate, MemoryEntry

    text, record = memrl_text("t", solved=True, heading="Trajectory:", trajectory="> look\nok")
    bank = ChromaBank(tmp_path / "bank", collection="memories")
    try:
        bank.apply(BankUpdate(add=[MemoryEntry("e1", "t", text, [1.0, 0.0], extra={"record": record.to_dict()})]))
        got = bank.get(["e1"])["e1"].retrieved(1.0, 1.0)
    finally:
        bank.close()
    assert got.record == record.to_dict() and got.parts().trajectory == "> look\nok"


def test_the_index_names_a_display_for_every_format_each_benchmark_offers() -> None:
    from memrl_envs.alfworld.prompts import MEMORY_FORMATS as ALFWORLD
    from memrl_envs.hle.prompts import MEMORY_FORMATS as HLE

    assert ALFWORLD == displays.formats("alfworld") and HLE == displays.formats("hle")
    for benchmark, table in displays.DISPLAYS.items():
        for name in table:
            assert callable(displays.display(benchmark, name))
    with pytest.raises(ValueError, match="memrl | official"):
        displays.display("hle", "paper")
    with pytest.raises(KeyError, match="no memory displays"):
        displays.display("webshop", "memrl")
