"""The bank's tie rule (`memory.bank.ties`: oldest | newest | random): the order among memories of
equal similarity in every similarity ranking (RAG's top-k, MemRL's Phase-A pool and Phase-B
tie-break). In the paper's loop a task's memories all share its intent, so every retrieval of a
repeated task is a tie and this rule alone can decide what a method shows."""

from __future__ import annotations

import numpy as np
import pytest

from memory_state import learn

from memrl.core.records import EpisodeResult, Step, Task
from memrl.core.rundir import RunDir
from memrl.core.seeding import derive_seed
from memrl.llm.embed import HashingEmbedder
from memrl.memory.bank import BankSettings, ChromaBank
from memrl.memory.base import LearnItem
from memrl.memory.entry import BankUpdate, MemoryEntry
from memrl.memory.memrl import MemRLMemory, MemRLSettings
from memrl.memory.retrieval import phase_a, tie_precedence
from memrl_baselines.rag import RAGMemory, RAGSettings

T = Task("g/1", "examine the bowl with the desklamp.")
OTHER = Task("g/2", "put a clean mug in the coffeemachine.")


def test_precedence_oldest_newest_and_random_are_what_they_say():
    orders = np.array([3, 0, 2, 1])
    ids = ["d", "a", "c", "b"]
    assert tie_precedence(orders, ids, "oldest").tolist() == [3, 0, 2, 1]
    assert np.argsort(tie_precedence(orders, ids, "newest")).tolist() == [0, 2, 3, 1]
    drawn = tie_precedence(orders, ids, "random", seed=7)
    assert drawn.tolist() == [derive_seed(7, "ties", i) for i in ids]
    # the draw depends on which entries they are, not on the order they arrived in
    again = tie_precedence(orders[::-1], ids[::-1], "random", seed=7)
    assert dict(zip(ids[::-1], again.tolist())) == dict(zip(ids, drawn.tolist()))
    with pytest.raises(ValueError, match="unknown rule"):
        tie_precedence(orders, ids, "alphabetical")  # type: ignore[arg-type]


def test_random_draws_differ_across_seeds_and_repeat_for_one_seed():
    ids = [f"m{i}" for i in range(6)]
    orders = np.arange(6)
    firsts = {int(np.argmin(tie_precedence(orders, ids, "random", seed=s))) for s in range(40)}
    assert len(firsts) == 6  # every memory comes first under some seed
    assert (tie_precedence(orders, ids, "random", seed=3) == tie_precedence(orders, ids, "random", seed=3)).all()


def test_phase_a_cut_follows_the_precedence_it_is_given():
    sims = np.ones(4)
    orders = np.arange(4)
    assert phase_a(sims, delta=0.0, k1=2, ties="oldest", orders=orders).tolist() == [0, 1]
    newest = tie_precedence(orders, ["a", "b", "c", "d"], "newest")
    assert phase_a(sims, delta=0.0, k1=2, ties="oldest", orders=newest).tolist() == [3, 2]
    # include keeps the whole tied group, in precedence order
    assert phase_a(sims, delta=0.0, k1=2, ties="include", orders=newest).tolist() == [3, 2, 1, 0]


def _three_memories_of_one_task(path, ties):
    """Three memories filed under one key (one task's intent, similarity 1 to it), then one
    memory of another task."""
    emb = HashingEmbedder(dim=64)
    key = emb.embed([T.intent])[0].tolist()
    other = emb.embed([OTHER.intent])[0].tolist()
    bank = ChromaBank(path, ties=ties)
    bank.apply(BankUpdate(add=[
        MemoryEntry(memory_id=f"m{i}", intent=T.intent, experience=f"attempt {i}", embedding=key, order=i)
        for i in range(3)] + [MemoryEntry(memory_id="x", intent=OTHER.intent, experience="other",
                                          embedding=other, order=3)]))
    return bank, np.asarray(key, dtype=np.float32)


