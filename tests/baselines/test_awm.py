"""Agent Workflow Memory (memrl_baselines/awm.py, docs/methods.md): the induction trigger (the
model's own verdict, never the env's reward; nothing from an errored episode), workflows read
from fixed replies (two steps at least), and every workflow given to later episodes."""

from __future__ import annotations

import pytest
from clients import make_client

from memrl.core.records import EpisodeResult, Step, Task
from memrl.llm.embed import HashingEmbedder
from memrl.llm.scripted import ScriptedBackend
from memrl.memory.base import LearnItem
from memrl_baselines.awm import (PURPOSE_INDUCE, PURPOSE_JUDGE, WORKFLOW_START, AWMMemory, AWMSettings, continued,
                                 induces, parse_workflows, render_workflows)
from memory_state import learn

WORKFLOWS = """ Heat an object
1. Go to {place} and take {object}.
2. Heat {object} with the microwave.
3. Put {object} on {target}.

Workflow 2: Look around
1. Look.

Workflow 3: Heat an object
1. Go to the microwave.
2. Heat.

**Workflow 4:** Find an object
- Open {receptacle}.
- Take {object} from {receptacle}."""


def test_the_trigger_is_the_judged_success():
    assert induces(judged_success=True, errored=False) is True
    assert induces(judged_success=False, errored=False) is False
    assert induces(judged_success=True, errored=True) is False
    assert induces(judged_success=True, errored=True, learn_from_errors=True) is True


def test_workflows_have_two_steps_or_more_and_distinct_titles():
    got = parse_workflows(continued(WORKFLOWS), min_steps=2)
    assert got == [{"title": "Heat an object", "steps": ["Go to {place} and take {object}.",
                                                         "Heat {object} with the microwave.",
                                                         "Put {object} on {target}."]},
                   {"title": "Find an object", "steps": ["Open {receptacle}.", "Take {object} from {receptacle}."]}]
    assert [w["title"] for w in parse_workflows(continued(WORKFLOWS), min_steps=1)] == \
        ["Heat an object", "Look around", "Find an object"]
    assert continued("Workflow 1: Go\n1. a\n2. b") == "Workflow 1: Go\n1. a\n2. b"  # a chat model's restart
    assert WORKFLOW_START == "Workflow 1:"
    assert render_workflows("heat bread", got[1:]).splitlines() == [
        "Task: heat bread", "Workflows:", "Workflow: Find an object", "  1. Open {receptacle}.",
        "  2. Take {object} from {receptacle}."]


def model(verdict: str, log: list):
    def answer(request):
        purpose = request.sample_id.rsplit("/", 2)[1]
        log.append((purpose, request.messages[-1][1]))
        return verdict if purpose == PURPOSE_JUDGE else WORKFLOWS
    return make_client(ScriptedBackend(answer), max_retries=0)


def make(tmp_path, **kw) -> AWMMemory:
    return AWMMemory(AWMSettings(**kw), bank_dir=tmp_path / "bank", embedder=HashingEmbedder(dim=64))


def episode(success: bool, errors: list[str] | None = None) -> EpisodeResult:
    return EpisodeResult(success=success, reward=float(success), steps=1, errors=errors or [],
                         transcript=[Step("heat bread with microwave 1", "You heat the bread.")])


@pytest.mark.parametrize("env_success,verdict,induced", [
    (False, " success - the bread is hot.", True),    # judged a success: induce, whatever the env says
    (True, " failure - nothing changed.", False),     # judged a failure: no induction, the env's win unseen
    (True, " it went fine.", False),                  # no verdict: the default (failure)
])
def test_induction_follows_the_judge_not_the_env(tmp_path, env_success, verdict, induced):
    memory = make(tmp_path)
    log: list = []
    task = Task("t1", "heat some bread")
    digest = memory.digest(task, episode(env_success), epoch=1, llm=model(verdict, log).episode("s0/e1/t1", 0))
    assert [p for p, _ in log] == ([PURPOSE_JUDGE, PURPOSE_INDUCE] if induced else [PURPOSE_JUDGE])
    assert digest["judged_success"] is induced and digest["error"] is None
    learn(memory, [LearnItem(task=task, result=episode(env_success), injected=[], epoch=1, digest=digest)])
    entries = list(memory.bank.iter_entries())
    assert len(entries) == int(induced)
    if induced:
        assert entries[0].kind == "workflow" and len(entries[0].extra["workflows"]) == 2
        assert "heat bread with microwave 1" in log[1][1] and log[1][1].endswith(WORKFLOW_START)


def test_an_errored_episode_is_not_judged(tmp_path):
    log: list = []
    got = make(tmp_path).digest(Task("t1", "heat"), episode(False, ["llm: timeout"]), epoch=1,
                                llm=model(" success", log).episode("s0/e1/t1", 0))
    assert got is None and log == []


def test_every_workflow_is_given_to_later_episodes(tmp_path):
    memory = make(tmp_path)
    log: list = []
    items = []
    for n, intent in enumerate(["heat some bread", "cool a tomato", "clean a mug"]):
        task = Task(f"t{n}", intent)
        llm = model(" success - done.", log).episode(f"s0/e1/t{n}", 0)
        items.append(LearnItem(task=task, result=episode(True), injected=[], epoch=1,
                               digest=memory.digest(task, episode(True), epoch=1, llm=llm)))
    learn(memory, items)
    got = memory.retrieve(Task("x", "put a pan on the stove"))
    assert [m.memory_id for m in got] == ["e001:t0", "e001:t1", "e001:t2"]  # oldest first, all of them
    memory.close()
    capped = make(tmp_path, max_workflows=2).retrieve(Task("x", "heat some bread"))
    assert [m.memory_id for m in capped] == ["e001:t1", "e001:t2"]  # the newest two
    assert capped[0].similarity < 1.0


def test_probes_name_judge_and_induction(tmp_path):
    probes = make(tmp_path).model_probes(Task("t", "heat some bread"))
    assert [(p.purpose, p.answer_tokens, p.budget_key) for p in probes] == [
        (PURPOSE_JUDGE, 64, "memory.judge_max_tokens"), (PURPOSE_INDUCE, 320, "memory.induce_max_tokens")]


def test_a_reply_without_a_workflow_keeps_nothing_and_an_empty_one_is_an_error(tmp_path):
    memory = make(tmp_path)
    for reply, error in (("1. Look.\nWorkflows:", None), ("   ", "induce: the model's reply was empty")):
        def answer(request, reply=reply):
            return " success - done." if request.sample_id.rsplit("/", 2)[1] == PURPOSE_JUDGE else reply
        llm = make_client(ScriptedBackend(answer), max_retries=0).episode("s0/e1/t1", 0)
        digest = memory.digest(Task("t1", "heat"), episode(True), epoch=1, llm=llm)
        assert digest["workflows"] == [] and digest["experience"] is None and digest["error"] == error
