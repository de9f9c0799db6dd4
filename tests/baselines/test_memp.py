"""The MemP baseline (docs/design.md §6): its build / retrieve / update axes and deprecation, driven
through the real Runner on real ALFWorld games (valid_seen) by a scripted model, plus unit
tests of the pure parts, config composition and idempotent updates.

The scripted model tells requests apart by the purpose in their sample id
(`s<seed>/e<epoch>/<task id>/<purpose>/<n>`): it plays "look" by default, replays the
expert's winning actions on the winnable game, and answers the script / key-word /
adjustment prompts with recognisable text.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from memrl.config.sections import RunnerSettings
from memrl.config.validate import validate
from memrl.control.runner import Runner
from memrl.core.errors import ConfigError
from memrl.core.records import EpisodeResult, RetrievedMemory, Step, Task, read_episodes
from memrl.core.rundir import RunDir
from memrl.llm.base import LLMError
from clients import make_client

from memrl.llm.embed import HashingEmbedder
from memrl.llm.scripted import ScriptedBackend
from memrl.memory.bank import ChromaBank
from memrl.memory.base import LearnItem
from memrl.memory.entry import BankUpdate, MemoryEntry
from memrl_baselines.memp import (ADJUST_PROMPT, KEYWORD_PROMPT, SCRIPT_PROMPT, DeprecationSettings, MemPMemory,
                                  MemPSettings, compose_experience, is_deprecated, parse_keywords, parse_procedure)
from memory_state import snapshot
from data_paths import ALFWORLD

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = str(ROOT / "configs")

needs_data = pytest.mark.skipif(not ALFWORLD.is_dir(), reason=f"ALFWorld data not at {ALFWORLD}")

# The expert wins WIN in three real actions (after a no-op 'look'); LOSE is never won here.
WIN = "look_at_obj_in_light-Statue-None-DeskLamp-216/trial_T20190909_193045_208933"
LOSE = "look_at_obj_in_light-Bowl-None-DeskLamp-301/trial_T20190909_150719_492274"
STEPS = 3


# ----------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def cache_dir(request) -> Path:
    """Intents survive between sessions (shared with the other ALFWorld tests)."""
    return Path(request.config.cache.mkdir("memrl-alfworld"))


def make_env(cache_dir: Path, *, agent: str = "react", max_steps: int = STEPS,
             ids: tuple[str, ...] = (WIN, LOSE)):
    pytest.importorskip("alfworld", reason="the alfworld extra is not installed")
    from memrl_envs.alfworld import AlfworldEnv, AlfworldSettings

    settings = AlfworldSettings(split="valid_seen", data_root=str(ALFWORLD), max_steps=max_steps,
                                task_ids=list(ids), max_tasks=len(ids), cache_dir=str(cache_dir))
    env = AlfworldEnv(settings, agent=agent, show_progress=False)
    by_id = {t.task_id: t for t in env.tasks()}
    assert set(by_id) == set(ids)
    return env, [by_id[i] for i in ids]  # in the order asked for


@pytest.fixture(scope="module")
def winning_actions(cache_dir) -> list[str]:
    """The expert's actions on WIN without its no-op 'look'; they win within STEPS."""
    env, [task] = make_env(cache_dir, agent="expert", max_steps=15, ids=(WIN,))
    result = env.solve(task, [], None, seed=0)
    assert result.success, "the expert should win the statue game"
    actions = [s.action for s in result.transcript if s.action not in ("look", "inventory")]
    assert len(actions) <= STEPS
    return actions


def script_answer(purpose: str, task: str, epoch: int) -> str:
    """The recognisable answers to MemP's own prompts (with trailing junk a base model adds)."""
    if purpose == "memp-script":
        return f" SCRIPT-{task[:20]} step one\n2. SCRIPT second step\n\nTask: more text"
    if purpose == "memp-adjust":
        return f" REVISED-e{epoch} after failing {task[:20]}\n2. check the lamp first\n\nNoise"
    raise AssertionError(purpose)