@pytest.mark.parametrize("ties, expected", [("oldest", ["m0", "m1"]), ("newest", ["m2", "m1"])])
def test_bank_query_breaks_ties_by_the_rule(tmp_path, ties, expected):
    bank, key = _three_memories_of_one_task(tmp_path / "b", ties)
    assert [e.memory_id for e, _ in bank.query(key, 2)] == expected
    assert [e.memory_id for e, _ in bank.neighbours(key, 3)][:3] == (
        ["m0", "m1", "m2"] if ties == "oldest" else ["m2", "m1", "m0"])


def test_bank_query_random_is_drawn_from_the_seed(tmp_path):
    bank, key = _three_memories_of_one_task(tmp_path / "b", "random")
    picks = {s: bank.query(key, 1, seed=s)[0][0].memory_id for s in range(30)}
    assert set(picks.values()) == {"m0", "m1", "m2"}  # each tied memory is drawn under some seed
    assert all(bank.query(key, 1, seed=s)[0][0].memory_id == p for s, p in picks.items())  # a rerun draws the same
    best = min(["m0", "m1", "m2"], key=lambda i: derive_seed(5, "ties", i))
    assert bank.query(key, 1, seed=5)[0][0].memory_id == best


def test_bank_settings_carry_the_rule_to_the_bank(tmp_path):
    assert BankSettings().ties == "oldest"  # the official code's stable sort stays the default
    assert BankSettings(ties="newest").open(tmp_path / "b").ties == "newest"
    with pytest.raises(ValueError):
        BankSettings(ties="alphabetical")


def _item(task, success, injected=(), epoch=1):
    res = EpisodeResult(success=success, reward=float(success), steps=1,
                        transcript=[Step("look", "You see a bowl.")])
    return LearnItem(task=task, result=res, injected=list(injected), epoch=epoch,
                     digest={"experience": f"{task.task_id} e{epoch}", "kind": "trajectory"})


def _memrl(path, ties, **kw):
    s = MemRLSettings(delta=-1.0, k1=5, k2=1, sim_gate=False, write_mode="raw",
                      bank=BankSettings(ties=ties), **kw)
    return MemRLMemory(s, bank_dir=RunDir(path).bank, embedder=HashingEmbedder(dim=64))


def _rag(path, ties):
    return RAGMemory(RAGSettings(k=1, bank=BankSettings(ties=ties)), bank_dir=RunDir(path).bank,
                     embedder=HashingEmbedder(dim=64))


def _history(mem):
    """A failed attempt of T, then another failed attempt of T (both Q 0: no update yet)."""
    learn(mem, [_item(T, False, epoch=1)])
    learn(mem, [_item(T, False, epoch=2)])
    return mem


@pytest.mark.parametrize("ties", ["oldest", "newest", "random"])
def test_memrl_and_rag_pick_the_same_memory_while_every_q_is_equal(tmp_path, ties):
    """Phase B sees no Q difference, so its last tie-break (pool position) follows the bank's rule
    and MemRL shows what RAG shows: the experiment's epoch 1 is the same for both methods."""
    memrl = _history(_memrl(tmp_path / "memrl", ties))
    rag = _history(_rag(tmp_path / "rag", ties))
    for seed in range(12):
        got = memrl.retrieve(T, seed=seed)
        assert [m.memory_id for m in got] == [m.memory_id for m in rag.retrieve(T, seed=seed)]
    expected = {"oldest": "e001:g/1", "newest": "e002:g/1"}.get(ties)
    if expected:
        assert memrl.retrieve(T, seed=0)[0].memory_id == expected


def test_memrl_phase_b_prefers_q_over_the_tie_rule(tmp_path):
    mem = _history(_memrl(tmp_path / "m", "newest"))
    shown = list(mem.retrieve(T, seed=0))
    assert shown[0].memory_id == "e002:g/1"  # equal Q: the newest
    learn(mem, [_item(T, False, injected=shown, epoch=3)])  # it failed: Q -0.3
    assert mem.retrieve(T, seed=0)[0].memory_id == "e003:g/1"  # newest at Q 0
    learn(mem, [_item(T, True, injected=list(mem.retrieve(T, seed=0)), epoch=4)])
    # e003 helped (Q 0.3): above the newer e004 (Q 0), whatever the rule
    assert mem.retrieve(T, seed=0)[0].memory_id == "e003:g/1"
