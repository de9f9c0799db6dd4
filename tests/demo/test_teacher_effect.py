"""Teacher banks (`memrl.demo.teach`) and what they do to a student (`memrl.demo.teacher_effect`):
which agent teaches, copy accuracy counted by hand, and the teacher memories' Q movements."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memrl.core.rundir import RunDir
from memrl.demo.pipeline import min_discordant
from memrl.demo.teacher_effect import copy_accuracy, teacher_episodes, teacher_memory_task, teacher_q
from memrl.llm.embed import HashingEmbedder
from memrl.memory.bank import ChromaBank
from memrl.memory.entry import BankUpdate, MemoryEntry
from data_paths import ALFWORLD


def _episode(epoch, task, actions, success, injected=()):
    return {"epoch": epoch, "batch": 0, "task_id": task, "intent": task, "success": success, "reward": float(success),
            "steps": len(actions), "injected": [{"id": i, "q": 0.0, "sim": 1.0, "score": 1.0} for i in injected],
            "transcript": [{"action": a, "observation": "ok"} for a in actions], "info": {}}


def _write(path: Path, rows) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    RunDir(path).episodes.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def runs(tmp_path):
    teacher = _write(tmp_path / "teacher", [
        _episode(1, "a", ["look", "go to desk 1", "take cd 1 from desk 1", "use desklamp 1"], True),
        _episode(1, "b", ["look", "go to shelf 1"], False),
    ])
    student = _write(tmp_path / "student", [
        # given a's teacher memory: 3 of 4 steps copied, then it strays; failed
        _episode(1, "a", ["look", "go to desk 1", "take cd 1 from desk 1", "go to bed 1", "look"], False,
                 ["init:e001:a", "init:e001:b"]),
        # given only another game's memory: counted apart ("without")
        _episode(1, "b", ["look", "look"], False, ["init:e001:a"]),
        # epoch 2: an exact replay of a, with  extra whitespace
        _episode(2, "a", ["look", "go  to desk 1", "take cd 1 from desk 1", "use desklamp 1"], True,
                 ["init:e001:a"]),
        _episode(2, "b", ["look", "go to shelf 1"], False, ["init:e001:b"]),
    ])
    return teacher, student


def test_teacher_memory_ids_name_their_task():
    assert teacher_memory_task("init:e001:look_at_obj-CD-302/trial_T1") == "look_at_obj-CD-302/trial_T1"
    assert teacher_memory_task("e001:a") is None and teacher_memory_task("init:x") is None


def test_copy_accuracy_per_epoch_with_and_without_the_same_games_memory(runs):
    teacher, student = runs
    rep = copy_accuracy(student, teacher_episodes(teacher))
    e1, e2 = rep[1].to_dict(), rep[2].to_dict()
    assert e1["with_teacher"] == {"episodes": 1, "steps": 4, "copied": 3, "replays": 0, "solved": 0, "accuracy": 0.75}
    assert e1["without"] == {"episodes": 1, "steps": 2, "copied": 1, "replays": 0, "solved": 0, "accuracy": 0.5}
    assert e2["with_teacher"]["steps"] == 6 and e2["with_teacher"]["copied"] == 6
    assert e2["with_teacher"]["replays"] == 2 and e2["with_teacher"]["solved"] == 1
    assert e2["without"]["episodes"] == 0 and e2["without"]["accuracy"] is None


def test_teacher_q_movements_from_the_final_bank(runs, tmp_path):
    _, student = runs
    emb = HashingEmbedder(dim=16)
    bank = ChromaBank(RunDir(student).bank)
    entries = [MemoryEntry(memory_id=f"init:e001:{t}", intent=t, experience=t, embedding=emb.embed([t])[0].tolist(),
                           q=q, visits=v, success=s, task_id=t, order=i, extra={"seeded_q": 0.0})
               for i, (t, q, v, s) in enumerate([("a", 0.3, 3, True), ("b", -0.51, 2, False), ("c", 0.0, 0, True)])]
    bank.apply(BankUpdate(add=entries + [MemoryEntry(memory_id="e001:a", intent="a", experience="own",
                                                     embedding=emb.embed(["a"])[0].tolist(), q=0.9)]))
    bank.close()
    moves = {m.task_id: m for m in teacher_q(student)}
    assert set(moves) == {"a", "b", "c"}  # the student's own memory is not a teacher memory
    assert (moves["a"].movement, moves["a"].used_solved, moves["a"].used_failed) == ("rose", 1, 2)
    assert (moves["b"].movement, moves["b"].used_solved, moves["b"].used_failed) == ("fell", 0, 2)
    assert moves["c"].movement == "unused" and [m.task_id for m in teacher_q(student)] == ["a", "c", "b"]


def test_power_of_the_paired_test():
    assert min_discordant(0.05) == 6  # 2 * 0.5**6 = 0.031 < 0.05 <= 2 * 0.5**5


@pytest.mark.parametrize("env, oracle", [("alfworld", "expert"), ("bigcodebench", "canonical"),
                                         ("lifelong_os", "gold"), ("lifelong_db", "gold"), ("hle", "gold")])
def test_every_env_with_an_oracle_can_teach(env, oracle):
    from hydra.utils import get_class

    from memrl.demo.teach import compose, oracle_agent, teacher_overrides

    assert oracle_agent(compose([f"env={env}"])) == oracle
    over = teacher_overrides([f"env={env}", "memory.writer.max_trajectory_chars=500", "runner.epochs=3"])
    assert f"agent={oracle}" in over and "memory.write_mode=raw" in over
    cfg = compose(over)
    policy = get_class(cfg.env._target_).POLICIES[cfg.agent.name]
    assert cfg.agent.name == oracle and cfg.memory.write_mode == "raw"
    assert not policy.needs_llm and not policy.reads_memories  # plays without a model, reads no memory
    assert cfg.memory.writer.max_trajectory_chars == 500  # the user's override wins ...
    assert cfg.runner.epochs == 1  # ... but the oracle plays once


def test_teach_refuses_an_agent_that_needs_a_model(tmp_path):
    from memrl.core.errors import ConfigError
    from memrl.demo.teach import teach

    with pytest.raises(ConfigError, match="oracle"):
        teach(["env=alfworld", "agent=react"], tmp_path / "t")


TWO_GAMES = ["look_at_obj_in_light-AlarmClock-None-DeskLamp-323/trial_T20190909_044715_250790",
             "look_at_obj_in_light-Laptop-None-DeskLamp-328/trial_T20190908_201550_622420"]


@pytest.mark.skipif(not ALFWORLD.is_dir(), reason=f"ALFWorld data not at {ALFWORLD}")
def test_history_bank_holds_a_failed_attempt_and_the_experts_episode_per_game(tmp_path, monkeypatch):
    """The expert plays each game twice (stopped after 2 steps, then whole); the merged bank
    holds both memories under the game's intent, the attempt older in `history` order and by
    a per-game coin in `shuffled` order; a bank made with another recipe is refused."""
    from memrl.core.errors import ConfigError
    from memrl.core.seeding import derive_seed
    from memrl.demo.teach import history_bank
    from memrl.memory.bankio import read_entries, resolve

    monkeypatch.setenv("ALFWORLD_DATA", str(ALFWORLD))
    monkeypatch.setenv("MEMRL_CACHE_DIR", str(tmp_path / "cache"))
    over = ["experiment=demo", "embedder=hashing", "env.max_tasks=null", "runner.progress=false",
            f"env.task_ids=[{','.join(TWO_GAMES)}]"]
    bank = history_bank(over, tmp_path / "h", attempt_steps=2, expert_steps=50)
    assert (bank.attempt.episodes, bank.attempt.solved) == (2, 0)  # 2 steps solve neither game
    assert (bank.expert.episodes, bank.expert.solved) == (2, 2)
    assert bank.attempt_first == sorted(TWO_GAMES) and bank.order == "history"
    entries = read_entries(resolve(str(bank.bank_dir)))
    assert len(entries) == 4
    for game in TWO_GAMES:
        a = next(e for e in entries if e.memory_id == f"attempt:e001:{game}")
        x = next(e for e in entries if e.memory_id == f"expert:e001:{game}")
        assert a.key == x.key  # one intent: similarity ties them
        assert not a.success and x.success and a.order < x.order
    again = history_bank(over, tmp_path / "h", attempt_steps=2, expert_steps=50)  # reused as it is
    assert again.attempt_first == bank.attempt_first
    with pytest.raises(ConfigError, match="made with"):
        history_bank(over, tmp_path / "h", attempt_steps=2, expert_steps=50, order="shuffled")
    with pytest.raises(ConfigError, match="below"):
        history_bank(over, tmp_path / "x", attempt_steps=50, expert_steps=50)

    shuffled = history_bank(over, tmp_path / "s", attempt_steps=2, expert_steps=50, order="shuffled", seed=3)
    expected = sorted(g for g in TWO_GAMES if derive_seed(3, "history-bank", g) % 2 == 0)
    assert len(expected) == 1 and shuffled.attempt_first == expected  # seed 3 splits the two games
    by_id = {e.memory_id: e for e in read_entries(resolve(str(shuffled.bank_dir)))}
    for game in TWO_GAMES:
        older = by_id[f"attempt:e001:{game}"].order < by_id[f"expert:e001:{game}"].order
        assert older == (game in expected)