class Script:
    """Scripted model: `act(epoch, task, n)` answers action prompts; logs every request."""

    def __init__(self, actions: list[str] | None = None, keywords=None):
        self.actions = actions
        self.keywords = keywords or {}
        self.log: list[tuple[int, str, str, int, str]] = []

    def __call__(self, request) -> str:
        prefix, purpose, n = request.sample_id.rsplit("/", 2)
        _, epoch, task = prefix.split("/", 2)
        prompt = request.messages[-1][1]
        self.log.append((int(epoch[1:]), task, purpose, int(n), prompt))
        if purpose == "act":
            if task == WIN and self.actions is not None and int(n) < len(self.actions):
                return f" {self.actions[int(n)]}\nYou arrive.\n> look"
            return " look"
        if purpose == "memp-keywords":
            intent = prompt.rsplit("Task: ", 1)[1].split("\n", 1)[0]
            return self.keywords[intent] + "\nTask: junk"
        return script_answer(purpose, task, int(epoch[1:]))

    def prompts(self, purpose: str, epoch: int | None = None, task: str | None = None) -> list[str]:
        return [p for e, t, pu, _, p in self.log
                if pu == purpose and epoch in (None, e) and task in (None, t)]

    def count(self) -> Counter:
        return Counter(pu for _, _, pu, _, _ in self.log)


def memp(tmp_path: Path, emb, **kw) -> MemPMemory:
    return MemPMemory(MemPSettings(**{"k": 3, **kw}), bank_dir=RunDir(tmp_path).bank, embedder=emb)


def run(run_dir: Path, env, tasks, memory, script: Script, *, epochs: int, embedder):
    backend = ScriptedBackend(script, model_id="scripted-memp")
    runner = Runner(run_dir, env=env, memory=memory,
                    llm=make_client(backend, max_concurrency=1, max_retries=0),
                    settings=RunnerSettings(epochs=epochs, batch_size=1, progress=False), seed=0,
                    embed_intents=embedder.embed)
    runner.run(tasks)
    return {(r.epoch, r.task_id): r for r in read_episodes(RunDir(run_dir).episodes)}


def bank_of(memory: MemPMemory) -> dict[str, dict]:
    return {e["id"]: e for e in snapshot(memory)}


def entry(memory: MemPMemory, mid: str) -> MemoryEntry:
    return memory.bank.get([mid], with_embeddings=True)[mid]


# ------------------------------------------------------------------ update modes (real games)


@needs_data
@pytest.mark.parametrize("update", ["validation", "vanilla"])
def test_validation_adds_only_successes_vanilla_adds_all(tmp_path, cache_dir, winning_actions, update):
    emb = HashingEmbedder(dim=64)
    env, tasks = make_env(cache_dir)
    mem = memp(tmp_path, emb, build="trajectory", retrieve="query", update=update)
    assert mem.needs_llm is False  # trajectory + query + no adjustment: no model work
    script = Script(winning_actions)
    recs = run(tmp_path / "run", env, tasks, mem, script, epochs=1, embedder=emb)
    assert recs[(1, WIN)].success and not recs[(1, LOSE)].success  # real ALFWorld outcomes
    assert set(script.count()) == {"act"}
    bank = bank_of(mem)
    if update == "validation":
        assert set(bank) == {f"e001:{WIN}"}
    else:
        assert set(bank) == {f"e001:{WIN}", f"e001:{LOSE}"}
        assert bank[f"e001:{LOSE}"]["success"] is False
        assert "Outcome: failed" in bank[f"e001:{LOSE}"]["experience"]
    won = bank[f"e001:{WIN}"]
    assert won["success"] is True and won["kind"] == "trajectory"
    assert all(f"> {a}" in won["experience"] for a in winning_actions)
    # LOSE (the second batch) was shown the first memory: one hit, no success, Q never learned
    assert [m["id"] for m in recs[(1, LOSE)].injected] == [f"e001:{WIN}"]
    assert recs[(1, LOSE)].injected[0]["q"] == 0.0
    assert (won["hits"], won["successes"]) == (1, 0)
    assert entry(mem, f"e001:{WIN}").q == 0.0


