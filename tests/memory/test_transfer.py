"""Transfer through the bank options every banked memory has: `bank.init_from` seeds a new
run's bank with a copy of another bank (once: a resumed run keeps its own), `bank.frozen`
makes a run retrieve only. Cross-model transfer (paper App. C.1) is both together with
another model; the source is never modified."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_bank_tools import EMB, train, tree_hash
from tiny_env import TinyEnv, reply

from memrl.config.sections import RunnerSettings
from memrl.control.runner import Runner
from memrl.core.records import EpisodeResult, Task, read_episodes
from memrl.core.rundir import RunDir
from clients import make_client

from memrl.llm.embed import HashingEmbedder
from memrl.llm.scripted import ScriptedBackend
from memrl.memory.bank import BankSettings
from memrl.memory.bankio import BankSourceError, read_entries, resolve
from memrl.memory.init_from import SEED_MARKER
from memrl.memory.base import FrozenMemory, LearnItem, MemoryModule
from memrl.memory.memrl import MemRLMemory, MemRLSettings
from memory_state import snapshot

REPO = Path(__file__).resolve().parents[2]
FIXTURE_CONFIGS = REPO / "tests" / "fixtures" / "configs"


def seeded(run_dir: Path, source: Path, *, frozen: bool, embedder=EMB) -> MemoryModule:
    bank = BankSettings(init_from=str(source), frozen=frozen)
    return MemRLMemory.build(MemRLSettings(delta=0.0, k1=4, k2=2, bank=bank), run_dir=run_dir,
                             embedder=embedder)


def play(run_dir: Path, memory: MemoryModule, *, epochs: int, model: str = "scripted-b") -> ScriptedBackend:
    backend = ScriptedBackend(reply, model_id=model)
    env = TinyEnv(n_tasks=6)
    memory.setup(env.tasks())
    Runner(run_dir, env=env, memory=memory, llm=make_client(backend, max_concurrency=2, max_retries=0),
           settings=RunnerSettings(epochs=epochs, batch_size=2, progress=False), seed=5,
           embed_intents=EMB.embed).run(env.tasks())
    return backend


def prefixed(snapshot: list[dict]) -> list[dict]:
    return [{**e, "id": "init:" + e["id"]} for e in snapshot]


def test_frozen_transfer_uses_the_source_bank_as_is(tmp_path):
    source = tmp_path / "a"
    trained = train(source, epochs=2)
    src_snapshot, src_hash = snapshot(trained), tree_hash(source)
    mem = seeded(tmp_path / "b", source, frozen=True)
    assert isinstance(mem, FrozenMemory) and isinstance(mem.inner, MemRLMemory)
    assert not isinstance(seeded(tmp_path / "u", source, frozen=False), FrozenMemory)
    facts = mem.setup(TinyEnv(n_tasks=6).tasks())
    assert facts["bank"]["frozen"] is True
    assert facts["bank"]["init_from"]["entries"] == len(src_snapshot) == 12
    assert facts["bank"]["init_from"]["source"]["model"] == "scripted-a"
    play(tmp_path / "b", mem, epochs=2)
    recs = read_episodes(RunDir(tmp_path / "b").episodes)
    assert len(recs) == 12
    assert all(r.llm_calls == 1 for r in recs)  # act only: a frozen bank writes no memories
    injected = [m["id"] for r in recs for m in r.injected]
    assert injected and all(i.startswith("init:") for i in injected)
    assert snapshot(mem) == prefixed(src_snapshot)  # no Q update, no visit, no new entry
    assert tree_hash(source) == src_hash  # the source run is untouched


def test_unfrozen_seed_keeps_learning_without_replacing_seeded_memories(tmp_path):
    source = tmp_path / "a"
    src_snapshot = snapshot(train(source, epochs=1))
    mem = seeded(tmp_path / "b", source, frozen=False)
    play(tmp_path / "b", mem, epochs=1)
    snap = {e["id"]: e for e in snapshot(mem)}
    seeded_ids = {"init:" + e["id"] for e in src_snapshot}
    assert seeded_ids <= set(snap)  # the new run's e001:* memories did not overwrite them
    assert {i for i in snap if not i.startswith("init:")} == {f"e001:t{i}" for i in range(6)}
    assert any(snap[i]["visits"] > 0 for i in seeded_ids)  # seeded memories are updated


def test_resume_does_not_seed_again(tmp_path):
    source = tmp_path / "a"
    train(source, epochs=1)
    straight = seeded(tmp_path / "straight", source, frozen=False)
    play(tmp_path / "straight", straight, epochs=2)

    first = seeded(tmp_path / "resumed", source, frozen=False)
    play(tmp_path / "resumed", first, epochs=1)
    after_one = snapshot(first)
    train(source, epochs=2)  # the source moves on: a resumed run must not pick that up
    again = seeded(tmp_path / "resumed", source, frozen=False)  # a new process, same run
    assert snapshot(again) == after_one  # nothing re-seeded at start
    play(tmp_path / "resumed", again, epochs=2)
    assert snapshot(again) == snapshot(straight)  # same end state as one session
    marker = json.loads((RunDir(tmp_path / "resumed").bank / SEED_MARKER).read_text())
    assert marker["status"] == "done" and marker["entries"] == 6


def test_a_seed_interrupted_while_copying_is_completed(tmp_path):
    source = tmp_path / "a"
    train(source, epochs=1)
    full = snapshot(seeded(tmp_path / "full", source, frozen=True))
    partial = RunDir(tmp_path / "partial").bank
    from memrl.memory.bank import ChromaBank
    from memrl.memory.bankio import renamed, write_entries
    write_entries(ChromaBank(partial), renamed(read_entries(resolve(source))[:2], "init:"))
    (partial / SEED_MARKER).write_text(json.dumps({"status": "copying"}))
    assert snapshot(seeded(tmp_path / "partial", source, frozen=True)) == full


def test_seeding_refuses_a_bank_that_already_holds_memories(tmp_path):
    source = tmp_path / "a"
    train(source, epochs=1)
    own = tmp_path / "b"
    train(own, epochs=1)  # a run with its own memories and no seed marker
    with pytest.raises(BankSourceError, match="already holds"):
        seeded(own, source, frozen=False)


def test_seeding_refuses_another_embedder(tmp_path):
    source = tmp_path / "a"
    train(source, epochs=1)
    with pytest.raises(BankSourceError, match="hashing-32.*hashing-64"):
        seeded(tmp_path / "b", source, frozen=True, embedder=HashingEmbedder(dim=64))
    # a bare export without provenance: the vector size is still checked
    from memrl.cli.bank import main as bank_main
    out = tmp_path / "a.jsonl"
    bank_main(["export", str(source), str(out)])
    out.with_name("a.jsonl.meta.json").unlink()
    with pytest.raises(BankSourceError, match="32 dimensions"):
        seeded(tmp_path / "c", out, frozen=True, embedder=HashingEmbedder(dim=64))
    assert len(snapshot(seeded(tmp_path / "d", out, frozen=True))) == 6


def test_frozen_is_generic_for_banked_baselines(tmp_path):
    from memrl_baselines.rag import RAGMemory, RAGSettings

    bank = BankSettings(frozen=True)
    rag = RAGMemory.build(RAGSettings(k=2, bank=bank), run_dir=tmp_path, embedder=EMB)
    task = Task("t0", "stack the red block on the table")
    result = EpisodeResult(success=True, reward=1.0, steps=1)
    assert rag.digest(task, result, epoch=1, llm=None) is None
    update = rag.plan_update([LearnItem(task=task, result=result, injected=[], epoch=1,
                                 digest={"experience": "x"}, embedding=EMB.embed([task.intent])[0].tolist())])
    assert update.is_empty()
    unfrozen = RAGMemory(RAGSettings(k=2), bank_dir=tmp_path / "bank2", embedder=EMB)
    learnt = unfrozen.plan_update([LearnItem(task=task, result=result, injected=[], epoch=1,
                                      digest=unfrozen.digest(task, result, epoch=1, llm=None),
                                      embedding=EMB.embed([task.intent])[0].tolist())])
    assert not learnt.is_empty()
    rag.apply(learnt)
    assert snapshot(rag) == [] and rag.bank.next_order == 0  # a frozen bank is never written
    # the module itself learns
    assert rag.inner.plan_update([LearnItem(task=task, result=result, injected=[], epoch=1)]).add


def run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]),
           "MEMRL_CACHE_DIR": str(cwd / "cache"),
           "LITELLM_LOCAL_MODEL_COST_MAP": "True", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    base = ["env=tiny", "llm=scripted", "embedder=hashing", "env.retrieval.delta=0.0", "runner.progress=false",
            f"hydra.searchpath=[file://{FIXTURE_CONFIGS}]"]
    return subprocess.run([sys.executable, "-m", "memrl.cli", "run", *base, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_transfer_command_end_to_end_and_resume(tmp_path):
    """The command `make transfer` runs: a run, then another model on its frozen bank."""
    a, b = tmp_path / "a", tmp_path / "b"
    out = run_cli(["runner.epochs=2", f"hydra.run.dir={a}"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    src_hash = tree_hash(RunDir(a).bank)
    cmd = ["llm.model=scripted-b", f"memory.bank.init_from={a}", "memory.bank.frozen=true",
           "runner.epochs=1", f"hydra.run.dir={b}"]
    out = run_cli(cmd, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    card = json.loads(RunDir(b).card.read_text())
    assert card["model"] == "scripted-b"
    assert card["memory_setup"]["bank"]["init_from"]["source"]["model"] == "scripted-a"
    assert card["config"]["memory"]["bank"]["frozen"] is True
    recs = read_episodes(RunDir(b).episodes)
    assert len(recs) == 4 and all(r.llm_calls == 1 for r in recs)
    assert any(m["id"].startswith("init:") for r in recs for m in r.injected)
    assert tree_hash(RunDir(a).bank) == src_hash
    seeded_at = json.loads((RunDir(b).bank / SEED_MARKER).read_text())["seeded_at"]
    # the same command again: a finished run, not seeded again
    out = run_cli(cmd, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads((RunDir(b).bank / SEED_MARKER).read_text())["seeded_at"] == seeded_at
    assert len(read_episodes(RunDir(b).episodes)) == 4
    # a missing source is a config error naming the key, before anything runs
    out = run_cli([f"memory.bank.init_from={tmp_path / 'nope'}", f"hydra.run.dir={tmp_path / 'c'}"], tmp_path)
    assert out.returncode == 2 and "memory.bank.init_from" in out.stderr


def test_init_q_reset_starts_seeded_memories_afresh(tmp_path):
    source = tmp_path / "a"
    trained = train(source, epochs=3)
    src = {e["id"]: e for e in snapshot(trained)}
    assert any(e["q"] != 0.0 for e in src.values()) and any(e["visits"] for e in src.values())
    kept = MemRLMemory(MemRLSettings(delta=0.0, k1=4, k2=2, bank=BankSettings(init_from=str(source))),
                       bank_dir=tmp_path / "keep" / "bank", embedder=EMB)
    assert {e["id"]: (e["q"], e["visits"]) for e in snapshot(kept)} == \
        {"init:" + i: (e["q"], e["visits"]) for i, e in src.items()}
    reset = MemRLMemory(MemRLSettings(delta=0.0, k1=4, k2=2, q_init=0.25,
                                      bank=BankSettings(init_from=str(source), init_q="reset")),
                        bank_dir=tmp_path / "reset" / "bank", embedder=EMB)
    snap = snapshot(reset)
    assert len(snap) == len(src) and all(e["q"] == 0.25 and e["visits"] == 0 for e in snap)
    assert [e["experience"] for e in snap] == [src[e["id"][len("init:"):]]["experience"] for e in snap]
    facts = reset.setup(TinyEnv(n_tasks=6).tasks())["bank"]["init_from"]
    assert facts["init_q"] == "reset" and facts["q_init"] == 0.25
    # where each copy's utility started is recorded with it (for the demo's Q movements)
    entries = list(reset.bank.iter_entries())
    assert {e.extra["seeded_q"] for e in entries} == {0.25}
    assert all(e.extra["seeded_q"] == e.q for e in kept.bank.iter_entries())


def _failed_student_episode(task: Task, injected) -> LearnItem:
    return LearnItem(task=task, result=EpisodeResult(success=False, reward=0.0, steps=1), injected=injected,
                     epoch=1, digest={"experience": "Task: x\nOutcome: failed", "kind": "trajectory"},
                     embedding=EMB.embed([task.intent])[0].tolist())


@pytest.mark.parametrize("q_init_failed, teacher_first", [(None, False), (-1.0, True)])
def test_failed_attempts_outrank_the_teacher_unless_they_start_below_it(tmp_path, q_init_failed, teacher_first):
    """A student fails with the teacher's memory of its task: that memory's Q falls below 0.
    With Q_init = 0 the student's own failed attempt (same task, same similarity) then ranks
    above the teacher's memory; with q_init_failed = -1 it starts below it."""
    source = tmp_path / "teacher"
    train(source, epochs=1, n_tasks=1)  # one memory, e001:t0
    mem = MemRLMemory(MemRLSettings(delta=0.0, k1=4, k2=1, write_mode="raw", q_init_failed=q_init_failed,
                                    bank=BankSettings(init_from=str(source), init_q="reset")),
                      bank_dir=tmp_path / "student" / "bank", embedder=EMB)
    task = TinyEnv(n_tasks=1).tasks()[0]
    first = mem.retrieve(task)
    assert [m.memory_id for m in first] == ["init:e001:t0"]
    mem.apply(mem.plan_update([_failed_student_episode(task, first)]))
    snap = {e["id"]: e["q"] for e in snapshot(mem)}
    assert snap["init:e001:t0"] == pytest.approx(-0.3)
    assert snap["e001:t0"] == (0.0 if q_init_failed is None else -1.0)
    top = mem.retrieve(task)[0].memory_id
    assert (top == "init:e001:t0") is teacher_first
