"""MemQ (memrl_baselines/memq.py, docs/methods.md): credit over the provenance DAG, decaying
as (γλ)^depth, against hand-worked cases; the trace over a real bank, the DAG read back from a
reopened bank (a resumed run), the γλ = 0 case being MemRL's update, and Q-guided ε-greedy
selection."""

from __future__ import annotations

import pytest

from memrl.core.records import EpisodeResult, RetrievedMemory, Task
from memrl.llm.embed import HashingEmbedder
from memrl.memory.base import LearnItem
from memrl.memory.entry import BankUpdate, MemoryEntry
from memrl.memory.memrl import MemRLMemory, MemRLSettings
from memrl_baselines.memq import MemQMemory, MemQSettings, provenance_depths, trace_weight

# A small provenance DAG, written in this order: each memory with the memories injected into
# the episode that wrote it (its parents).
#   A        (none)
#   B  <- A
#   C  <- B
#   D  <- A, C
#   E  <- D
DAG = {"A": [], "B": ["A"], "C": ["B"], "D": ["A", "C"], "E": ["D"]}


def parents_of(graph):
    def parents(ids):
        return {i: graph[i] for i in ids if i in graph}
    return parents


# ----------------------------------------------------------------------- depths (pure)
def test_depths_are_the_shortest_distance_from_the_injected_memories():
    # from E: D at 1; A at 2 (E->D->A), though E->D->C->B->A reaches it at 4; C at 2, B at 3
    assert provenance_depths(["E"], parents_of(DAG), max_depth=5) == {"E": 0, "D": 1, "A": 2, "C": 2, "B": 3}
    assert provenance_depths(["E"], parents_of(DAG), max_depth=2) == {"E": 0, "D": 1, "A": 2, "C": 2}
    assert provenance_depths(["E"], parents_of(DAG), max_depth=0) == {"E": 0}
    # two injected memories: each keeps its own shortest depth (A is injected: depth 0)
    assert provenance_depths(["C", "A"], parents_of(DAG), max_depth=5) == {"C": 0, "A": 0, "B": 1}


def test_memories_not_in_the_bank_are_skipped_and_cycles_end():
    graph = {"X": ["gone", "Y"], "Y": ["X"]}  # 'gone' was never in this bank; X<->Y is a cycle
    assert provenance_depths(["X", "missing"], parents_of(graph), max_depth=10) == {"X": 0, "Y": 1}


def test_trace_weight_is_gamma_lambda_to_the_depth():
    assert trace_weight(0, 0.9, 0.5) == 1.0
    assert trace_weight(1, 0.9, 0.5) == pytest.approx(0.45)
    assert trace_weight(3, 0.9, 0.5) == pytest.approx(0.45 ** 3)


# ------------------------------------------------------------------ the update on a bank
def make(tmp_path, cls=MemQMemory, settings=None, name="bank"):
    settings = settings or MemQSettings(delta=0.0, k1=5, k2=3)
    return cls(settings, bank_dir=tmp_path / name, embedder=HashingEmbedder(dim=32))


def seed_dag(memory, q: dict[str, float]) -> None:
    emb = memory.embedder
    memory.apply(BankUpdate(add=[
        MemoryEntry(memory_id=mid, intent=f"task {mid}", experience=f"memory {mid}",
                    embedding=[float(v) for v in emb.embed([f"task {mid}"])[0]], q=q[mid], epoch=1,
                    task_id=f"t{mid}", kind="script", injected_ids=list(parents), order=n)
        for n, (mid, parents) in enumerate(DAG.items())]))


def item(memory, injected: list[str], success: bool, task_id: str = "tnew") -> LearnItem:
    got = memory.bank.get(injected)
    return LearnItem(
        task=Task(task_id, f"task {task_id}"), epoch=2,
        result=EpisodeResult(success=success, reward=float(success), steps=1),
        injected=[RetrievedMemory(memory_id=m, intent=got[m].intent, experience=got[m].experience, q=got[m].q,
                                  similarity=1.0, score=1.0) for m in injected],
        digest={"experience": "Task: new\nOutcome: solved", "kind": "script", "error": None})


Q0 = {"A": -0.2, "B": 0.1, "C": 0.0, "D": 0.5, "E": 0.0}


def test_one_success_credits_the_trace_by_depth(tmp_path):
    """α = 0.3, γλ = 0.9·0.5 = 0.45, max depth 3, r = +1 (worked by hand):
    E (0): 0    + 0.3·1·(1 − 0)        = 0.3
    D (1): 0.5  + 0.3·0.45·(1 − 0.5)   = 0.5675
    A (2): −0.2 + 0.3·0.2025·(1 + 0.2) = −0.1271
    C (2): 0    + 0.3·0.2025·(1 − 0)   = 0.06075
    B (3): 0.1  + 0.3·0.091125·(0.9)   = 0.12460375"""
    memory = make(tmp_path)
    seed_dag(memory, Q0)
    update = memory.plan_update([item(memory, ["E"], True)])
    got = {mid: f["q"] for mid, f in update.set_fields.items()}
    assert got == pytest.approx({"E": 0.3, "D": 0.5675, "A": -0.1271, "C": 0.06075, "B": 0.12460375})
    # visits count injections: only E was injected
    assert {mid: f["visits"] for mid, f in update.set_fields.items()} == {"E": 1, "D": 0, "A": 0, "C": 0, "B": 0}
    (new,) = update.add
    assert new.memory_id == "e002:tnew" and new.injected_ids == ["E"]
    assert new.extra["credited"] == {"E": 0, "D": 1, "A": 2, "C": 2, "B": 3}