@needs_data
def test_adjustment_rewrites_the_used_memory_after_a_failure(tmp_path, cache_dir, winning_actions):
    emb = HashingEmbedder(dim=64)
    env, tasks = make_env(cache_dir)
    mem = memp(tmp_path, emb)  # the defaults: proceduralization + query + adjustment
    assert (mem.s.build, mem.s.retrieve, mem.s.update, mem.s.k) == ("proceduralization", "query", "adjustment", 3)
    script = Script(winning_actions)
    recs = run(tmp_path / "run", env, tasks, mem, script, epochs=1, embedder=emb)
    mid = f"e001:{WIN}"
    assert recs[(1, WIN)].success and not recs[(1, LOSE)].success
    assert set(bank_of(mem)) == {mid}  # the failure added nothing ...
    # ... but LOSE was shown the original memory, failed, and the model revised it
    original = script.prompts("act", 1, LOSE)[0]
    assert "SCRIPT-" in original and "REVISED" not in original
    [adjust_prompt] = script.prompts("memp-adjust", 1, LOSE)
    assert "SCRIPT-" in adjust_prompt and "> look" in adjust_prompt  # old procedure + failed attempt
    assert adjust_prompt.endswith("Corrected procedure:\n1.")
    final = entry(mem, mid)
    assert final.memory_id == mid and final.intent == tasks[0].intent
    assert final.experience.startswith(f"Task: {tasks[0].intent}\nOutcome: solved\nProcedure:\n1. REVISED-e1")
    assert "2. check the lamp first" in final.experience and "SCRIPT-" not in final.experience
    assert "Noise" not in final.experience
    assert all(f"> {a}" in final.experience for a in winning_actions)  # the trajectory stays
    assert final.extra["revisions"] == 1 and final.extra["script"].startswith("1. REVISED-e1")
    assert (final.visits, final.extra["successes"]) == (1, 0)
    # the key did not move: the revised memory is still found by its own intent
    hit, sim = mem.bank.query(emb.embed([tasks[0].intent])[0], 1)[0]
    assert hit.memory_id == mid and sim == pytest.approx(1.0, abs=1e-5)
    assert script.count() == Counter({"act": 2 * STEPS, "memp-script": 1, "memp-adjust": 1})


@needs_data
@pytest.mark.parametrize("enabled", [True, False])
def test_deprecation_removes_a_memory_that_keeps_failing(tmp_path, cache_dir, enabled):
    emb = HashingEmbedder(dim=64)
    env, tasks = make_env(cache_dir, max_steps=2, ids=(LOSE,))
    kw = dict(build="trajectory", retrieve="query", update="vanilla",
              deprecation={"enabled": enabled})
    first = f"e001:{LOSE}"
    recs = run(tmp_path / "run", env, tasks, memp(tmp_path, emb, **kw), Script(), epochs=3,
               embedder=emb)
    bank = bank_of(memp(tmp_path, emb, **kw))
    assert (bank[first]["hits"], bank[first]["successes"]) == (2, 0)  # below min_hits: kept
    # one more epoch (the run resumes in the same directory with a fresh module)
    mem = memp(tmp_path, emb, **kw)
    recs = run(tmp_path / "run", env, tasks, mem, Script(), epochs=4, embedder=emb)
    assert not any(r.success for r in recs.values())
    assert first in [m["id"] for m in recs[(4, LOSE)].injected]  # used a third time, failed again
    bank = bank_of(mem)
    if enabled:
        assert first not in bank  # hits 3, success rate 0 < 0.5: deprecated
        assert set(bank) == {f"e00{e}:{LOSE}" for e in (2, 3, 4)}
        assert bank[f"e002:{LOSE}"]["hits"] == 2
    else:
        assert (bank[first]["hits"], bank[first]["successes"]) == (3, 0)
        assert len(bank) == 4


