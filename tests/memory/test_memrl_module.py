"""MemRL as a memory module: what it writes, what it updates, and its official-code switches."""

from __future__ import annotations

import numpy as np
import pytest

from memory_state import learn, snapshot

from memrl.core.records import EpisodeResult, RetrievedMemory, Step, Task
from memrl.core.rundir import RunDir
from memrl.llm.embed import HashingEmbedder
from memrl.memory.base import LearnItem
from memrl.memory.entry import BankUpdate
from memrl.memory.memrl import MemRLMemory, MemRLSettings


# the benchmark's retrieval settings have no default (env.retrieval holds them): ALFWorld's
ALFWORLD_RETRIEVAL = {"delta": 0.62, "k1": 5, "k2": 3}


def make(tmp_path, **kw):
    return MemRLMemory(MemRLSettings(**{**ALFWORLD_RETRIEVAL, **kw}), bank_dir=RunDir(tmp_path).bank,
                       embedder=HashingEmbedder(dim=64))


def item(task, success, injected=(), epoch=1, errored=False, text="exp"):
    res = EpisodeResult(success=success, reward=float(success), steps=1,
                        transcript=[Step("go to desk 1", "You arrive at desk 1.")],
                        errors=["LLMError"] if errored else [])
    return LearnItem(task=task, result=res, injected=list(injected), epoch=epoch,
                     digest={"experience": text, "kind": "script" if success else "reflection"},
                     errored=errored)


T1 = Task("a/1", "put a clean mug in coffeemachine.")
T2 = Task("b/2", "put a clean mug in the coffeemachine.")
T3 = Task("c/3", "examine the alarmclock with the desklamp.")


def test_every_episode_writes_one_memory_with_q_init(tmp_path):
    mem = make(tmp_path, delta=0.0, k1=5, k2=3)
    learn(mem, [item(T1, True), item(T3, False)])
    snap = {e["id"]: e for e in snapshot(mem)}
    assert set(snap) == {"e001:a/1", "e001:c/3"}
    assert snap["e001:a/1"]["q"] == 0.0 and snap["e001:a/1"]["success"] is True


def test_q_init_by_outcome_switch(tmp_path):
    mem = make(tmp_path, delta=0.0, q_init_by_outcome=True)
    learn(mem, [item(T1, True), item(T3, False)])
    assert {e["id"]: e["q"] for e in snapshot(mem)} == {"e001:a/1": 1.0, "e001:c/3": 0.0}


def test_injected_memories_get_reward_update_and_errored_episodes_teach_nothing(tmp_path):
    mem = make(tmp_path, delta=0.0, alpha=0.5, reward_failure=-1.0)
    learn(mem, [item(T1, True)])
    got = mem.retrieve(T2)
    assert [m.memory_id for m in got] == ["e001:a/1"]
    learn(mem, [item(T2, False, injected=got, epoch=2), item(T3, True, injected=got, epoch=2, errored=True)])
    snap = {e["id"]: e for e in snapshot(mem)}
    assert snap["e001:a/1"]["q"] == pytest.approx(0.5 * (-1.0 - 0.0))
    assert snap["e001:a/1"]["visits"] == 1  # the errored episode did not count
    assert "e002:c/3" not in snap  # and wrote nothing


def test_similarity_gate_blocks_unrelated_intents(tmp_path):
    mem = make(tmp_path, delta=0.9)
    learn(mem, [item(T1, True)])
    assert mem.retrieve(T3) == []  # unrelated: below δ, nothing injected
    assert [m.memory_id for m in mem.retrieve(T1)] == ["e001:a/1"]  # identical intent: sim 1


def test_utility_reorders_candidates(tmp_path):
    mem = make(tmp_path, delta=-1.0, k1=2, k2=1, lam=1.0)
    learn(mem, [item(T1, True), item(T2, True)])
    # λ=1: rank by Q only. Make the less similar memory the more useful one.
    first = mem.retrieve(T1)[0].memory_id
    assert first == "e001:a/1"  # equal Q: similarity breaks the tie
    mem.apply(mem.plan_update([item(T3, True, injected=[RetrievedMemory("e001:b/2", "", "", 0.0, 0.5, 0.0)], epoch=2)]))
    assert mem.retrieve(T1)[0].memory_id == "e001:b/2"


def test_delta_auto_uses_the_run_intents_and_the_delta_in_use_is_logged(tmp_path, caplog):
    mem = make(tmp_path, delta="auto", delta_quantile=0.8)
    with caplog.at_level("INFO", logger="memrl.memory.memrl"):
        facts = mem.setup([T1, T2, T3, Task("d/4", "heat some egg and put it in garbagecan.")])
    emb = HashingEmbedder(dim=64).embed([T1.intent, T2.intent, T3.intent, "heat some egg and put it in garbagecan."])
    sims = (emb @ emb.T)[np.triu_indices(4, 1)]
    assert facts["delta"] == pytest.approx(float(np.quantile(sims, 0.8)))
    assert f"delta = {facts['delta']:.4f} (auto" in caplog.text and "over 4 tasks, embedder hashing-64" in caplog.text
    caplog.clear()
    with caplog.at_level("INFO", logger="memrl.memory.memrl"):
        assert make(tmp_path / "b", delta=0.38).setup([T1])["delta"] == 0.38
    assert "delta = 0.3800 (configured; embedder hashing-64)" in caplog.text


