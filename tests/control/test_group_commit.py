"""Grouped commits of the async schedule (memrl.journal.commit): one fsync per episode instead of
one per file, and a crash anywhere in a group (its commits journaled in state/group.jsonl, no
checkpoint yet) resumes to exactly the run that was never interrupted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from clients import make_client
from memory_state import snapshot
from tiny_env import TinyEnv, reply

import memrl.journal.commit as commit_mod
from memrl.config.sections import RunnerSettings
from memrl.control.runner import Runner
from memrl.core.records import iter_jsonl
from memrl.core.rundir import RunDir
from memrl.llm.embed import HashingEmbedder
from memrl.llm.scripted import ScriptedBackend
from memrl.memory.memrl import MemRLMemory, MemRLSettings


def make(run_dir: Path, *, schedule: str = "async", epochs: int = 2, n_tasks: int = 6):
    emb = HashingEmbedder(dim=32)
    memory = MemRLMemory(MemRLSettings(delta=-1.0, k1=4, k2=2), bank_dir=RunDir(run_dir).bank, embedder=emb)
    llm = make_client(ScriptedBackend(reply, model_id="scripted"), max_concurrency=1, max_retries=0)
    env = TinyEnv(n_tasks=n_tasks)
    settings = RunnerSettings(epochs=epochs, progress=False, schedule=schedule, max_in_flight=1, batch_size=1)
    return Runner(run_dir, env=env, memory=memory, llm=llm, settings=settings, seed=5,
                  embed_intents=emb.embed), env, memory


def records(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "duration_s"} for r in iter_jsonl(RunDir(run_dir).episodes)]


@pytest.mark.parametrize("crash_at", [3, 8])  # inside epoch 1's group; inside epoch 2's
def test_a_crash_inside_a_group_resumes_to_the_uninterrupted_run(tmp_path, monkeypatch, crash_at):
    monkeypatch.setattr(commit_mod, "GROUP_COMMITS", 1000)
    monkeypatch.setattr(commit_mod, "GROUP_SECONDS", 1e9)
    runner, env, memory = make(tmp_path / "ref")
    runner.run(env.tasks())
    ref = snapshot(memory)
    memory.close()

    runner, env, memory = make(tmp_path / "run")
    applied = {"n": 0}
    real = memory.apply

    class Boom(BaseException):
        pass

    def apply(update):
        applied["n"] += 1
        if applied["n"] == crash_at:  # its journal is in group.jsonl, the bank not yet written
            raise Boom()
        real(update)

    monkeypatch.setattr(memory, "apply", apply)
    with pytest.raises(Boom):
        runner.run(env.tasks())
    rd = RunDir(tmp_path / "run")
    grouped = list(iter_jsonl(rd.group))
    assert len(grouped) >= 2  # commits past the checkpoint, journaled only in the group
    memory.close()
    runner, env, memory = make(tmp_path / "run")  # a fresh process on the same directory
    runner.run(env.tasks())
    assert snapshot(memory) == ref
    assert records(tmp_path / "run") == records(tmp_path / "ref")
    assert not rd.group.exists() and list(iter_jsonl(rd.bank_updates)) == list(iter_jsonl(
        RunDir(tmp_path / "ref").bank_updates))
    memory.close()


def test_a_grouped_commit_costs_one_fsync(tmp_path, monkeypatch):
    """Each commit of the async schedule syncs its journal line, nothing else; its group's
    sync comes every GROUP_COMMITS commits or GROUP_SECONDS. A batch of one syncs five files."""
    count = {"n": 0}
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (count.__setitem__("n", count["n"] + 1), real_fsync(fd))[1])
    costs: dict[str, list[tuple[int, bool]]] = {"async": [], "batch": []}
    real_commit, real_sync = commit_mod.RunJournal.commit, commit_mod.RunJournal.sync
    synced = {"now": False}

    def sync(self):
        synced["now"] = synced["now"] or bool(self._group)
        real_sync(self)

    def commit(self, *a, **kw):
        before, synced["now"] = count["n"], False
        real_commit(self, *a, **kw)
        costs["async" if kw.get("grouped") else "batch"].append((count["n"] - before, synced["now"]))

    monkeypatch.setattr(commit_mod.RunJournal, "commit", commit)
    monkeypatch.setattr(commit_mod.RunJournal, "sync", sync)
    for schedule in ("async", "batch"):
        runner, env, memory = make(tmp_path / schedule, schedule=schedule, epochs=2)
        runner.run(env.tasks())
        memory.close()
    alone = [n for n, with_sync in costs["async"] if not with_sync]
    assert len(alone) >= 8 and set(alone) == {1}, costs["async"]
    assert len(costs["batch"]) == 12 and min(n for n, _ in costs["batch"]) >= 5, costs["batch"]
