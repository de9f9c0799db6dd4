"""Prefix reuse of the embedded model, before and after, on the demo's own prompts.

The prompts are the ones a student sees when it follows a teacher trajectory step by step (the
env builds them: `Env.replay_prompts`; on ALFWorld the demo's instruction and demonstration, the
game's teacher memory shown as an episode, then the history so far), one prompt per step,
games in order.
One backend, one process: every prompt is answered with `reuse_prefix` off (each prompt
evaluated from scratch), then on; the answers must be identical, and the figures of the two
passes are llama.cpp's own counters (`LocalLlamaBackend.stats`).

    python scripts/bench_local_prefix.py runs/demo/teacher --prompts 24 [OVERRIDES...]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence



def demo_prompts(teacher_run: str | Path, env_cls: Any, settings: Any, n: int, llm: Any = None) -> list[str]:
    """Up to `n` prompts: the teacher run's episodes in order, each replayed step by step with its
    own memory injected, as the env builds its prompts (`Env.replay_prompts`)."""
    from memrl.core.records import iter_jsonl
    from memrl.core.rundir import RunDir
    from memrl.memory.bank import ChromaBank

    bank = ChromaBank(RunDir(teacher_run).bank, create=False)
    try:
        entries = {e.task_id: e for e in bank.iter_entries()}
    finally:
        bank.close()
    prompts: list[str] = []
    for rec in iter_jsonl(RunDir(teacher_run).episodes):
        e = entries.get(rec["task_id"])
        if e is None:
            continue
        memory = e.retrieved(1.0, 1.0)
        prompts += env_cls.replay_prompts(settings, rec, memory, llm)
        if len(prompts) >= n:
            return prompts[:n]
    return prompts


def bench_prefix_reuse(teacher_run: str | Path, overrides: Sequence[str], n_prompts: int) -> dict[str, Any]:
    """Time `n_prompts` demo prompts with prefix reuse off, then on; compare the answers."""
    from memrl.demo.teach import compose
    from memrl.llm.base import LLMRequest
    from memrl.control.wiring import build_backend

    from memrl.config.validate import validate

    v = validate(compose(overrides))
    if v.llm.backend != "local":
        return {"skipped": f"llm backend {v.llm.backend!r} is not the embedded model"}
    backend = build_backend(v.llm.model_copy(update={"reuse_prefix": False}))
    prompts = demo_prompts(teacher_run, v.env_cls, v.env, n_prompts, llm=backend)
    answers: dict[str, list[str]] = {}
    stats: dict[str, dict[str, Any]] = {}
    for mode in ("off", "on"):
        backend.reuse_prefix = mode == "on"
        before = backend.stats()
        answers[mode] = [backend.generate(LLMRequest(
            messages=(("user", p),), max_tokens=v.env.max_tokens, temperature=0.0,
            stop=("\n",), seed=0)).text for p in prompts]
        after = backend.stats()
        stats[mode] = _delta(before, after)
    return {"prompts": len(prompts), "model": backend.model_id, "off": stats["off"], "on": stats["on"],
            "identical": answers["off"] == answers["on"],
            "differences": sum(a != b for a, b in zip(answers["off"], answers["on"]))}


def _delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    from memrl.llm.local import SPEED_COUNTERS, speed_rates

    d = {k: after[k] - before[k] for k in SPEED_COUNTERS}
    return {**d, **speed_rates(d)}
