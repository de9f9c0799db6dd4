"""Prefix reuse of the embedded model, before and after, on the demo's own prompts.

The prompts are the ones a student sees when it follows a teacher trajectory step by step on
ALFWorld: the demo's instruction and demonstration, the game's teacher memory shown as an
episode, then the history so far (the teacher's steps), one prompt per step, games in order.
One backend, one process: every prompt is answered with `reuse_prefix` off (each prompt
evaluated from scratch), then on; the answers must be identical, and the figures of the two
passes are llama.cpp's own counters (`LocalLlamaBackend.stats`).

    python scripts/bench_local_prefix.py runs/demo/teacher --prompts 24 [OVERRIDES...]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from omegaconf import OmegaConf


def demo_prompts(teacher_run: str | Path, env_cfg: dict[str, Any], n: int, llm: Any = None) -> list[str]:
    """Up to `n` prompts built from the teacher run (see module docstring)."""
    from memrl.core.records import RetrievedMemory, Step, iter_jsonl
    from memrl.core.rundir import RunDir
    from memrl.memory.bank import ChromaBank
    from memrl_envs.alfworld import catalog
    from memrl_envs.alfworld.prompts import (
        INSTRUCTIONS,
        build_prompt,
        default_prompts_file,
        load_demonstrations,
        resolve_style,
        select_demonstrations,
    )

    root = Path(env_cfg["data_root"])
    demos = load_demonstrations(env_cfg.get("prompts_file") or default_prompts_file(root))
    style = resolve_style(str(env_cfg.get("demo_style", "auto")), llm)
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
        task_type = (rec.get("info") or {}).get("task_type") or catalog.TASK_TYPES[catalog.task_family(rec["task_id"])]
        shown = select_demonstrations(demos, task_type, int(env_cfg.get("demo_index", 0)),
                                      int(env_cfg.get("num_demos", 1)), style=style)
        memory = RetrievedMemory(e.memory_id, e.intent, e.experience, e.q, 1.0, 1.0, e.success)
        steps = [Step(**s) for s in rec.get("transcript") or []]
        start = rec["info"]["initial_observation"]
        for t in range(len(steps)):
            prompts.append(build_prompt(shown, [memory], start, steps[:t], instruction=INSTRUCTIONS[style],
                                        memory_format=str(env_cfg.get("memory_format", "episode"))))
            if len(prompts) >= n:
                return prompts
    return prompts


def bench_prefix_reuse(teacher_run: str | Path, overrides: Sequence[str], n_prompts: int) -> dict[str, Any]:
    """Time `n_prompts` demo prompts with prefix reuse off, then on; compare the answers."""
    from memrl.demo.teach import compose
    from memrl.llm.base import LLMRequest
    from memrl.llm.factory import build_backend

    cfg = compose(overrides)
    llm_cfg = OmegaConf.to_container(cfg.llm, resolve=True)
    env_cfg = OmegaConf.to_container(cfg.env, resolve=True)
    if llm_cfg.get("backend") != "local":
        return {"skipped": f"llm backend {llm_cfg.get('backend')!r} is not the embedded model"}
    backend = build_backend({**llm_cfg, "reuse_prefix": False})
    prompts = demo_prompts(teacher_run, env_cfg, n_prompts, llm=backend)
    answers: dict[str, list[str]] = {}
    stats: dict[str, dict[str, Any]] = {}
    for mode in ("off", "on"):
        backend.reuse_prefix = mode == "on"
        before = backend.stats()
        answers[mode] = [backend.generate(LLMRequest(
            messages=(("user", p),), max_tokens=int(env_cfg.get("max_tokens", 64)), temperature=0.0,
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
