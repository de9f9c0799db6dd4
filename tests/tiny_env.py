"""A tiny deterministic benchmark for tests that go through `python -m memrl.run` (Hydra
composition, launchers, transfer) without benchmark data or the embedded model.

Each task is one model call; the episode succeeds when the reply starts with a digit 0-7.
The scripted model (`reply`) hashes the prompt, which lists the injected memory ids, so what
the bank holds changes outcomes and therefore utilities. Configs for it live in
tests/fixtures/configs (add them with `hydra.searchpath=[file://<that dir>]`).
"""

from __future__ import annotations

import hashlib

from pydantic import BaseModel, ConfigDict, Field

from memrl.records import EpisodeResult, Step, Task

INTENTS = ["stack the red block on the table", "stack the blue block on the shelf",
           "put the red block in the box", "put the blue block under the lamp",
           "stack the green block on the red block", "put the green block in the box"]


class TinySettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = "tiny"
    n_tasks: int = Field(4, ge=1, le=len(INTENTS))
    max_tasks: int | None = Field(None, ge=1)
    task_ids: list[str] | None = None
    max_steps: int = Field(1, ge=1)


class TinyEnv:
    name = "tiny"
    Settings = TinySettings

    def __init__(self, n_tasks: int = 4, max_tasks: int | None = None,
                 task_ids: list[str] | None = None, max_steps: int = 1, agent: str = "react"):
        if agent != "react":
            raise ValueError(f"agent: the tiny env knows only 'react' (got {agent!r})")
        tasks = [Task(f"t{i}", INTENTS[i]) for i in range(n_tasks)]
        if task_ids:
            tasks = [t for t in tasks if t.task_id in set(task_ids)]
        self._tasks = tasks[:max_tasks] if max_tasks else tasks

    def tasks(self) -> list[Task]:
        return list(self._tasks)

    def solve(self, task, memories, llm, seed):
        prompt = task.intent + "\n" + "\n".join(m.memory_id for m in memories)
        reply_text = llm.complete(prompt, purpose="act")
        win = reply_text[:1] in set("01234567")
        return EpisodeResult(success=win, reward=float(win), steps=1,
                             transcript=[Step(action=reply_text, observation="won" if win else "lost")])

    def close(self) -> None:
        pass


def reply(request) -> str:
    """The scripted model: a hash of the last message (deterministic, outcome-changing)."""
    return hashlib.sha256(request.messages[-1][1].encode()).hexdigest()
