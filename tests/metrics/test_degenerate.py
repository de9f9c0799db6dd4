"""Settings that make a method behave as another are named (memrl.metrics.degenerate): from
the config, from the records, and all of a run's together."""

from __future__ import annotations

from memrl.core.records import EpisodeRecord
from memrl.metrics.degenerate import config_warnings, record_warnings, run_warnings


def memrl_config(**memory) -> dict:
    base = {"name": "memrl", "lam": 0.5, "alpha": 0.3, "k1": 5, "k2": 3, "delta": 0.6, "epsilon": 0.0,
            "sim_gate": True, "write_memories": True, "bank": {"init_from": None}}
    return {"memory": {**base, **memory}, "runner": {"epochs": 10}, "agent": {"name": "react"}}


def rec(epoch: int, task: str, pool: int | None, injected: int = 0) -> EpisodeRecord:
    info = {} if pool is None else {"retrieval": {"pool": pool, "own_only": False}}
    return EpisodeRecord(epoch=epoch, batch=0, task_id=task, intent=task, success=False, reward=0.0, steps=1,
                         injected=[{"id": f"m{i}", "q": 0.0} for i in range(injected)], info=info)


def test_the_paper_defaults_raise_nothing():
    assert config_warnings(memrl_config(), n_tasks=100) == []
    assert config_warnings({"memory": {"name": "none"}, "runner": {"epochs": 3}}, n_tasks=2) == []


def test_each_setting_that_makes_memrl_another_method_is_named():
    said = {
        "delta": config_warnings(memrl_config(delta=1.0), 100),
        "epsilon": config_warnings(memrl_config(epsilon=1.0), 100),
        "alpha": config_warnings(memrl_config(alpha=0.0), 100),
        "lam": config_warnings(memrl_config(lam=0.0), 100),
        "k2": config_warnings(memrl_config(k1=3, k2=3), 100),
        "k1": config_warnings(memrl_config(k1=50), 4),  # 4 tasks x 10 epochs = 40 memories at most
        "write": config_warnings(memrl_config(write_memories=False), 100),
    }
    assert all(len(v) == 1 for v in said.values()), said
    assert "runs as no memory" in said["delta"][0] and said["delta"][0].startswith("similarity gate")
    assert "random draw" in said["epsilon"][0] and "RAG-like" in said["alpha"][0]
    assert "Q is learned but never used" in said["lam"][0] and "λ only orders" in said["k2"][0]
    assert "(40: 4 tasks × 10 epochs)" in said["k1"][0] and "runs as no memory" in said["write"][0]
    # a bank that imports another's may hold any number of memories: no claim about k1
    assert config_warnings(memrl_config(k1=50, bank={"init_from": "/b"}), 4) == []
    # without the gate, δ gates nothing
    assert config_warnings(memrl_config(delta=1.0, sim_gate=False), 100) == []


def test_a_top_k_baseline_larger_than_its_bank():
    rag = {"memory": {"name": "rag", "k": 5, "bank": {}}, "runner": {"epochs": 2}}
    (w,) = config_warnings(rag, n_tasks=2)
    assert w.startswith("k = 5 ≥ the most memories the bank can hold (4: 2 tasks × 2 epochs)")
    assert config_warnings(rag, n_tasks=3) == []


def test_epochs_of_empty_retrievals_and_a_lambda_with_nothing_to_rank():
    cfg = memrl_config()
    # epoch 1 is empty by nature (the bank fills up); epoch 2: 2 of 3 empty; epoch 3: pools of 2
    records = [rec(1, t, 0) for t in "abc"] + [rec(2, "a", 0), rec(2, "b", 0), rec(2, "c", 1, 1)] + \
        [rec(3, t, 2, 2) for t in "abc"]
    w = record_warnings(cfg, records)
    assert w == ["epoch 2: 2 of 3 retrievals (67%) found no memory to inject; memrl ran as no memory there",
                 "λ changed nothing from epoch 2 on: no Phase-A pool held more than k2 = 3 memories, so Phase B "
                 "injected every pooled memory whatever λ"]
    big = records[:6] + [rec(3, t, 5, 3) for t in "abc"]
    assert record_warnings(cfg, big) == [w[0]]
    # a method without recorded pools: an episode with nothing injected is an empty retrieval
    rag = {"memory": {"name": "rag", "k": 3}, "agent": {"name": "react"}}
    assert record_warnings(rag, [rec(2, t, None, 0) for t in "ab"])[0].startswith("epoch 2: 2 of 2")
    # an oracle reads no memories: nothing to say
    oracle = {"memory": {"name": "rag", "k": 3}, "agent": {"name": "expert"}}
    assert record_warnings(oracle, [rec(2, t, None, 0) for t in "ab"]) == []
    assert record_warnings({"memory": {"name": "none"}}, [rec(2, "a", None)]) == []


def test_a_run_gathers_its_cards_warnings_once():
    card = {"config": memrl_config(delta=1.0), "n_tasks": 3,
            "warnings": ["similarity gate δ = 1.0000000 leaves no margin on these 3 tasks: ..."]}
    got = run_warnings(card, [rec(2, t, 0) for t in "abc"])
    assert got[0] == card["warnings"][0] and len(got) == len(set(got)) == 4