def test_near_duplicate_intents_share_one_key(tmp_path):
    mem = make(tmp_path, delta=0.0, dedup_threshold=0.5)
    learn(mem, [item(T1, True)])
    learn(mem, [item(T2, False, epoch=2)])
    snap = {e["id"]: e for e in snapshot(mem)}
    assert snap["e002:b/2"]["intent"] == T1.intent  # stored under the existing key


def test_new_entries_follow_the_one_recipe(tmp_path):
    """id e<epoch>:<task>, key = the runner's embedding (else computed), insertion order
    counted on from the bank, errored episodes skipped unless learn_from_errors."""
    mem = make(tmp_path, delta=0.0)
    learn(mem, [item(T1, True)])
    given = [0.0] * 63 + [1.0]
    a, b, c = item(T2, True, epoch=3), item(T3, False, epoch=3, errored=True), item(T1, False, epoch=3)
    a.embedding = given
    entries = mem.new_entries([a, b, c])
    assert [(e.memory_id, e.order) for e in entries] == [("e003:b/2", 1), ("e003:a/1", 2)]
    assert entries[0].embedding == given and entries[0].intent == T2.intent
    assert entries[1].embedding == pytest.approx(HashingEmbedder(dim=64).embed([T1.intent])[0].tolist())
    assert entries[1].kind == "reflection" and entries[1].success is False and entries[1].q == 0.0
    keep = make(tmp_path / "b", delta=0.0, learn_from_errors=True)
    assert [e.memory_id for e in keep.new_entries([b])] == ["e003:c/3"]


def test_raw_write_mode_makes_no_model_call(tmp_path):
    mem = make(tmp_path, write_mode="raw")
    assert mem.needs_llm is False

    class NoCalls:
        def complete(self, *a, **k):
            raise AssertionError("raw mode must not call the model")

    res = EpisodeResult(success=False, reward=0.0, steps=1, transcript=[Step("open drawer 1", "Nothing happens.")])
    digest = mem.digest(T1, res, epoch=1, llm=NoCalls())
    assert "> open drawer 1\nNothing happens." in digest["experience"]


# ------------------------------------------------ Phase-A ties, pool_by_intent, dedup, q_min
T4 = Task("d/4", "put a clean cup in coffeemachine.")  # cos 0.83 to T1 (T2: 0.93, T3: 0)


def set_q(mem, **qs):
    mem.apply(BankUpdate(set_fields={k.replace("__", ":").replace("_", "/"): {"q": v} for k, v in qs.items()}))


def replayed(tmp_path, **kw):
    """T1 replayed for three epochs (its own memories tie at sim 1) plus one T4 memory."""
    mem = make(tmp_path, delta=0.5, k1=2, k2=2, **kw)
    for epoch in (1, 2, 3):
        learn(mem, [item(T1, False, epoch=epoch)])
    learn(mem, [item(T4, True, epoch=3)])
    return mem


def test_retrieve_records_the_pool_and_whether_it_was_only_the_tasks_own(tmp_path):
    mem = make(tmp_path, delta=0.5)
    got = mem.retrieve(T1)
    assert got == [] and (got.stats.pool, got.stats.own_only) == (0, False)
    learn(mem, [item(T1, True)])
    assert (mem.retrieve(T1).stats.pool, mem.retrieve(T1).stats.own_only) == (1, True)
    assert (mem.retrieve(T2).stats.pool, mem.retrieve(T2).stats.own_only) == (1, False)


def test_ties_oldest_saturates_and_cuts_the_newest_own_memory(tmp_path):
    mem = replayed(tmp_path, phase_a_ties="oldest")
    set_q(mem, e003__a_1=0.9)  # the newest memory is the most useful one
    got = mem.retrieve(T1)
    assert (got.stats.pool, got.stats.own_only) == (2, True)  # only own memories, T4 squeezed out
    assert {m.memory_id for m in got} == {"e001:a/1", "e002:a/1"}  # e003 is never seen


def test_ties_include_lets_phase_b_choose_among_all_tied_memories(tmp_path):
    mem = replayed(tmp_path)  # the default rule
    assert mem.s.phase_a_ties == "include"
    set_q(mem, e003__a_1=0.9)
    got = mem.retrieve(T1)
    assert (got.stats.pool, got.stats.own_only) == (3, True)
    assert got[0].memory_id == "e003:a/1"  # highest Q among the three tied at sim 1


