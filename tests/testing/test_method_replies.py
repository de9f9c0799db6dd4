"""The provider emulation answers the newer memory methods' prompts (memrl.testing.replies), in
forms their parsers read: the self-judge's verdict, ReasoningBank's items, ExpeL's operations,
AWM's workflows. memrl.testing keeps its own copy of each prompt's last line; this checks the
copies against the prompts the methods build."""

from __future__ import annotations

from memrl.memory.writer import SAMPLE_ATTEMPT
from memrl.testing.replies import reply_for
from memrl_baselines import expel_insights as ins
from memrl_baselines.awm import continued as workflows_of
from memrl_baselines.awm import induce_prompt, parse_workflows
from memrl_baselines.judge import Judge, parse_verdict
from memrl_baselines.reasoningbank import continued as items_of
from memrl_baselines.reasoningbank import extraction_prompt, parse_items


def answer(prompt: str) -> str:
    return reply_for([{"role": "user", "content": prompt}])


def test_the_judge_gets_a_verdict_both_ways():
    judge = Judge("awm-judge", 64, "memory.judge_max_tokens")
    verdicts = {parse_verdict(answer(judge.prompt(f"heat the bread {n}", SAMPLE_ATTEMPT))) for n in range(12)}
    assert verdicts == {True, False}


def test_reasoningbank_gets_items():
    for ok in (True, False):
        reply = answer(extraction_prompt("heat the bread", SAMPLE_ATTEMPT, ok, "it did", 3))
        assert len(parse_items(items_of(reply), 3)) == 2


def test_expel_gets_an_upvote_and_an_add():
    shown = [ins.Insight(1, "Open containers before searching elsewhere.", 2)]
    reply = answer(ins.compare_prompt("heat the bread", SAMPLE_ATTEMPT, SAMPLE_ATTEMPT, shown, False, 4))
    ops = ins.resolve(ins.parse_operations(reply), shown)
    assert [o.op for o in ops] == ["UPVOTE", "ADD"] and ops[0].target == 1
    assert [o.op for o in ins.resolve(ins.parse_operations(answer(ins.success_prompt(["> a"], [], False, 4))),
                                      [])] == ["ADD"]


def test_awm_gets_a_workflow():
    reply = answer(induce_prompt("heat the bread", SAMPLE_ATTEMPT))
    assert [len(w["steps"]) for w in parse_workflows(workflows_of(reply), 2)] == [3]
