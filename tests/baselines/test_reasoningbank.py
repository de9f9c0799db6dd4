"""ReasoningBank (memrl_baselines/reasoningbank.py, docs/methods.md): memory items read from fixed
replies in the paper's Markdown format (at most 3, title + description + content), the
model's verdict read from fixed judge replies, extraction following the judged outcome (not
the env's reward, which the judge never sees), and retrieval of the most similar earlier
task's items."""

from __future__ import annotations

from clients import make_client

from memrl.core.records import EpisodeResult, Step, Task
from memrl.llm.embed import HashingEmbedder
from memrl.llm.scripted import ScriptedBackend
from memrl_baselines.judge import parse_verdict, thoughts_of
from memrl_baselines.reasoningbank import (ITEM_START, PURPOSE_FAILURE, PURPOSE_JUDGE, PURPOSE_SUCCESS,
                                           ReasoningBankMemory, ReasoningBankSettings, continued, parse_items,
                                           render_items)
from memory_state import learn

FOUR_ITEMS = """# Memory Item 1
## Title Open containers first
## Description Use when the object is not in sight.
## Content Open the closed receptacles of the room
before searching anything twice.

# Memory Item 2
## Title: Check the goal
## Description Before the last action.
## Content Re-read the task.

# Memory Item 3
## Title No content here
## Description This item has no content and is dropped.

# Memory Item 4
## Title Open containers first
## Description A repeated title is dropped.
## Content Repeated.

# Memory Item 5
## Title Fifth
## Description Past the limit once three are kept.
## Content Kept only if the limit allows.
"""


# ------------------------------------------------------------------- items (pure)
def test_items_are_parsed_from_the_papers_format_at_most_three():
    items = parse_items(FOUR_ITEMS, max_items=3)
    assert items == [
        {"title": "Open containers first", "description": "Use when the object is not in sight.",
         "content": "Open the closed receptacles of the room before searching anything twice."},
        {"title": "Check the goal", "description": "Before the last action.", "content": "Re-read the task."},
        {"title": "Fifth", "description": "Past the limit once three are kept.",
         "content": "Kept only if the limit allows."}]
    assert len(parse_items(FOUR_ITEMS, max_items=2)) == 2
    assert parse_items("I cannot help with that.", 3) == []


def test_a_reply_continues_the_prompts_first_heading():
    base = " Look first\n## Description When lost.\n## Content Look around."
    assert parse_items(continued(base), 3) == [{"title": "Look first", "description": "When lost.",
                                                "content": "Look around."}]
    chat = "```markdown\n# Memory Item 1\n## Title Look first\n## Content Look around.\n```"
    assert parse_items(continued(chat), 3) == [{"title": "Look first", "description": "", "content": "Look around."}]
    assert ITEM_START.endswith("## Title")


def test_render_items_is_the_one_display():
    text = render_items("heat the bread", parse_items(FOUR_ITEMS, 2))
    assert text.splitlines()[:4] == ["Task: heat the bread", "Memory items:", "1. Open containers first",
                                     "   When: Use when the object is not in sight."]


# ---------------------------------------------------------------------- judge (pure)
def test_the_verdict_is_the_first_word_after_status():
    # the prompt ends with "Status:": a base model continues it, a chat model may repeat it
    assert parse_verdict(" success - the bread was heated.") is True
    assert parse_verdict(" Failure - nothing happened. Status: success") is False
    assert parse_verdict("Status: **Succeeded** — it worked") is True
    assert parse_verdict(" success - it recovered from an early failure.") is True
    assert parse_verdict(" I think it went well.") is None and parse_verdict(None) is None
    # a small model repeating the instruction names both: unreadable
    assert parse_verdict(' "success" if the attempt completed the task or "failure" if it did not.') is None
    assert thoughts_of(" failure - the bread is **still** cold.") == "the bread is still cold."


# --------------------------------------------------------------- digest and retrieval
def trajectory(success: bool) -> EpisodeResult:
    return EpisodeResult(success=success, reward=float(success), steps=2,
                         transcript=[Step("go to microwave 1", "The microwave 1 is closed."),
                                     Step("open microwave 1", "You open the microwave 1.")])


def episode_llm(replies: dict[str, str], log: list):
    def answer(request):
        purpose = request.sample_id.rsplit("/", 2)[1]
        log.append((purpose, request.messages[-1][1], request.temperature))
        return replies[purpose]
    return make_client(ScriptedBackend(answer), max_retries=0).episode("s0/e1/t1", 0)


def make(tmp_path, **kw):
    return ReasoningBankMemory(ReasoningBankSettings(**kw), bank_dir=tmp_path / "bank",
                               embedder=HashingEmbedder(dim=64))