def test_pool_by_intent_pools_whole_buckets_of_the_top_keys(tmp_path):
    mem = make(tmp_path, delta=0.5, k1=1, k2=3, pool_by_intent=True)
    learn(mem, [item(T1, True), item(T4, True), item(T3, True)])
    learn(mem, [item(T1, False, epoch=2)])
    one = mem.retrieve(T1)  # k1 = 1 key: T1's bucket, both epochs
    assert (one.stats.pool, one.stats.own_only) == (2, True)
    assert {m.memory_id for m in one} == {"e001:a/1", "e002:a/1"}
    mem2 = MemRLMemory(MemRLSettings(delta=0.5, k1=2, k2=3, pool_by_intent=True),
                       bank_dir=tmp_path / "bank", embedder=HashingEmbedder(dim=64))
    two = mem2.retrieve(T1)  # 2 keys: T1 (2 memories) + T4 (1); T3 is below δ
    assert (two.stats.pool, two.stats.own_only) == (3, False)
    assert {m.memory_id for m in two} == {"e001:a/1", "e002:a/1", "e001:d/4"}


def test_dedup_joins_the_most_similar_retrieved_key(tmp_path):
    mem = make(tmp_path, delta=0.5, k1=1, k2=3, dedup_threshold=0.9, pool_by_intent=True)
    learn(mem, [item(T1, True)])
    learn(mem, [item(T2, False, epoch=2), item(T4, False, epoch=2)])
    snap = {e["id"]: e for e in snapshot(mem)}
    assert snap["e002:b/2"]["intent"] == T1.intent  # cos 0.93 >= 0.9: joins T1's key
    assert snap["e002:d/4"]["intent"] == T4.intent  # cos 0.83 < 0.9: a key of its own
    got = mem.retrieve(T2)  # T2's top key is T1's, whose bucket now holds T2's own memory too
    assert {m.memory_id for m in got} == {"e001:a/1", "e002:b/2"} and got.stats.own_only is False


def test_dedup_only_joins_a_key_that_passes_the_gate(tmp_path):
    # δ 0.95 > cos(T1, T2) = 0.93 >= dedup 0.9: T1's key is not retrieved for T2, so no join
    mem = make(tmp_path, delta=0.95, dedup_threshold=0.9)
    learn(mem, [item(T1, True)])
    learn(mem, [item(T2, False, epoch=2)])
    assert {e["id"]: e["intent"] for e in snapshot(mem)}["e002:b/2"] == T2.intent


def test_q_min_drops_low_utility_memories_after_the_pool_statistics(tmp_path):
    mem = make(tmp_path, delta=0.5, k1=5, k2=3, q_min=-0.8)
    learn(mem, [item(T1, True), item(T4, True)])
    set_q(mem, e001__a_1=-0.9)
    got = mem.retrieve(T1)
    assert got.stats.pool == 2  # both were in the pool
    assert [m.memory_id for m in got] == ["e001:d/4"]  # the Q = -0.9 memory left it


def _open_under(folder) -> list[str]:
    import os

    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(folder)):
            out.append(target)
    return out


@pytest.mark.parametrize("frozen", [False, True])
def test_closing_a_banked_module_releases_its_bank_files(tmp_path, frozen):
    """Runs one after another in one process (a Hydra sweep's basic launcher) must not keep
    every earlier bank's database and index open: close() releases them."""
    from memrl.memory.base import FrozenMemory

    mem = make(tmp_path, delta=0.0)
    learn(mem, [item(T1, True), item(T3, False)])
    mem = FrozenMemory(mem) if frozen else mem
    assert mem.retrieve(T2)  # the bank is in use: its files are open
    bank = RunDir(tmp_path).bank
    assert _open_under(bank)
    mem.close()
    assert _open_under(bank) == []


def test_a_crashed_episode_is_dropped_when_crashes_teach_nothing(tmp_path):
    """The official Lifelong runner drops a sample whose code raised (no update, no memory);
    a failed model call still teaches under learn_from_errors."""
    from memrl.core.records import CRASH_DETAIL

    def crash(task, injected):
        res = EpisodeResult(success=False, reward=0.0, steps=0, errors=["env crash: KeyError: 'x'"],
                            outcome="env_error", outcome_detail=CRASH_DETAIL)
        return LearnItem(task=task, result=res, injected=list(injected), epoch=2,
                         digest={"experience": "crash", "kind": "reflection"}, errored=True)

    for learns, expect_visits in ((True, 2), (False, 1)):
        mem = make(tmp_path / str(learns), delta=0.0, alpha=0.5, learn_from_errors=True,
                   learn_from_crashes=learns)
        learn(mem, [item(T1, True)])
        got = mem.retrieve(T2)
        assert crash(T3, got).result.crashed and not item(T2, False).result.crashed
        learn(mem, [item(T2, False, injected=got, epoch=2, errored=True), crash(T3, got)])
        snap = {e["id"]: e for e in snapshot(mem)}
        assert snap["e001:a/1"]["visits"] == expect_visits  # the LLM error counts; the crash only if it teaches
        assert "e002:b/2" in snap and ("e002:c/3" in snap) == learns
