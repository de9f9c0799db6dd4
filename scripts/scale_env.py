"""A synthetic benchmark shaped like ALFWorld at paper scale, for scripts/bench_scale.py.

What it imitates is what costs the harness disk, memory and time, not what makes a task hard:

- N household tasks in ALFWorld's phrasing (scripts/bench_intents.py), of which a share
  (`dup_share`, 0.28 by default: ALFWorld's 3,553 training games have about 2,560 distinct
  goal texts) repeat the intent text of an earlier task, so their memories share one key;
- each episode makes one model call (`purpose=act`, the prompt listing the injected memory
  ids, so what the bank holds changes outcomes and utilities, as in tests/tiny_env.py) and
  brings back a transcript of ALFWorld-like turns: `fail_steps` (30) turns when it fails
  (9 episodes in 16), `success_steps` (12) when it succeeds, about 170 characters a turn,
  so a failed episode's record is about 5.8 KB;
- the scripted model (`reply`) answers at once with a hash of the prompt: no model cost.

The MemRL writer turns each episode into a memory of a plan line plus the trajectory cut to
3,000 characters (its default), so memories are about 3 KB, as with a real model.
"""

from __future__ import annotations

import hashlib
import random
import sys
from pathlib import Path

from pydantic import Field

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_intents import OBJECTS, RECEPTACLES, _house

from memrl.core.records import EpisodeResult, Step, Task
from memrl.env.base import Env, EnvSettings, Policy


class ScaleSettings(EnvSettings):
    name: str = "scale"
    n_tasks: int = Field(500, ge=1)
    dup_share: float = Field(0.28, ge=0.0, lt=1.0, description="tasks whose intent repeats an earlier task's")
    fail_steps: int = Field(30, ge=1)
    success_steps: int = Field(12, ge=1)
    data_seed: int = 0


def make_tasks(n: int, dup_share: float, seed: int = 0) -> list[Task]:
    """`n` tasks; about `dup_share` of them repeat an earlier task's intent text."""
    rng = random.Random(seed)
    intents: list[str] = []
    seen: set[str] = set()
    for i in range(n):
        if intents and rng.random() < dup_share:
            intents.append(rng.choice(intents))
            continue
        while True:
            text = _house(rng)
            if text not in seen:
                seen.add(text)
                intents.append(text)
                break
    return [Task(f"g{i:05d}", text) for i, text in enumerate(intents)]


def turn(rng: random.Random) -> Step:
    """One ALFWorld-like turn (about 170 characters with its JSON keys)."""
    place, n = rng.choice(RECEPTACLES), rng.randint(1, 4)
    things = ", ".join(f"a {rng.choice(OBJECTS)} {rng.randint(1, 3)}" for _ in range(rng.randint(3, 6)))
    action = rng.choice(["go to", "open", "examine", "take", "put"]) + f" {place} {n}"
    return Step(action=action, observation=f"You arrive at {place} {n}. On the {place} {n}, you see {things}.")


class ScaleEnv(Env):
    name = "scale"
    Settings = ScaleSettings
    POLICIES = {"react": Policy}
    parallel_episodes = 8

    def __init__(self, settings: ScaleSettings | None = None, *, agent: str = "react", **fields):
        super().__init__(settings or ScaleSettings(**fields), agent=agent)

    def _list_tasks(self) -> list[Task]:
        s = self.s
        tasks = make_tasks(s.n_tasks, s.dup_share, s.data_seed)
        return tasks[:s.max_tasks] if s.max_tasks else tasks

    def solve(self, task, memories, llm, seed):
        policy = self.new_policy(llm, memories)
        prompt = "Your task is to: " + task.intent + "\n" + "\n".join(m.memory_id for m in policy.memories)
        reply_text = policy.llm.complete(prompt, purpose="act")
        win = reply_text[:1] in set("0123456")  # 7 in 16
        rng = random.Random(reply_text)
        steps = [turn(rng) for _ in range(self.s.success_steps if win else self.s.fail_steps)]
        return EpisodeResult(success=win, reward=float(win), steps=len(steps), transcript=steps)


def reply(request) -> str:
    """The scripted model: a hash of the last message (deterministic, outcome-changing)."""
    return hashlib.sha256(request.messages[-1][1].encode()).hexdigest()
