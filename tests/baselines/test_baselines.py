"""The memory baselines (docs/design.md §6): each one's distinctive behaviour, driven through the real
Runner on real ALFWorld games (valid_seen) by a scripted, deterministic model.

The scripted model knows which episode a request belongs to from the request's sample id
(`s<seed>/e<epoch>/<task id>/<purpose>/<n>`): it plays "look" by default, and replays the
expert's winning actions where a test needs a win.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from memrl.config.sections import RunnerSettings
from memrl.config.validate import validate
from memrl.control.runner import Runner
from memrl.core.records import EpisodeResult, RetrievedMemory, Step, Task, read_episodes
from memrl.core.rundir import RunDir
from clients import make_client

from memrl.llm.embed import HashingEmbedder
from memrl.llm.scripted import ScriptedBackend
from memrl.memory.base import LearnItem
from memrl.memory.writer import format_trajectory
from memrl.metrics.compute import write_metrics
from memory_state import learn, snapshot
from data_paths import ALFWORLD

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = str(ROOT / "configs")

needs_data = pytest.mark.skipif(not ALFWORLD.is_dir(), reason=f"ALFWorld data not at {ALFWORLD}")

# The first two valid_seen games (sorted). The expert wins A in a few steps.
GAME_A = "look_at_obj_in_light-AlarmClock-None-DeskLamp-323/trial_T20190909_044715_250790"
GAME_B = "look_at_obj_in_light-Bowl-None-DeskLamp-301/trial_T20190909_150719_492274"


# ----------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def cache_dir(request) -> Path:
    """Intents survive between sessions (shared with tests/envs/alfworld/test_alfworld_env.py)."""
    return Path(request.config.cache.mkdir("memrl-alfworld"))


def make_env(cache_dir: Path, *, max_steps: int, agent: str = "react", max_tasks: int = 2):
    pytest.importorskip("alfworld", reason="the alfworld extra is not installed")
    from memrl_envs.alfworld import AlfworldEnv, AlfworldSettings

    settings = AlfworldSettings(split="valid_seen", data_root=str(ALFWORLD), max_steps=max_steps,
                                max_tasks=max_tasks, cache_dir=str(cache_dir))
    env = AlfworldEnv(settings, agent=agent, show_progress=False)
    assert [t.task_id for t in env.tasks()] == [GAME_A, GAME_B][:max_tasks]
    return env


@pytest.fixture(scope="module")
def winning_actions(cache_dir) -> list[str]:
    """The expert's actions on game A without the no-op 'look's; they win the game."""
    env = make_env(cache_dir, max_steps=15, agent="expert", max_tasks=1)
    result = env.solve(env.tasks()[0], [], None, seed=0)
    assert result.success, "the expert should win game A"
    return [s.action for s in result.transcript if s.action not in ("look", "inventory")]


def request_of(request) -> tuple[int, str, str, int, str]:
    """(epoch, task id, purpose, call index, prompt) of a scripted-model request."""
    prefix, purpose, n = request.sample_id.rsplit("/", 2)
    _, epoch, task_id = prefix.split("/", 2)
    return int(epoch[1:]), task_id, purpose, int(n), request.messages[-1][1]


class Script:
    """A scripted model: `answer(epoch, task, purpose, n, prompt)` plus a log of requests."""

    def __init__(self, answer):
        self.answer = answer
        self.log: list[tuple[int, str, str, int, str]] = []

    def __call__(self, request) -> str:
        key = request_of(request)
        self.log.append(key)
        return self.answer(*key)

    def prompts(self, epoch: int, task: str, purpose: str = "act") -> list[str]:
        return [p for e, t, pu, _, p in self.log if (e, t, pu) == (epoch, task, purpose)]

    def count(self, purpose: str) -> Counter:
        return Counter((e, t) for e, t, pu, _, _ in self.log if pu == purpose)


def run(run_dir: Path, env, memory, script: Script, *, epochs: int, embedder):
    backend = ScriptedBackend(script, model_id="scripted-baselines")
    runner = Runner(run_dir, env=env, memory=memory, llm=make_client(backend, max_retries=0),
                    settings=RunnerSettings(epochs=epochs, progress=False), seed=0,
                    embed_intents=embedder.embed)
    runner.run(env.tasks())
    return {(r.epoch, r.task_id): r for r in read_episodes(RunDir(run_dir).episodes)}, backend


def trajectory_of(record) -> str:
    result = EpisodeResult(success=record.success, reward=record.reward, steps=record.steps,
                           transcript=[Step(**s) for s in record.transcript])
    return format_trajectory(result, 10**9)


# ----------------------------------------------------------------------------- RAG


