"""ExpeL (memrl_baselines/expel.py, expel_insights.py; docs/methods.md): the insight operations
(add / edit / upvote / downvote with their importance counts) against hand-worked lists, read
from fixed replies; when the module asks for a comparison or a group of successes; and
recall of the most similar successful trajectories with the insights."""

from __future__ import annotations

from clients import make_client

from memrl.core.records import EpisodeResult, Step, Task
from memrl.llm.embed import HashingEmbedder
from memrl.llm.scripted import ScriptedBackend
from memrl.memory.base import LearnItem
from memrl_baselines import expel_insights as ins
from memrl_baselines.expel import INSIGHTS_ID, PURPOSE_COMPARE, PURPOSE_SUCCESS, ExpeLMemory, ExpeLSettings
from memory_state import learn

Ins = ins.Insight
SHOWN = [Ins(1, "Open containers before searching elsewhere.", 3), Ins(2, "Check the goal.", 1),
         Ins(3, "Go to the sink to clean things.", 2)]


# ------------------------------------------------------------------ operations (pure)
def test_operations_are_read_from_a_reply():
    reply = """Here are my operations:
UPVOTE 1: Open containers before searching elsewhere.
- EDIT 3: Clean an object at a sink or a basin.
AGREE 2: Check the goal.
REMOVE 2: Check the goal.
ADD 4: Take the object before going to its destination.
ADD 5: this one has no period
ADD 6: Never ADD two things at once.
DOWNVOTE: Something not listed."""
    assert ins.parse_operations(reply) == [
        ins.Operation("UPVOTE", 1, "Open containers before searching elsewhere."),
        ins.Operation("EDIT", 3, "Clean an object at a sink or a basin."),
        ins.Operation("UPVOTE", 2, "Check the goal."),       # AGREE is ExpeL's upvote
        ins.Operation("DOWNVOTE", 2, "Check the goal."),     # REMOVE is ExpeL's downvote
        ins.Operation("ADD", 4, "Take the object before going to its destination."),
        ins.Operation("DOWNVOTE", None, "Something not listed.")]


def test_operations_resolve_against_the_list_the_model_saw():
    ops = [ins.Operation("ADD", 4, "Open containers before searching elsewhere. Always."),  # repeats 1
           ins.Operation("ADD", 5, "Turn on the lamp to look at something."),
           ins.Operation("EDIT", 9, "Out of range."),
           ins.Operation("EDIT", 2, "Check the goal. Twice."),   # holds insight 2's text: an upvote
           ins.Operation("EDIT", 3, "Clean things at a sink."),
           ins.Operation("UPVOTE", 7, "Open containers before searching elsewhere."),  # by text, not number
           ins.Operation("DOWNVOTE", 1, "Nothing like any insight.")]
    assert ins.resolve(ops, SHOWN) == [
        ins.Resolved("ADD", None, "Turn on the lamp to look at something."),
        ins.Resolved("UPVOTE", 2, "Check the goal."),
        ins.Resolved("EDIT", 3, "Clean things at a sink."),
        ins.Resolved("UPVOTE", 1, "Open containers before searching elsewhere.")]


def test_operations_apply_with_expels_counts():
    """Downvotes, upvotes, edits, adds, in that order; counts 3/1/2 (worked by hand):
    downvote 2: 1 - 1 = 0, removed; upvote 1: 3 + 1 = 4; edit 3: 2 + 1 = 3, new text;
    add: count 2, id 4 (the next id); sorted by count: 1 (4), 3 (3), 4 (2)."""
    ops = [ins.Resolved("ADD", None, "Turn on the lamp."), ins.Resolved("EDIT", 3, "Clean at a sink."),
           ins.Resolved("UPVOTE", 1, SHOWN[0].text), ins.Resolved("DOWNVOTE", 2, SHOWN[1].text),
           ins.Resolved("UPVOTE", 99, "An insight removed since.")]
    got, next_id = ins.apply_operations(SHOWN, ops, next_id=4, max_insights=20)
    assert got == [Ins(1, SHOWN[0].text, 4), Ins(3, "Clean at a sink.", 3), Ins(4, "Turn on the lamp.", 2)]
    assert next_id == 5


def test_a_downvote_costs_three_when_the_list_is_over_full():
    many = [Ins(n, f"Insight {n}.", 4) for n in range(1, 7)]  # 6 >= max 1 + 5: over full
    got, _ = ins.apply_operations(many, [ins.Resolved("DOWNVOTE", 1, "Insight 1.")], 7, max_insights=1)
    assert got[-1] == Ins(1, "Insight 1.", 1)
    got, _ = ins.apply_operations(many, [ins.Resolved("DOWNVOTE", 1, "Insight 1.")], 7, max_insights=2)
    assert got[-1] == Ins(1, "Insight 1.", 3)  # 6 < 2 + 5: not full, -1


def test_the_prompts_show_the_numbered_list_and_say_when_it_is_full():
    prompt = ins.compare_prompt("heat bread", "> ok", "> no", SHOWN, full=True, max_ops=4)
    assert "Current insights:\n1. Open containers before searching elsewhere.\n2. Check the goal." in prompt
    assert "The list is full" in prompt and prompt.endswith("Operations:\n")
    assert "(none yet)" in ins.success_prompt(["> a", "> b"], [], full=False, max_ops=4)
    assert ins.render_insights(SHOWN).splitlines()[1] == "1. Open containers before searching elsewhere."


# -------------------------------------------------------------------------- the module
def result(success: bool, action: str = "look") -> EpisodeResult:
    return EpisodeResult(success=success, reward=float(success), steps=1, transcript=[Step(action, "ok")])


