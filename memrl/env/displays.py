"""Every display of retrieved memories, by benchmark and by the name an env's
`memory_format` chooses: the one index of how a memory reads in a prompt.

A display is a function of the memories' parts (`RetrievedMemory.parts`: task, outcome,
notes, trajectory, read from each memory's record, memrl.core.memory_record), never of their
text taken apart; the memory room writes the records, the env room only reads them. Changing
how one benchmark shows its memories is a change to the one function named here; a new
display is a function beside the env's prompts plus one line here (docs/extending.md).

Targets are `module:function` strings, imported when first asked for, so this index names
the benchmarks' displays without importing the benchmarks.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

DISPLAYS: dict[str, dict[str, str]] = {
    "alfworld": {
        "episode": "memrl.env.memory_block:format_memories_as_episodes",  # with the env's task line
        "text": "memrl.env.memory_block:format_memories",
        "official": "memrl_envs.alfworld.chat:format_official_memories",
    },
    "bigcodebench": {
        "memrl": "memrl.env.memory_block:format_memories",
        "official": "memrl_envs.bigcodebench.prompts:official_memory_block",
    },
    "hle": {
        "memrl": "memrl_envs.hle.prompts:format_memories",
        "official": "memrl_envs.hle.prompts:format_official_memories",
    },
    "lifelong_os": {
        "memrl": "memrl.env.memory_block:format_memories",
        "official": "memrl_envs.lifelong.memory_context:format_official",
    },
    "lifelong_db": {
        "memrl": "memrl.env.memory_block:format_memories",
        "official": "memrl_envs.lifelong.memory_context:format_official",
    },
}


def formats(benchmark: str) -> tuple[str, ...]:
    """The display names a benchmark offers (its `memory_format` choices)."""
    return tuple(DISPLAYS[benchmark])


def display(benchmark: str, memory_format: str) -> Callable[..., str]:
    """The display function a benchmark's `memory_format` names; a clear error for a name
    it does not offer."""
    table = DISPLAYS.get(benchmark)
    if table is None:
        raise KeyError(f"no memory displays for benchmark {benchmark!r} (known: {', '.join(DISPLAYS)})")
    target = table.get(memory_format)
    if target is None:
        raise ValueError(f"env.memory_format: {' | '.join(table)} (got {memory_format!r})")
    module, name = target.split(":")
    fn: Any = getattr(importlib.import_module(module), name)
    return fn
