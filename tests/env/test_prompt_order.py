"""Every env's prompt puts what changes least first (instructions, demonstrations, memories,
then the episode), so a provider's prompt cache, which serves a prompt's shared prefix at the
cached rate, can serve it: the steps of one episode share everything but their history, and
the tasks of a run share the instructions."""

from __future__ import annotations

from pathlib import Path

from memrl.core.records import RetrievedMemory, Step

MEMORY = RetrievedMemory(memory_id="e001:x", intent="an earlier task", experience="REMEMBERED ADVICE",
                         q=0.5, similarity=0.9, score=1.0, success=True)


def common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def check_order(without: str, with_memory: str, task_text: str, instruction_head: str) -> None:
    assert without.startswith(instruction_head) and with_memory.startswith(instruction_head)
    shared = common_prefix(without, with_memory)
    assert shared >= len(instruction_head)  # the instructions are one shared prefix
    assert with_memory.index(instruction_head) < with_memory.index("REMEMBERED ADVICE") < with_memory.index(task_text)


def test_alfworld_steps_share_everything_before_their_history():
    from memrl_envs.alfworld.prompts import INSTRUCTION, build_prompt

    start = "You are in the middle of a room.\nYour task is to: put a mug in the sink."
    one = build_prompt(["DEMO"], [MEMORY], start, [Step("look", "You see a sink.")], memory_format="text")
    two = build_prompt(["DEMO"], [MEMORY], start, [Step("look", "You see a sink."), Step("go to sink 1", "OK")],
                       memory_format="text")
    assert two.startswith(one[:-1])  # the next step only appends
    check_order(build_prompt(["DEMO"], [], start, []),
                build_prompt(["DEMO"], [MEMORY], start, [], memory_format="text"),
                "put a mug in the sink", INSTRUCTION[:60])


def test_lifelong_os_and_db_put_the_task_after_the_memories():
    from memrl_envs.lifelong_db import prompts as db_prompts
    from memrl_envs.lifelong_db.data import Column, DbTask
    from memrl_envs.lifelong_os import prompts as os_prompts

    check_order(os_prompts.build_prompt("create /srv/x", [], []),
                os_prompts.build_prompt("create /srv/x", [MEMORY], []),
                "create /srv/x", os_prompts.INSTRUCTION[:60])
    task = DbTask(key="1", instruction="How many rows are there?", table="t", columns=(Column("id", "INT"),),
                  rows=((1,),), answer_type="direct", direct_rows=((1,),), md5=None, gold_sql="SELECT 1",
                  skills=())
    check_order(db_prompts.build_prompt(task, [], []), db_prompts.build_prompt(task, [MEMORY], []),
                "How many rows are there?", db_prompts.INSTRUCTION[:60])


def test_bigcodebench_puts_the_instruction_first():
    TINY = Path(__file__).resolve().parents[1] / "fixtures" / "bigcodebench" / "tiny.jsonl"

    from memrl_envs.bigcodebench import data as bcb_data
    from memrl_envs.bigcodebench.prompts import build_prompt

    problem = bcb_data.read_jsonl(TINY).problems[1]
    check_order(build_prompt(problem, "instruct", []), build_prompt(problem, "instruct", [MEMORY]),
                problem.instruct_prompt.strip()[:40], "Write one self-contained Python script")


def test_hle_puts_the_instructions_in_the_system_message_and_the_question_last():
    from memrl_envs.hle.data import HLEQuestion
    from memrl_envs.hle.prompts import build_messages

    q = HLEQuestion(id="q1", question="What is 2+2?", answer="4", answer_type="exactMatch", category="Math")
    (sys_role, system), (user_role, user) = build_messages(q, [MEMORY])
    assert (sys_role, user_role) == ("system", "user") and build_messages(q, [])[0][1] == system
    assert user.index("REMEMBERED ADVICE") < user.index("What is 2+2?")