@needs_data
@pytest.mark.parametrize("build", ["trajectory", "script", "proceduralization"])
def test_build_modes_store_what_they_say(tmp_path, cache_dir, winning_actions, build):
    emb = HashingEmbedder(dim=64)
    env, tasks = make_env(cache_dir, ids=(WIN,))
    mem = memp(tmp_path, emb, build=build, update="validation")
    script = Script(winning_actions)
    recs = run(tmp_path / "run", env, tasks, mem, script, epochs=1, embedder=emb)
    assert recs[(1, WIN)].success
    e = entry(mem, f"e001:{WIN}")
    text = e.experience
    assert text.startswith(f"Task: {tasks[0].intent}\nOutcome: solved\n") and e.kind == build
    has_traj = all(f"> {a}" in text for a in winning_actions)
    has_script = "Procedure:\n1. SCRIPT-" in text and "2. SCRIPT second step" in text
    assert has_traj == (build != "script")
    assert has_script == (build != "trajectory")
    assert "Task: more text" not in text  # the model's trailing junk is cut
    assert bool(e.extra["script"]) == has_script and bool(e.extra["trajectory"]) == has_traj
    if build == "proceduralization":
        assert text.index("Procedure:") < text.index("Trajectory:")
    prompts = script.prompts("memp-script")
    assert len(prompts) == (0 if build == "trajectory" else 1)
    for p in prompts:  # the script prompt quotes the real trajectory and ends at step 1
        assert all(f"> {a}" in p for a in winning_actions) and p.endswith("Procedure:\n1.")


# ------------------------------------------------------------------- retrieval (real games)


@needs_data
def test_keyword_average_retrieval_through_the_runner(tmp_path, cache_dir, winning_actions):
    emb = HashingEmbedder(dim=64)
    env, tasks = make_env(cache_dir)
    kws = {tasks[0].intent: " statue, desklamp, Examine.", tasks[1].intent: " bowl; desklamp"}
    mem = memp(tmp_path, emb, build="trajectory", retrieve="keyword_average", update="vanilla")
    assert mem.needs_llm is True
    script = Script(winning_actions, keywords=kws)
    recs = run(tmp_path / "run", env, tasks, mem, script, epochs=1, embedder=emb)
    # one key-word call per episode: select's key words are reused for the stored key
    assert script.count()["memp-keywords"] == 2
    for task in tasks:
        [p] = script.prompts("memp-keywords", 1, task.task_id)
        assert p == KEYWORD_PROMPT.format(n=5, intent=task.intent)
    win_kw, lose_kw = ["statue", "desklamp", "examine"], ["bowl", "desklamp"]
    win_entry = entry(mem, f"e001:{WIN}")
    assert win_entry.extra["keywords"] == win_kw
    key = emb.embed(win_kw).mean(axis=0)
    assert np.allclose(win_entry.embedding, key / np.linalg.norm(key), atol=1e-6)
    assert entry(mem, f"e001:{LOSE}").extra["keywords"] == lose_kw
    # LOSE's query vector is the mean of its own key words: the similarity recorded is the
    # cosine between the two key-word averages, not between the intents
    [inj] = recs[(1, LOSE)].injected
    expected = float(mem.keyword_key(lose_kw) @ mem.keyword_key(win_kw))
    assert inj["id"] == f"e001:{WIN}" and inj["sim"] == pytest.approx(expected, abs=1e-4)
    by_intent = float(emb.embed([tasks[1].intent])[0] @ emb.embed([tasks[0].intent])[0])
    assert abs(expected - by_intent) > 1e-3


# ------------------------------------------------------------------------- unit: retrieval


class FakeLLM:
    """EpisodeLLM's one method; `reply(prompt, purpose)` answers."""

    def __init__(self, reply):
        self.reply = reply
        self.calls: list[tuple[str, str]] = []

    def complete(self, prompt, *, purpose, max_tokens=None, stop=(), **_):
        self.calls.append((purpose, prompt))
        return self.reply(prompt, purpose)