@needs_data
def test_rag_stores_trajectories_verbatim_and_never_learns_utilities(tmp_path, cache_dir):
    from memrl_baselines.rag import RAGMemory, RAGSettings

    emb = HashingEmbedder(dim=64)
    env = make_env(cache_dir, max_steps=2)
    memory = RAGMemory(RAGSettings(k=3), bank_dir=RunDir(tmp_path / "run").bank, embedder=emb)
    assert memory.needs_llm is False
    script = Script(lambda e, t, purpose, n, p: "look" if purpose == "act" else "UNEXPECTED")
    recs, backend = run(tmp_path / "run", env, memory, script, epochs=2, embedder=emb)

    # no model call besides the actions: storing needs no model
    assert {pu for _, _, pu, _, _ in script.log} == {"act"}
    assert backend.calls == sum(r.steps for r in recs.values())
    snap = {e["id"]: e for e in snapshot(memory)}
    assert set(snap) == {f"e00{ep}:{t}" for ep in (1, 2) for t in (GAME_A, GAME_B)}
    for (epoch, task_id), r in recs.items():
        text = snap[f"e00{epoch}:{task_id}"]["experience"]
        assert text == f"Task: {r.intent}\nOutcome: failed\nTrajectory:\n{trajectory_of(r)}"
        assert "> look\n" in text
    assert all(e["q"] == 0.0 for e in snap.values())  # utilities never learned
    # epoch 2 of A sees both epoch-1 trajectories (no gate), its own first (sim 1)
    injected = recs[(2, GAME_A)].injected
    assert [m["id"] for m in injected] == [f"e001:{GAME_A}", f"e001:{GAME_B}"]
    assert injected[0]["sim"] == pytest.approx(1.0) and all(m["q"] == 0.0 for m in injected)
    # B in epoch 1 already sees A's epoch-1 trajectory (bank as of its batch start)
    assert [m["id"] for m in recs[(1, GAME_B)].injected] == [f"e001:{GAME_A}"]
    # the stored trajectory is what the acting model reads, shown as an episode (ALFWorld):
    # its task line, then its '> action' / observation lines
    b1 = recs[(1, GAME_B)]
    assert f"Your task is to: {b1.intent}\n{trajectory_of(b1)}" in script.prompts(2, GAME_A)[0]
    # visits count injections, nothing more
    uses = Counter(m["id"] for r in recs.values() for m in r.injected)
    assert {k: e["visits"] for k, e in snap.items() if e["visits"]} == dict(uses)


def test_rag_min_similarity_gate(tmp_path):
    from memrl_baselines.rag import RAGMemory, RAGSettings

    emb = HashingEmbedder(dim=64)
    a, b = Task("a", "heat some egg and put it in garbagecan."), Task("b", "examine the book with the desklamp.")
    res = EpisodeResult(success=True, reward=1.0, steps=1, transcript=[Step("go to desk 1", "You arrive.")])
    for gate, want in ((None, {"e001:a", "e001:b"}), (0.99, {"e001:a"})):
        memory = RAGMemory(RAGSettings(k=3, min_similarity=gate), bank_dir=tmp_path / str(gate), embedder=emb)
        learn(memory, [LearnItem(task=t, result=res, injected=[], epoch=1) for t in (a, b)])
        assert {m.memory_id for m in memory.retrieve(a)} == want
        assert snapshot(memory)[0]["experience"].startswith(
            "Task: heat some egg and put it in garbagecan.\nOutcome: solved\n")


# ----------------------------------------------------------------------------- reflection


@needs_data
def test_reflection_injects_only_the_tasks_own_latest_attempt(tmp_path, cache_dir, winning_actions):
    from memrl_baselines.reflection import ReflectionMemory, ReflectionSettings

    emb = HashingEmbedder(dim=64)
    env = make_env(cache_dir, max_steps=len(winning_actions))
    memory = ReflectionMemory(ReflectionSettings(), bank_dir=RunDir(tmp_path / "run").bank, embedder=emb)
    assert memory.needs_llm is True
    tag = {GAME_A: "ALARM", GAME_B: "BOWL"}

    def answer(epoch, task, purpose, n, prompt):
        if purpose == "act":
            return winning_actions[n] if (task == GAME_A and epoch == 2) else "look"
        return f"REFLECT-{tag[task]}-{epoch}: search every receptacle first."

    script = Script(answer)
    recs, _ = run(tmp_path / "run", env, memory, script, epochs=3, embedder=emb)

    assert [recs[(e, GAME_A)].success for e in (1, 2, 3)] == [False, True, False]
    for task in (GAME_A, GAME_B):
        assert recs[(1, task)].injected == []  # nothing before the first attempt
        for epoch in (2, 3):
            assert [m["id"] for m in recs[(epoch, task)].injected] == [f"last:{task}"]
    # reflections are written on failures only; a success is kept as it was played
    assert set(script.count("write-reflection")) == {(1, GAME_A), (3, GAME_A), (1, GAME_B), (2, GAME_B), (3, GAME_B)}
    assert not script.count("write-script")

    # B sees its own previous reflection, never A's, and only the latest one
    b2, b3 = script.prompts(2, GAME_B)[0], script.prompts(3, GAME_B)[0]
    assert "REFLECT-BOWL-1" in b2 and "REFLECT-ALARM" not in b2
    assert "REFLECT-BOWL-2" in b3 and "REFLECT-BOWL-1" not in b3 and "REFLECT-ALARM" not in b3
    # A in epoch 3 sees its successful epoch-2 attempt (no reflection), not its epoch-1 failure
    a3 = script.prompts(3, GAME_A)[0]
    assert "(solved) ---\nYour task is to: " in a3 and "REFLECT-ALARM" not in a3 and "REFLECT-BOWL" not in a3
    assert trajectory_of(recs[(2, GAME_A)]) in a3  # shown as an episode (ALFWorld's memory format)
    # one memory per task, replaced after each attempt
    snap = {e["id"]: e for e in snapshot(memory)}
    assert set(snap) == {f"last:{GAME_A}", f"last:{GAME_B}"}
    assert "REFLECT-ALARM-3" in snap[f"last:{GAME_A}"]["experience"]
    assert all(e["q"] == 0.0 for e in snap.values())


