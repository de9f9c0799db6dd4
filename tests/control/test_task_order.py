"""`runner.task_order=seeded`: the run's seed permutes the task list once, the same order in
every epoch (so a seed changes something even where the model is greedy)."""

from __future__ import annotations

from clients import make_client
from coin_runner import CoinEnv, hash_model

from memrl.config.sections import RunnerSettings
from memrl.control.runner import Runner
from memrl.core.records import read_episodes
from memrl.core.rundir import RunDir
from memrl.core.seeding import seeded_order
from memrl.llm.embed import HashingEmbedder
from memrl.llm.scripted import ScriptedBackend
from memrl.memory.memrl import MemRLMemory, MemRLSettings


def played_order(run_dir, seed: int, order: str) -> list[list[str]]:
    emb = HashingEmbedder(dim=32)
    memory = MemRLMemory(MemRLSettings(delta=-1.0, k1=4, k2=2), bank_dir=RunDir(run_dir).bank, embedder=emb)
    env = CoinEnv(n=6)
    Runner(run_dir, env=env, memory=memory, llm=make_client(ScriptedBackend(hash_model), max_retries=0),
           settings=RunnerSettings(epochs=2, batch_size=1, progress=False, task_order=order), seed=seed,
           embed_intents=emb.embed).run(env.tasks())
    memory.close()
    recs = sorted(read_episodes(RunDir(run_dir).episodes), key=lambda r: (r.epoch, r.batch))
    return [[r.task_id for r in recs if r.epoch == e] for e in (1, 2)]


def test_a_seeded_order_is_the_seeds_permutation_in_every_epoch(tmp_path):
    listed = [f"t{i}" for i in range(6)]
    assert played_order(tmp_path / "listed", 3, "listed") == [listed, listed]
    e1, e2 = played_order(tmp_path / "seeded", 3, "seeded")
    assert e1 == e2 == seeded_order(listed, 3) != listed
    assert played_order(tmp_path / "other", 4, "seeded")[0] == seeded_order(listed, 4) != e1
