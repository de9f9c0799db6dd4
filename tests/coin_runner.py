"""A small deterministic run for tests of the runner and of what reads a run directory: the
coin env (success depends on the scripted model's reply to a prompt that lists the injected
memories, so what the bank holds changes outcomes), MemRL on a hashing embedder, `finish`
plays it to the end."""

from __future__ import annotations

import hashlib

from clients import make_client
from memory_state import snapshot

from memrl.config.sections import RunnerSettings
from memrl.control.runner import Runner
from memrl.core.records import EpisodeResult, Step, Task
from memrl.core.rundir import RunDir
from memrl.llm.embed import HashingEmbedder
from memrl.llm.scripted import ScriptedBackend
from memrl.memory.memrl import MemRLMemory, MemRLSettings
from memrl.metrics.compute import write_metrics


class CoinEnv:
    """Success depends on the model's reply to a prompt that contains the injected memories,
    so what the bank holds changes outcomes (and therefore utilities)."""

    name = "coin"

    def __init__(self, n: int = 5):
        self._tasks = [Task(f"t{i}", f"stack the red block number {i % 2} on the table") for i in range(n)]
        self.prompts: dict[tuple[str, int], str] = {}

    def tasks(self):
        return list(self._tasks)

    def solve(self, task, memories, llm, seed):
        prompt = task.intent + "\n" + "\n".join(m.memory_id for m in memories)
        reply = llm.complete(prompt, purpose="act")
        win = reply[0] in "01234567"
        return EpisodeResult(success=win, reward=float(win), steps=1,
                             transcript=[Step(action=reply, observation="won" if win else "lost")])

    def close(self):
        pass


def hash_model(request) -> str:
    return hashlib.sha256(request.messages[-1][1].encode()).hexdigest()


def make_runner(run_dir, *, epochs=3, batch_size=2, cache=None):
    emb = HashingEmbedder(dim=32)
    memory = MemRLMemory(MemRLSettings(delta=-1.0, k1=4, k2=2), bank_dir=RunDir(run_dir).bank, embedder=emb)
    backend = ScriptedBackend(hash_model, model_id="hash")
    llm = make_client(backend, cache=cache, max_concurrency=2, max_retries=0)
    env = CoinEnv()
    runner = Runner(run_dir, env=env, memory=memory, llm=llm,
                    settings=RunnerSettings(epochs=epochs, batch_size=batch_size, progress=False),
                    seed=7, embed_intents=emb.embed)
    return runner, env, memory, backend


def finish(run_dir, **kw):
    runner, env, memory, backend = make_runner(run_dir, **kw)
    runner.run(env.tasks())
    return snapshot(memory), write_metrics(run_dir), backend