class Model:
    """A scripted model answering the insight calls with fixed operations, logging them."""

    def __init__(self, reply: str):
        self.reply, self.log = reply, []
        self.client = make_client(ScriptedBackend(self), max_retries=0)

    def __call__(self, request):
        self.log.append((request.sample_id.rsplit("/", 2)[1], request.messages[-1][1]))
        return self.reply

    def episode(self, task_id: str, epoch: int):
        return self.client.episode(f"s0/e{epoch}/{task_id}", 0)


def play(memory, model, epoch: int, outcomes: dict[str, bool]) -> None:
    items = []
    for task_id, ok in outcomes.items():
        task = Task(task_id, f"put the {task_id} on the table")
        digest = memory.digest(task, result(ok, f"take {task_id}"), epoch=epoch, llm=model.episode(task_id, epoch))
        items.append(LearnItem(task=task, result=result(ok), injected=[], epoch=epoch, digest=digest))
    learn(memory, items)


def make(tmp_path, **kw) -> ExpeLMemory:
    return ExpeLMemory(ExpeLSettings(**kw), bank_dir=tmp_path / "bank", embedder=HashingEmbedder(dim=64))


def test_a_task_with_both_outcomes_is_compared_and_the_insights_change(tmp_path):
    memory = make(tmp_path, success_group=99)
    model = Model("ADD 1: Take the object first.\nADD 2: Look around first.")
    play(memory, model, 1, {"apple": False, "pear": True})
    assert model.log == []  # nothing to compare yet, no group of successes
    play(memory, model, 2, {"apple": True, "pear": True})
    # apple failed, then succeeded: one comparison, the success and the failure in the prompt
    assert [p for p, _ in model.log] == [PURPOSE_COMPARE]
    prompt = model.log[0][1]
    assert "Successful attempt:\nTask: put the apple" in prompt and "Failed attempt:\nTask: put the apple" in prompt
    assert memory.insights() == [Ins(1, "Take the object first.", 2), Ins(2, "Look around first.", 2)]
    # the next comparison sees the list, numbered; an upvote by its text counts
    model.reply = "UPVOTE 2: Look around first.\nDOWNVOTE 1: Take the object first."
    play(memory, model, 3, {"apple": False})
    assert "1. Take the object first.\n2. Look around first." in model.log[-1][1]
    assert memory.insights() == [Ins(2, "Look around first.", 3), Ins(1, "Take the object first.", 1)]


def test_a_group_of_successes_of_distinct_tasks_is_examined_once(tmp_path):
    memory = make(tmp_path, success_group=3)
    model = Model("ADD 1: Work through the receptacles in order.")
    play(memory, model, 1, {"a": True, "b": True})
    assert model.log == []  # two successes waiting, a group is three
    play(memory, model, 1 + 1, {"c": True})
    assert [p for p, _ in model.log] == [PURPOSE_SUCCESS]
    assert all(f"put the {t} on the table" in model.log[0][1] for t in "abc")
    critiqued = {e.memory_id: e.extra.get("critiqued") for e in memory.bank.iter_entries() if e.kind == "trajectory"}
    assert critiqued == {"e001:a": True, "e001:b": True, "e002:c": True}
    play(memory, model, 3, {"d": True})  # the group's members are not waiting any more
    assert len(model.log) == 1


def test_recall_is_the_k_most_similar_successes_then_the_insights(tmp_path):
    memory = make(tmp_path, k=2, success_group=99)
    model = Model("ADD 1: Take the object first.")
    play(memory, model, 1, {"apple": True, "apple pie": False, "red apple": True, "bolt": True})
    play(memory, model, 2, {"apple pie": True})  # a comparison: the insight list starts
    got = memory.retrieve(Task("x", "put the apple on the table"))
    ids = [m.memory_id for m in got]
    assert ids[-1] == INSIGHTS_ID and got[-1].experience.endswith("1. Take the object first.")
    trajectories = ids[:-1]
    assert len(trajectories) == 2 and trajectories[0] == "e001:apple"  # most similar first
    assert all(memory.bank.get([i])[i].success for i in trajectories)  # successes only, one per task
    assert len({memory.bank.get([i])[i].task_id for i in trajectories}) == 2


def test_probes_name_both_insight_calls(tmp_path):
    probes = make(tmp_path).model_probes(Task("t", "heat some bread"))
    assert [(p.purpose, p.answer_tokens, p.budget_key) for p in probes] == [
        (PURPOSE_COMPARE, 200, "memory.insight_max_tokens"), (PURPOSE_SUCCESS, 200, "memory.insight_max_tokens")]


def test_entries_a_bank_copy_brought_join_the_pool(tmp_path):
    """A teacher's trajectory (bank.init_from: id `init:...`, its own kind) is recalled as a
    success and compared with the agent's failure on its task."""
    from memrl.memory.entry import BankUpdate, MemoryEntry

    memory = make(tmp_path, k=1, success_group=99)
    intent = "put the apple on the table"
    memory.apply(BankUpdate(add=[MemoryEntry(
        memory_id="init:e001:apple", intent=intent, experience="Task: put the apple on the table\nOutcome: solved\n"
        "Trajectory:\n> take apple 1", embedding=[float(v) for v in memory.embedder.embed([intent])[0]], success=True,
        task_id="apple", kind="script", extra={"init_from": "teacher"})]))
    assert [m.memory_id for m in memory.retrieve(Task("apple", intent))] == ["init:e001:apple"]
    model = Model("ADD 1: Take the object first.")
    play(memory, model, 1, {"apple": False})
    assert [p for p, _ in model.log] == [PURPOSE_COMPARE]
    assert "Successful attempt:\nTask: put the apple on the table\nOutcome: solved\nTrajectory:\n> take apple 1" \
        in model.log[0][1]