# ----------------------------------------------------------------------------- Pass@k


@needs_data
def test_pass_at_k_stops_reattempting_solved_tasks(tmp_path, cache_dir, winning_actions):
    from memrl_baselines.pass_at_k import PassAtK, PassAtKSettings

    emb = HashingEmbedder(dim=64)
    env = make_env(cache_dir, max_steps=len(winning_actions))
    memory = PassAtK(PassAtKSettings())
    assert memory.skip_solved and memory.needs_llm is False

    def answer(epoch, task, purpose, n, prompt):
        assert purpose == "act"  # no other model call
        return winning_actions[n] if (task == GAME_A and epoch == 2) else "look"

    script = Script(answer)
    recs, backend = run(tmp_path / "run", env, memory, script, epochs=3, embedder=emb)

    a = [recs[(e, GAME_A)] for e in (1, 2, 3)]
    assert [r.success for r in a] == [False, True, True]
    assert a[1].llm_calls == len(winning_actions) and not a[1].info.get("carried")
    assert a[2].info.get("carried") is True and a[2].llm_calls == 0 and a[2].steps == 0
    assert not script.prompts(3, GAME_A)  # the model never saw game A in epoch 3
    assert all(recs[(e, GAME_B)].llm_calls == recs[(e, GAME_B)].steps > 0 for e in (1, 2, 3))
    assert all(not r.success for (_, t), r in recs.items() if t == GAME_B)
    assert backend.calls == sum(r.steps for r in recs.values() if not r.info.get("carried"))
    assert all(r.injected == [] for r in recs.values()) and snapshot(memory) == []
    metrics = write_metrics(tmp_path / "run")
    assert metrics["csr"] == 0.5 and metrics["csr_curve"] == [0.0, 0.5, 0.5]


# ----------------------------------------------------------------------------- Self-RAG


