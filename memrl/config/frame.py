"""The frame the config is composed into: its sections and top-level keys, and the open
sections Hydra merges configs/ into (`register_sections`).

One owner for each default (docs/design.md §10): a schema (memrl.config.sections, each env's
and memory's `Settings`) holds every default, and the YAML of configs/ states only
`_target_`, names, interpolations and what differs from it. Hydra closes the composed config
before it applies the command line's overrides, so an override of a key that no YAML names
(`runner.batch_size=4`, `memory.alpha=0.1`) would need a `+`, and the `+` would rename the run
directory (its name is the overrides). configs/config.yaml's first default is therefore
`memrl_sections`: every section an empty, open (not struct) node, so such an override works,
and names the directory, exactly as when the YAML named the key. A key no schema knows is then
refused by the validation (memrl.config.validate: `memrl: ...`, exit 2) instead of by Hydra.
The root stays closed: a top-level key needs `+` (and the validation refuses one that is not
in `TOP_LEVEL`).

A leaf without pydantic: `memrl/__init__.py` registers the frame wherever memrl is imported
(a run, a test, a script that composes the config), beside the config resolvers.
"""

from __future__ import annotations

from pathlib import Path

# configs/ of the checkout (the package is installed editable, so it sits beside memrl/)
CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"

# the config's sections, and its top-level keys (configs/config.yaml)
SECTIONS = ("env", "memory", "llm", "embedder", "agent", "runner", "logger", "metrics", "paths")
TOP_LEVEL = (*SECTIONS, "seed")
# the name of the frame in Hydra's ConfigStore: the first entry of configs/config.yaml's defaults
SECTIONS_FRAME = "memrl_sections"


def register_sections() -> None:
    """Store `memrl_sections` in Hydra's ConfigStore (module doc)."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    frame = OmegaConf.create({name: {} for name in SECTIONS})
    for name in SECTIONS:
        OmegaConf.set_struct(frame[name], False)
    ConfigStore.instance().store(name=SECTIONS_FRAME, node=frame, provider="memrl")