def result(success: bool, actions=("go to desk 1",)) -> EpisodeResult:
    return EpisodeResult(success=success, reward=float(success), steps=len(actions),
                         transcript=[Step(a, f"after {a}") for a in actions])


def learn(mem: MemPMemory, task: Task, success: bool, *, llm=None, epoch: int = 1,
          injected=None) -> BankUpdate:
    """One episode through select -> digest -> plan -> apply, as the runner does it."""
    chosen = mem.select(task, injected if injected is not None else mem.retrieve(task), llm=llm)
    res = result(success)
    d = mem.digest(task, res, epoch=epoch, llm=llm)
    update = mem.plan_update([LearnItem(task=task, result=res, injected=chosen, epoch=epoch, digest=d)])
    mem.apply(update)
    return update


def test_keyword_average_ranks_by_key_words_not_by_intent(tmp_path):
    emb = HashingEmbedder(dim=128)
    t_query = Task("q", "put a clean mug in the coffeemachine.")
    t_same = Task("same", "put a clean mug in the coffeemachine.")  # identical intent
    t_other = Task("other", "examine the alarmclock with the desklamp.")

    def says(words):
        def reply(prompt, purpose):
            assert purpose == "memp-keywords" and prompt.endswith("\nKey words:")
            return words
        return FakeLLM(reply)

    kw = memp(tmp_path / "kw", emb, build="trajectory", retrieve="keyword_average", update="vanilla", k=1)
    learn(kw, t_same, True, llm=says("gamma, delta"))
    learn(kw, t_other, True, llm=says("alpha, beta, beta"))
    assert kw.retrieve(t_query) == []  # the model is needed: select does the retrieval
    [got] = kw.select(t_query, [], llm=says("alpha, beta"))
    assert got.memory_id == "e001:other" and got.similarity == pytest.approx(1.0, abs=1e-5)
    # the same bank content keyed by intent ranks the identical intent first
    q = memp(tmp_path / "q", emb, build="trajectory", retrieve="query", update="vanilla", k=1)
    learn(q, t_same, True)
    learn(q, t_other, True)
    assert [m.memory_id for m in q.retrieve(t_query)] == ["e001:same"]


def test_keyword_failure_falls_back_to_the_intent(tmp_path):
    emb = HashingEmbedder(dim=64)
    mem = memp(tmp_path, emb, build="trajectory", retrieve="keyword_average", update="vanilla")

    def broken(prompt, purpose):
        raise LLMError("down")

    task = Task("t", "cool some apple and put it in fridge.")
    mem.select(task, [], llm=FakeLLM(broken))
    d = mem.digest(task, result(True), epoch=1, llm=FakeLLM(broken))
    assert d["keywords"] == [task.intent] and "keywords: down" in d["error"]
    assert parse_keywords("", 5) == []


def test_random_retrieval_is_reproducible_per_seed(tmp_path):
    emb = HashingEmbedder(dim=32)
    mem = memp(tmp_path, emb, build="trajectory", retrieve="random", update="vanilla", k=3)
    assert mem.retrieve(Task("x", "anything"), seed=1) == []  # empty bank
    for i in range(10):
        learn(mem, Task(f"t{i}", f"task number {i}"), True)
    a, b = Task("a", "put a mug in the sink."), Task("b", "heat an egg.")
    picks = {s: [m.memory_id for m in mem.retrieve(a, seed=s)] for s in range(8)}
    assert all(len(p) == 3 == len(set(p)) for p in picks.values())
    assert picks[3] == [m.memory_id for m in mem.retrieve(a, seed=3)]  # same seed, same draw
    assert [m.memory_id for m in mem.retrieve(b, seed=3)] == picks[3]  # the task does not matter
    reopened = memp(tmp_path, emb, build="trajectory", retrieve="random", update="vanilla", k=3)
    assert [m.memory_id for m in reopened.retrieve(a, seed=3)] == picks[3]
    assert len({tuple(p) for p in picks.values()}) > 1  # seeds differ, draws differ
    got = mem.retrieve(a, seed=5)
    # the recorded similarity is the true cosine of intents (for analysis; it chose nothing)
    for m in got:
        assert m.similarity == pytest.approx(float(emb.embed([a.intent])[0] @ emb.embed([m.intent])[0]), abs=1e-5)


