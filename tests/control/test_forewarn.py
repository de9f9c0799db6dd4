"""What a run is told before it plays (memrl.control.forewarn): what its seed changes, and a
similarity gate that leaves its memories no margin (issue 30, findings 1 and 4)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from memrl.config.validate import validate
from memrl.control.forewarn import gate_warnings, seed_effects, seed_warning
from memrl.control.plan import compose

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "configs"
TINY = ["env=tiny", "memory=memrl", "embedder=hashing", f"hydra.searchpath=[file://{FIXTURES}]"]


def effects(*overrides: str) -> list[str]:
    return seed_effects(validate(compose([*TINY, *overrides])))


def test_what_a_seed_changes_is_named_and_nothing_is_nothing():
    # the embedded model at temperature 0 is greedy: the seed changes nothing at all
    assert effects("llm=local") == []
    assert "seed=1 changes nothing" in seed_warning(1, [])
    assert effects("llm=local", "llm.temperature=0.7") == ["the model's samples (llm.temperature=0.7)"]
    assert effects("llm=local", "runner.task_order=seeded") == ["the order of the tasks (runner.task_order=seeded)"]
    assert effects("llm=local", "memory.epsilon=0.1") == ["MemRL's ε-greedy draws (memory.epsilon=0.1)"]
    (hosted,) = effects("llm=gpt-4o-mini")
    assert "provider's seed parameter" in hosted
    assert seed_warning(1, [hosted]) is None


def test_a_seeded_task_order_is_one_permutation_per_seed():
    from memrl.core.seeding import seeded_order

    items = list(range(20))
    a, b = seeded_order(items, 0), seeded_order(items, 1)
    assert sorted(a) == items and a != items and a != b
    assert seeded_order(items, 0) == a  # the same every time


def unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v)).astype(np.float32)


def test_a_gate_at_the_top_of_the_scale_is_named():
    """Finding 4: on 2 games sharing one sentence, delta=auto came out at 1.0000 and a task's
    own memories (0.9999996) never passed: the start of the run now says so."""
    rng = np.random.default_rng(0)
    v = unit(rng.normal(size=384))
    emb = np.stack([v, v])
    own = float(emb[0] @ emb[0])
    assert own <= 1.0 + 1e-6
    (w,) = gate_warnings(1.0, emb, how=" (auto)")
    assert w.startswith("similarity gate δ = 1.0000000 (auto) leaves no margin on these 2 tasks")
    assert "runs as no memory" in w and "memory.delta below 1" in w
    # distinct tasks under the paper's kind of δ: nothing to say
    other = unit(rng.normal(size=384))
    assert gate_warnings(0.62, np.stack([v, other])) == []
    # own memories pass with room even when other tasks' do not
    assert gate_warnings(0.99, np.stack([v, other])) == []
    assert gate_warnings(float("nan"), emb) == []


def test_the_official_key_gate_is_named_as_inclusive():
    v = unit(np.ones(8))
    (w,) = gate_warnings(1.0, np.stack([v, v]), inclusive=True)
    assert "passes sim ≥ δ" in w


def test_a_judges_samples_are_a_seeds_to_change():
    from types import SimpleNamespace as NS

    from memrl.config.sections import ModelSettings, RunnerSettings

    judge = ModelSettings(name="j", backend="litellm", model="openai/o3-mini", temperature=None)
    v = NS(llm=ModelSettings(name="local", backend="local", temperature=0.0), policy=NS(needs_llm=True),
           memory=NS(epsilon=0.0), runner=RunnerSettings(), env=NS(judge=judge), env_cls=NS(name="hle"))
    assert seed_effects(v) == ["the judge's samples if its own temperature is above 0 (env.judge.temperature=null: "
                               "o3-mini takes only 1)"]
    v.env.judge = judge.model_copy(update={"temperature": 0.0})
    assert seed_effects(v) == ["the judge provider's seed parameter at temperature 0"]