@needs_data
def test_self_rag_injects_only_what_the_model_asks_for(tmp_path, cache_dir):
    from memrl_baselines.self_rag import SelfRAGMemory, SelfRAGSettings

    emb = HashingEmbedder(dim=64)
    env = make_env(cache_dir, max_steps=2)
    intent = {t.task_id: t.intent for t in env.tasks()}
    tag = {GAME_A: "ALARM", GAME_B: "BOWL"}
    memory = SelfRAGMemory(SelfRAGSettings(k=3), bank_dir=RunDir(tmp_path / "run").bank, embedder=emb)
    assert memory.needs_llm is True

    def answer(epoch, task, purpose, n, prompt):
        if purpose == "act":
            return "look"
        if purpose == "write-reflection":
            return f"NOTE-{tag[task]}-{epoch}"
        if purpose == "self-rag-retrieve":
            assert prompt.endswith("Answer (yes or no):") and intent[task] in prompt
            return " Yes." if task == GAME_A else "no"
        if purpose == "self-rag-relevance":
            assert prompt.endswith("Answer (yes or no):")
            own = f'written after the task "{intent[task]}"' in prompt
            return "YES, it is the same task" if own else "No, another object."
        raise AssertionError(purpose)

    script = Script(answer)
    recs, _ = run(tmp_path / "run", env, memory, script, epochs=2, embedder=emb)

    retrieve, relevance = script.count("self-rag-retrieve"), script.count("self-rag-relevance")
    # epoch 1, A: empty bank, nothing to decide, nothing asked
    assert recs[(1, GAME_A)].injected == [] and (1, GAME_A) not in retrieve
    # B always says "no" to retrieval: nothing injected and no memory is judged,
    # although the bank held candidates
    for epoch in (1, 2):
        assert retrieve[(epoch, GAME_B)] == 1 and relevance[(epoch, GAME_B)] == 0
        assert recs[(epoch, GAME_B)].injected == []
        assert "NOTE-" not in script.prompts(epoch, GAME_B)[0]
    # epoch 2, A: yes to retrieval; both candidates judged; "no" to B's note, "yes" to its own
    assert retrieve[(2, GAME_A)] == 1 and relevance[(2, GAME_A)] == 2
    assert [m["id"] for m in recs[(2, GAME_A)].injected] == [f"e001:{GAME_A}"]
    a2 = script.prompts(2, GAME_A)[0]
    assert "NOTE-ALARM-1" in a2 and "NOTE-BOWL" not in a2
    # the bank is written like MemRL's (reflection + attempt), Q never learned, decisions kept
    bank = {e.memory_id: e for e in memory.bank.iter_entries()}
    assert len(bank) == 4 and all(e.q == 0.0 for e in bank.values())
    assert bank[f"e001:{GAME_B}"].experience.startswith(
        f"Task: {intent[GAME_B]}\nOutcome: failed\nReflection: NOTE-BOWL-1")
    assert bank[f"e002:{GAME_A}"].extra["self_rag"] == {
        "candidates": [f"e001:{GAME_A}", f"e001:{GAME_B}"], "retrieve": "yes",
        "relevant": {f"e001:{GAME_A}": "yes", f"e001:{GAME_B}": "no"}}
    assert bank[f"e001:{GAME_B}"].extra["self_rag"] == {"candidates": [f"e001:{GAME_A}"], "retrieve": "no"}


def test_self_rag_unparseable_answers_take_the_documented_defaults(tmp_path):
    from memrl_baselines.self_rag import SelfRAGMemory, SelfRAGSettings, parse_yes_no

    assert [parse_yes_no(x) for x in ("Yes.", "\n no", "NO!", "yesterday", "", "maybe yes")] == \
        [True, False, False, None, None, None]

    class Model:
        def __init__(self, replies):
            self.replies = replies
            self.purposes = []

        def complete(self, prompt, *, purpose, max_tokens=None, stop=(), **_):
            self.purposes.append(purpose)
            return self.replies[len(self.purposes) - 1]

    memory = SelfRAGMemory(SelfRAGSettings(k=3), bank_dir=RunDir(tmp_path).bank, embedder=HashingEmbedder(dim=16))
    task = Task("t", "put a mug in the coffeemachine.")
    cands = [RetrievedMemory(f"m{i}", "put a cup in the sink.", f"note {i}", 0.0, 0.5, 0.5) for i in range(2)]
    # "perhaps" to retrieval -> retrieve (default yes); "hmm" to a memory -> not relevant (default no)
    model = Model(["perhaps", "hmm", "yes"])
    assert [m.memory_id for m in memory.select(task, cands, llm=model)] == ["m1"]
    assert model.purposes == ["self-rag-retrieve", "self-rag-relevance", "self-rag-relevance"]
    flipped = SelfRAGMemory(SelfRAGSettings(k=3, default_retrieve=False), bank_dir=tmp_path / "bank2",
                            embedder=HashingEmbedder(dim=16))
    assert flipped.select(task, cands, llm=Model(["?"])) == []


# ----------------------------------------------------------------------------- config


@needs_data
@pytest.mark.parametrize("name,cls,needs_llm", [
    ("rag", "RAGMemory", False),
    ("reflection", "ReflectionMemory", True),
    ("pass_at_k", "PassAtK", False),
    ("self_rag", "SelfRAGMemory", True),
])
def test_each_baseline_composes_validates_and_builds(tmp_path, name, cls, needs_llm):
    def cfg(*overrides):
        with initialize_config_dir(config_dir=CONFIGS, version_base=None):
            return compose(config_name="config",
                           overrides=[f"env.data_root={ALFWORLD}", f"memory={name}", *overrides])

    v = validate(cfg())
    assert v.memory_cls.__name__ == cls and v.memory.name == name
    if name in ("rag", "self_rag"):
        assert v.memory.k == 3 and v.memory.min_similarity is None  # ALFWorld's k2, no gate
    if name == "pass_at_k":  # k is runner.epochs alone: no second setting to disagree with it
        assert "k" not in v.memory.model_dump()
        with pytest.raises(Exception, match="memory.k"):
            validate(cfg("+memory.k=4"))
    module = v.memory_cls.build(v.memory, run_dir=tmp_path, embedder=HashingEmbedder(dim=16))
    assert module.needs_llm is needs_llm and snapshot(module) == []
    with pytest.raises(Exception, match="memory.nonsense"):
        validate(cfg("+memory.nonsense=1"))