def test_query_retrieval_is_top_k_by_cosine(tmp_path):
    emb = HashingEmbedder(dim=128)
    mem = memp(tmp_path, emb, build="trajectory", retrieve="query", update="vanilla", k=2)
    intents = ["put a clean mug in the coffeemachine.", "put a mug in the coffeemachine.",
               "examine the alarmclock with the desklamp.", "heat some egg and put it in garbagecan."]
    for i, text in enumerate(intents):
        learn(mem, Task(f"t{i}", text), True)
    q = Task("q", "put a clean mug in the coffeemachine.")
    got = mem.retrieve(q)
    vq = emb.embed([q.intent])[0]
    sims = sorted(((float(vq @ emb.embed([t])[0]), f"e001:t{i}") for i, t in enumerate(intents)), reverse=True)
    assert [m.memory_id for m in got] == [mid for _, mid in sims[:2]]
    assert [m.similarity for m in got] == pytest.approx([s for s, _ in sims[:2]], abs=1e-5)


# ---------------------------------------------------------------------- unit: pure parts


def test_parsers_and_composition():
    assert parse_keywords(" Mug, coffeemachine; CLEAN, mug, 'sink'.\nTask: x", 3) == ["mug", "coffeemachine", "clean"]
    assert parse_keywords("\n\n heat , egg\n", 5) == ["heat", "egg"]
    assert parse_procedure(" go to the desk\n2. take the lamp\n3) use it\nTask: junk\n4. no", 8) == \
        "1. go to the desk\n2. take the lamp\n3) use it"
    assert parse_procedure("1. go\n2. take\n3. put", 2) == "1. go\n2. take"
    assert parse_procedure("  \n", 4) == ""
    assert parse_procedure(" look at the lamp\n2. go to drawer 1\n3. Go to drawer 1.\n4. x", 8) == \
        "1. look at the lamp\n2. go to drawer 1"  # a looping model is cut at the repeat
    assert compose_experience("t", True, "1. a", "> x\ny") == \
        "Task: t\nOutcome: solved\nProcedure:\n1. a\nTrajectory:\n> x\ny"
    assert compose_experience("t", False, "", "> x") == "Task: t\nOutcome: failed\nTrajectory:\n> x"
    for prompt in (SCRIPT_PROMPT, ADJUST_PROMPT):
        assert prompt.endswith(":\n1.")  # a base model continues the first step
    assert KEYWORD_PROMPT.endswith("Key words:")


@pytest.mark.parametrize("hits,wins,expected", [
    (2, 0, False),   # too few hits to judge
    (3, 1, True),    # 1/3 < 0.5
    (4, 2, False),   # 0.5 is not below 0.5
    (3, 2, False),
    (10, 4, True),
])
def test_deprecation_rule(hits, wins, expected):
    assert is_deprecated(hits, wins, DeprecationSettings()) is expected
    assert is_deprecated(hits, wins, DeprecationSettings(enabled=False)) is False


def test_deprecation_thresholds_are_configurable():
    s = DeprecationSettings(min_hits=5, min_success_rate=0.25)
    assert not is_deprecated(4, 0, s) and is_deprecated(5, 1, s) and not is_deprecated(8, 2, s)