def test_a_failure_and_two_episodes_of_a_batch_update_in_task_order(tmp_path):
    """r = −1 for the first episode (injected D), then +1 for the second (injected C), on the
    Q values the first left (γλ = 0.45):
    ep1: D 0.5 → 0.5 + 0.3·(−1.5) = 0.05; A (1) −0.2 + 0.135·(−0.8) = −0.308;
         C (1) 0 + 0.135·(−1) = −0.135; B (2) 0.1 + 0.06075·(−1.1) = 0.033175
    ep2: C −0.135 + 0.3·1.135 = 0.2055; B (1) 0.033175 + 0.135·0.966825 = 0.163696375;
         A (2) −0.308 + 0.06075·1.308 = −0.228539"""
    memory = make(tmp_path)
    seed_dag(memory, Q0)
    update = memory.plan_update([item(memory, ["D"], False, "t1"), item(memory, ["C"], True, "t2")])
    got = {mid: f["q"] for mid, f in update.set_fields.items()}
    assert got == pytest.approx({"D": 0.05, "C": 0.2055, "B": 0.163696375, "A": -0.228539})
    assert update.set_fields["D"]["visits"] == 1 and update.set_fields["C"]["visits"] == 1
    assert update.set_fields["A"]["visits"] == 0


def test_gamma_lambda_zero_is_memrls_update(tmp_path):
    memq = make(tmp_path, settings=MemQSettings(delta=0.0, k1=5, k2=3, gamma=0.0), name="q")
    memrl = make(tmp_path, cls=MemRLMemory, settings=MemRLSettings(delta=0.0, k1=5, k2=3), name="r")
    for m in (memq, memrl):
        seed_dag(m, Q0)

    def batch(m):
        return [item(m, ["E", "D"], True, "t1"), item(m, ["D"], False, "t2")]
    assert memq.plan_update(batch(memq)).set_fields == memrl.plan_update(batch(memrl)).set_fields


def test_the_dag_is_read_back_from_a_reopened_bank(tmp_path):
    """The provenance lives in the bank's entries: a new module on the same bank directory (a
    resumed run) credits the same trace, including the memory the last update wrote."""
    memory = make(tmp_path)
    seed_dag(memory, Q0)
    memory.apply(memory.plan_update([item(memory, ["E"], True)]))
    memory.close()
    again = make(tmp_path)
    assert again.credit(["e002:tnew"]) == {"e002:tnew": 0, "E": 1, "D": 2, "A": 3, "C": 3}
    assert again.bank.get(["E"])["E"].q == pytest.approx(0.3)


def test_errored_episodes_credit_nothing(tmp_path):
    memory = make(tmp_path)
    seed_dag(memory, Q0)
    it = item(memory, ["E"], False)
    it.errored = True
    assert memory.plan_update([it]).is_empty()


# ------------------------------------------------------------------- ε-greedy selection
def test_selection_is_q_guided_epsilon_greedy(tmp_path):
    """ε = 0: the top k2 by MemRL's Phase-B score (the highest Q among equally similar
    memories); ε = 1: k2 of the pool drawn at random, the same for the same seed."""
    emb = HashingEmbedder(dim=32)
    greedy = make(tmp_path, settings=MemQSettings(delta=-1.0, k1=5, k2=2, epsilon=0.0), name="g")
    explore = make(tmp_path, settings=MemQSettings(delta=-1.0, k1=5, k2=2, epsilon=1.0), name="x")
    qs = [0.9, -0.5, 0.1, 0.6, -0.9]
    for m in (greedy, explore):
        m.apply(BankUpdate(add=[MemoryEntry(memory_id=f"m{i}", intent="heat the bread", experience=f"x{i}",
                                            embedding=[float(v) for v in emb.embed(["heat the bread"])[0]],
                                            q=q, order=i) for i, q in enumerate(qs)]))
        m.prepare([Task("t", "heat the bread")], 0)
    task = Task("t", "heat the bread")
    assert [r.memory_id for r in greedy.retrieve(task, seed=1)] == ["m0", "m3"]
    picks = {tuple(r.memory_id for r in explore.retrieve(task, seed=s)) for s in range(20)}
    assert len(picks) > 1 and all(len(p) == 2 for p in picks)
    first, again = ([r.memory_id for r in explore.retrieve(task, seed=3)] for _ in range(2))
    assert first == again
