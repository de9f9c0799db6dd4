"""A tiny deterministic benchmark for tests that go through `python -m memrl.cli run` (Hydra
composition, launchers, transfer) without benchmark data or the embedded model.

Each task is one model call; the episode succeeds when the reply starts with a digit 0-7.
The scripted model (`reply`) hashes the prompt, which lists the injected memory ids, so what
the bank holds changes outcomes and therefore utilities. Configs for it live in
tests/fixtures/configs (add them with `hydra.searchpath=[file://<that dir>]`).
"""

from __future__ import annotations

import hashlib
import os
import time

from pydantic import Field

from memrl.core.records import EpisodeResult, Step, Task
from memrl.env.base import Env, EnvSettings, Policy

INTENTS = ["stack the red block on the table", "stack the blue block on the shelf",
           "put the red block in the box", "put the blue block under the lamp",
           "stack the green block on the red block", "put the green block in the box"]


class TinySettings(EnvSettings):
    name: str = "tiny"
    n_tasks: int = Field(4, ge=1, le=len(INTENTS))
    # task ids whose data is "damaged": left out of the listing and reported (data_skipped)
    broken: list[str] = Field(default_factory=list)
    # episodes bring back what a hostile sandbox could: a lone surrogate, terminal escapes,
    # NUL, undecodable bytes (in the observation and in info)
    hostile: bool = False
    # every task asks the same sentence (a small task set of duplicate intents: delta=auto then
    # lands on the duplicates' similarity)
    same_intent: bool = False


class TinyEnv(Env):
    """`TinyEnv(n_tasks=6)` for tests; `TinyEnv(TinySettings(...), agent="react")` as the
    builder makes it."""

    name = "tiny"
    Settings = TinySettings
    POLICIES = {"react": Policy}

    def __init__(self, settings: TinySettings | None = None, *, agent: str = "react", **fields):
        super().__init__(settings or TinySettings(**fields), agent=agent)

    def _list_tasks(self) -> list[Task]:
        s = self.s
        tasks = [Task(f"t{i}", INTENTS[0 if s.same_intent else i]) for i in range(s.n_tasks)
                 if f"t{i}" not in s.broken]
        if s.task_ids:
            tasks = [t for t in tasks if t.task_id in set(s.task_ids)]
        return tasks[:s.max_tasks] if s.max_tasks else tasks

    def data_skipped(self) -> list[dict[str, str]]:
        return [{"item": t, "reason": "damaged test data"} for t in self.s.broken]

    def solve(self, task, memories, llm, seed):
        policy = self.new_policy(llm, memories)
        prompt = task.intent + "\n" + "\n".join(m.memory_id for m in policy.memories)
        reply_text = policy.llm.complete(prompt, purpose="act")
        win = reply_text[:1] in set("01234567")
        observation = "won" if win else "lost"
        info = {}
        if self.s.hostile:
            observation += " \udcff\x1b[2J\x00"
            info = {"raw": b"\xff\xfe", "message": "\ud800 lone"}
        return EpisodeResult(success=win, reward=float(win), steps=1, info=info,
                             transcript=[Step(action=reply_text, observation=observation)])


def reply(request) -> str:
    """The scripted model: a hash of the last message (deterministic, outcome-changing)."""
    return hashlib.sha256(request.messages[-1][1].encode()).hexdigest()


def slow_reply(request) -> str:
    """`reply`, after $TINY_REPLY_DELAY seconds (tests that act on a run while it runs; the
    delay is not part of the config, so the same command can be run fast or slow)."""
    time.sleep(float(os.environ.get("TINY_REPLY_DELAY", "0")))
    return reply(request)


def mute_writer(request) -> str:
    """`reply`, but an empty answer to the memory writer's prompts of tasks t1 and t2 (their
    memories are then stored without the written summary; t0, whose intent the preflight
    asks about, is answered)."""
    last = request.messages[-1][1]
    if last.rstrip().endswith(("Reflection:", "1.")) and any(INTENTS[i] in last for i in (1, 2)):
        return ""
    return reply(request)


def hostile_reply(request) -> str:
    """`reply`, then what a model's reply can hold that no file takes: a lone surrogate, NUL,
    a terminal escape."""
    return reply(request) + " \udcff\x00\x1b[1m"