def test_plan_counts_hits_revises_and_deprecates(tmp_path):
    emb = HashingEmbedder(dim=64)
    mem = memp(tmp_path, emb, build="proceduralization", update="adjustment")

    def reply(prompt, purpose):
        return {"memp-script": " first script\n2. more", "memp-adjust": " revised plan"}[purpose]

    llm = FakeLLM(reply)
    ta, tb = Task("a", "put a mug in the sink."), Task("b", "put a cup in the sink.")
    learn(mem, ta, True, llm=llm)
    mid = "e001:a"
    used = mem.retrieve(tb)
    assert [m.memory_id for m in used] == [mid]
    before = snapshot(mem)
    # two failures in one batch both revise the memory: the later one in task order wins
    items = []
    for n, task in enumerate([tb, Task("c", "put a bowl in the sink.")]):
        mem.select(task, used, llm=llm)
        res = result(False, actions=(f"look {n}",))
        d = mem.digest(task, res, epoch=2, llm=FakeLLM(lambda p, pu, n=n: f" revision {n}"))
        items.append(LearnItem(task=task, result=res, injected=used, epoch=2, digest=d))
    err = LearnItem(task=Task("d", "x"), result=result(True), injected=used, epoch=2, errored=True,
                    digest=None)
    update = mem.plan_update(items + [err])
    assert snapshot(mem) == before  # plan writes nothing
    assert update.add == [] and update.delete == []  # failures add nothing under adjustment
    fields = update.set_fields[mid]
    assert fields["visits"] == 2 and fields["extra"]["successes"] == 0  # the errored item counts not
    assert fields["experience"].startswith("Task: put a mug in the sink.\nOutcome: solved\nProcedure:\n1. revision 1")
    assert "> go to desk 1" in fields["experience"]
    mem.apply(update)
    # a third failure: hits 3, no success -> deleted (and not revised)
    mem.select(tb, used, llm=llm)
    res = result(False)
    d = mem.digest(tb, res, epoch=3, llm=llm)
    assert d["revisions"] == {mid: "1. revised plan"}
    update = mem.plan_update([LearnItem(task=tb, result=res, injected=used, epoch=3, digest=d)])
    assert update.delete == [mid] and mid not in update.set_fields
    mem.apply(update)
    assert snapshot(mem) == []


def test_a_script_that_was_never_written_stores_nothing(tmp_path):
    mem = memp(tmp_path, HashingEmbedder(dim=16), build="script", update="vanilla")

    def broken(prompt, purpose):
        raise LLMError("timeout")

    update = learn(mem, Task("t", "heat an egg."), True, llm=FakeLLM(broken))
    assert update.add == [] and snapshot(mem) == []
    d = mem.digest(Task("u", "x"), result(True), epoch=1, llm=FakeLLM(broken))
    assert d["experience"] is None and "memp-script: " in d["error"]


def test_errored_episodes_spend_no_model_calls(tmp_path):
    mem = memp(tmp_path, HashingEmbedder(dim=16))
    llm = FakeLLM(lambda p, pu: " x")
    res = EpisodeResult(success=False, reward=0.0, steps=0, errors=["LLMError at step 1"])
    task = Task("t", "heat an egg.")
    mem.select(task, [RetrievedMemory("m", "i", "e", 0.0, 1.0, 1.0)], llm=llm)
    assert mem.digest(task, res, epoch=1, llm=llm) is None and llm.calls == []


# ------------------------------------------------------------ idempotent updates (resume)


def dump(bank: ChromaBank) -> list[dict]:
    return [e.to_dict() for e in bank.iter_entries(with_embeddings=True)]