def test_extraction_follows_the_judged_outcome_not_the_env(tmp_path):
    memory = make(tmp_path)
    task = Task("t1", "heat some bread and put it on the table")
    log: list = []
    # the env says success; the model judges its attempt a failure: failure lessons are written
    llm = episode_llm({PURPOSE_JUDGE: " failure - The bread is still cold.", PURPOSE_FAILURE: FOUR_ITEMS}, log)
    digest = memory.digest(task, trajectory(True), epoch=1, llm=llm)
    assert [p for p, _, _ in log] == [PURPOSE_JUDGE, PURPOSE_FAILURE]
    judge_prompt, extract_prompt = log[0][1], log[1][1]
    # the judge sees the task and the attempt, never the outcome or the reward
    assert "open microwave 1" in judge_prompt and "solved" not in judge_prompt.lower()
    assert "success" not in judge_prompt.split("Attempt:")[1].split("Answer on one line")[0].lower()
    # the extraction sees the verdict and the judge's reasoning, ends at the first item's title
    assert "judged a failure" in extract_prompt and "The bread is still cold." in extract_prompt
    assert extract_prompt.endswith(ITEM_START) and log[1][2] == 0.0  # the model's temperature
    assert digest["judged_success"] is False and digest["verdict_parsed"] is True and digest["error"] is None
    assert len(digest["items"]) == 3
    learn(memory, [_item(task, trajectory(True), digest)])
    (entry,) = memory.bank.iter_entries()
    assert entry.kind == "reasoning-failure" and entry.success is True  # env success kept beside
    assert entry.extra["judged_success"] is False and len(entry.extra["items"]) == 3


def test_an_unreadable_verdict_takes_the_default_and_an_empty_extraction_is_an_error(tmp_path):
    memory = make(tmp_path)
    task = Task("t1", "heat some bread")
    log: list = []
    llm = episode_llm({PURPOSE_JUDGE: "Hard to say.", PURPOSE_FAILURE: "Sorry, no."}, log)
    digest = memory.digest(task, trajectory(False), epoch=1, llm=llm)
    assert digest["judged_success"] is False and digest["verdict_parsed"] is False
    # an answer without items: nothing to keep, and no error (the model did answer)
    assert digest["items"] == [] and digest["experience"] is None and digest["error"] is None
    llm = episode_llm({PURPOSE_JUDGE: "failure", PURPOSE_FAILURE: "  "}, log)
    assert "empty" in memory.digest(task, trajectory(False), epoch=1, llm=llm)["error"]
    learn(memory, [_item(task, trajectory(False), digest)])
    assert memory.bank.count() == 0  # nothing to remember
    memory2 = make(tmp_path / "2", default_verdict="success")
    llm = episode_llm({PURPOSE_JUDGE: "Hard to say.", PURPOSE_SUCCESS: FOUR_ITEMS}, log)
    assert memory2.digest(task, trajectory(False), epoch=1, llm=llm)["judged_success"] is True


def test_the_most_similar_earlier_tasks_items_are_injected(tmp_path):
    memory = make(tmp_path)
    llm = episode_llm({PURPOSE_JUDGE: "success - it worked", PURPOSE_SUCCESS: FOUR_ITEMS}, [])
    tasks = [Task("a", "heat some bread and put it on the table"), Task("b", "cool a tomato and put it in the fridge")]
    items = [_item(t, trajectory(True), memory.digest(t, trajectory(True), epoch=1, llm=llm)) for t in tasks]
    learn(memory, items)
    got = memory.retrieve(Task("c", "heat some bread and put it on the counter"))
    assert [m.memory_id for m in got] == ["e001:a"]  # k = 1, the paper's
    assert got[0].experience.startswith("Task: heat some bread") and "Memory items:" in got[0].experience
    assert len(make(tmp_path / "k2", k=2).retrieve(tasks[0])) == 0  # another bank: empty


def test_probes_name_each_purpose_with_its_budget(tmp_path):
    probes = make(tmp_path).model_probes(Task("t", "heat some bread"))
    assert [(p.purpose, p.answer_tokens, p.budget_key) for p in probes] == [
        (PURPOSE_JUDGE, 64, "memory.judge_max_tokens"), (PURPOSE_SUCCESS, 320, "memory.extract_max_tokens"),
        (PURPOSE_FAILURE, 320, "memory.extract_max_tokens")]
    assert probes[0].stop == ("\n",) and probes[0].prompt.endswith("Status:")


def _item(task, result, digest):
    from memrl.memory.base import LearnItem

    return LearnItem(task=task, result=result, injected=[], epoch=1, digest=digest)
