"""What a run is told before it plays an episode: what its seed changes, and whether its
similarity gate can pass anything (memrl.control.session logs both and keeps them in the run
card: `seed_effects`, `warnings`).

What a seed changes (`seed_effects`; docs/reading-results.md, "What a seed changes"): the
model's samples when it samples (temperature > 0, the key of every cached answer then holds
the sample's identity); a provider's `seed` parameter at temperature 0 (a hosted model's own
nondeterminism; the cache keeps each seed's answers apart); a benchmark judge's samples the
same way (HLE's `env.judge`); the order of the tasks when
`runner.task_order=seeded`; MemRL's ε-greedy draws (ε > 0); MemP's random retrieval; an
oracle agent's random choices (ALFWorld's expert). The embedded model at temperature 0 is
greedy: its answers ignore the seed and the cache serves every seed one answer. Where a seed
changes none of these, seeds repeat one run exactly, and a sweep over them says so before it
runs (`seed_warning`).

The gate (`gate_warnings`): with the δ in use (after `delta: auto` is resolved) and the run's
own task intents, whether a task's own memories can pass sim > δ (sim ≥ δ for
`pool_by_intent`, the same rule as memrl.memory.retrieval.passes_gate) and how many pairs of
other tasks can; a gate that nothing passes makes every retrieval empty.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from memrl.metrics.degenerate import GATE_PREFIX


def seed_effects(v: Any) -> list[str]:
    """What the run's seed changes, in words (empty: nothing). `v`: the validated config
    (memrl.config.validate.Validated)."""
    out: list[str] = []
    llm = v.llm
    needs_llm = bool(getattr(v.policy, "needs_llm", True)) or str(getattr(v.memory, "write_mode", "")) == "llm"
    if needs_llm:
        temp = llm.temperature
        if temp is None:
            out.append("the model's samples if its own temperature is above 0 (llm.temperature=null)")
        elif temp > 0:
            out.append(f"the model's samples (llm.temperature={temp:g})")
        elif llm.backend == "litellm":
            out.append("the provider's seed parameter at temperature 0 (only the hosted model's own "
                       "nondeterminism)")
        elif llm.backend == "scripted":
            out.append("the scripted model's answers, if its script reads the request's seed")
    judge = getattr(v.env, "judge", None)  # a benchmark's judge model (HLE)
    if judge is not None:
        if judge.temperature is None:
            out.append("the judge's samples if its own temperature is above 0 (env.judge.temperature=null: "
                       "o3-mini takes only 1)")
        elif judge.temperature > 0:
            out.append(f"the judge's samples (env.judge.temperature={judge.temperature:g})")
        elif judge.backend == "litellm":
            out.append("the judge provider's seed parameter at temperature 0")
    if getattr(v.runner, "task_order", "listed") == "seeded":
        out.append("the order of the tasks (runner.task_order=seeded)")
    eps = getattr(v.memory, "epsilon", 0.0) or 0.0
    if eps > 0:
        out.append(f"MemRL's ε-greedy draws (memory.epsilon={eps:g})")
    if getattr(v.memory, "retrieve", None) == "random":
        out.append("MemP's random retrieval (memory.retrieve=random)")
    if not getattr(v.policy, "needs_llm", True) and getattr(v.env_cls, "name", "") == "alfworld":
        out.append("the expert agent's random choices")
    return out


def seed_warning(seed: int, effects: Sequence[str]) -> str | None:
    """The warning for a run whose seed changes nothing, else None."""
    if effects:
        return None
    return (f"seed={seed} changes nothing in this configuration (the model answers greedily at "
            "temperature 0 whatever the seed, tasks run in their listed order, no ε draws): every seed "
            "repeats one run exactly, and the report counts such copies once. To make seeds differ: "
            "llm.temperature > 0, runner.task_order=seeded, or memory.epsilon > 0 "
            "(docs/reading-results.md, 'What a seed changes')")


MARGIN = 1e-6  # similarities closer than this are one similarity (memrl.memory.retrieval's tie tolerance)


def gate_warnings(delta: float, intents: np.ndarray, *, inclusive: bool = False,
                  how: str = "") -> list[str]:
    """A warning when the similarity gate δ leaves no memory of the run's tasks a margin
    (`intents`: their unit-norm embeddings, one row per task), else none. No similarity
    between the tasks' intents (a task's own included) passes δ by more than `MARGIN`: whether
    a memory passes then depends on rounding in the vector store (a task's own memory scores
    0.9999996 or 1.0000001 against δ = 1), and usually none does."""
    emb = np.asarray(intents, dtype=np.float32)
    if emb.ndim != 2 or emb.shape[0] == 0 or np.isnan(delta):
        return []
    sims = (emb @ emb.T).astype(np.float64)
    if (sims > delta + MARGIN).any():
        return []
    own = np.diag(sims)
    rule = "sim ≥ δ" if inclusive else "sim > δ"
    other = sims[~np.eye(len(sims), dtype=bool)]
    best_other = f", other tasks' at most {other.max():.7f}" if other.size else ""
    return [f"{GATE_PREFIX} δ = {delta:.7f}{how} leaves no margin on these {len(own)} tasks: a task's own "
            f"memories reach similarity {own.max():.7f} at most{best_other}, so whether any passes {rule} "
            "depends on rounding, and usually none does (every retrieval empty: MemRL runs as no memory). "
            "Set memory.delta below 1 (e.g. 0.9) or use more distinct tasks"]