def test_applying_the_same_update_twice_leaves_the_bank_identical(tmp_path):
    emb = HashingEmbedder(dim=32)
    llm = FakeLLM(lambda p, pu: " plan step\n2. next")
    ta, tb, tc = Task("a", "put a mug in the sink."), Task("b", "put a cup in the sink."), Task("c", "heat an egg.")

    def prepared(name):
        mem = memp(tmp_path / name, emb, build="proceduralization", update="adjustment",
                   deprecation={"min_hits": 2})
        learn(mem, ta, True, llm=llm)  # e001:a
        learn(mem, tc, True, llm=llm, injected=[])  # e001:c
        c = [m for m in mem.retrieve(tc) if m.memory_id == "e001:c"]
        learn(mem, Task("c2", "heat an egg again."), False, llm=llm, injected=c)  # c: 1 hit, 0 wins
        return mem

    once, twice = prepared("once"), prepared("twice")
    assert dump(once.bank) == dump(twice.bank)
    # one batch that revises a memory, deletes another and adds a third
    a = [m for m in once.retrieve(tb) if m.memory_id == "e001:a"]
    c = [m for m in once.retrieve(tc) if m.memory_id == "e001:c"]
    items = []
    for task, used, ok in ((tb, a, False), (Task("c3", "heat an egg."), c, False),
                           (Task("d", "wash a plate."), [], True)):
        once.select(task, used, llm=llm)
        res = result(ok)
        items.append(LearnItem(task=task, result=res, injected=used, epoch=2,
                               digest=once.digest(task, res, epoch=2, llm=FakeLLM(lambda p, pu: " fixed"))))
    update = BankUpdate.from_dict(once.plan_update(items).to_dict())  # as journaled
    assert update.delete == ["e001:c"] and [e.memory_id for e in update.add] == ["e002:d"]
    assert update.set_fields["e001:a"]["experience"].startswith(
        "Task: put a mug in the sink.\nOutcome: solved\nProcedure:\n1. fixed\nTrajectory:")
    once.apply(update)
    twice.apply(update)
    twice.apply(update)  # a crash after the bank write re-applies the journal
    assert dump(once.bank) == dump(twice.bank)
    assert snapshot(once) == snapshot(twice)
    revised = twice.bank.get(["e001:a"], with_embeddings=True)["e001:a"]
    assert revised.experience == update.set_fields["e001:a"]["experience"]
    assert (revised.visits, revised.extra["revisions"]) == (1, 1)
    assert np.allclose(revised.embedding, emb.embed([ta.intent])[0], atol=1e-6)  # the key is kept
    assert [e["id"] for e in snapshot(twice)] == ["e001:a", "e002:d"]


# ------------------------------------------------------------------------------- config


def cfg(*overrides):
    with initialize_config_dir(config_dir=CONFIGS, version_base=None):
        return compose(config_name="config",
                       overrides=[f"env.data_root={ALFWORLD}", "memory=memp", *overrides])


@needs_data
def test_memp_composes_validates_and_builds(tmp_path):
    v = validate(cfg())
    assert v.memory_cls is MemPMemory and v.memory.name == "memp"
    s = v.memory
    assert (s.build, s.retrieve, s.update, s.k) == ("proceduralization", "query", "adjustment", 3)
    assert s.deprecation.enabled and (s.deprecation.min_hits, s.deprecation.min_success_rate) == (3, 0.5)
    module = v.memory_cls.build(v.memory, run_dir=tmp_path, embedder=HashingEmbedder(dim=16))
    assert module.needs_llm is True and snapshot(module) == []
    assert RunDir(tmp_path).bank.is_dir()
    v2 = validate(cfg("memory.build=trajectory", "memory.retrieve=random", "memory.update=validation",
                      "memory.deprecation.enabled=false"))
    m2 = v2.memory_cls.build(v2.memory, run_dir=tmp_path / "b", embedder=HashingEmbedder(dim=16))
    assert m2.needs_llm is False


@needs_data
@pytest.mark.parametrize("override,key", [
    ("memory.build=scripts", "memory.build"),
    ("memory.retrieve=keywords", "memory.retrieve"),
    ("memory.update=reflect", "memory.update"),
    ("memory.k=0", "memory.k"),
    ("memory.deprecation.min_success_rate=1.5", "memory.deprecation.min_success_rate"),
    ("+memory.alpha=0.3", "memory.alpha"),
])
def test_memp_bad_values_name_the_key(override, key):
    with pytest.raises(ConfigError) as info:
        validate(cfg(override))
    assert key in str(info.value)
