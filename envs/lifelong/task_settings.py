"""Settings every Lifelong env shares: where the tasks come from, which split, which tasks,
how many turns; the OS and DB settings add their system's own."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from memrl.result_keys import data_location, no_effect
from memrl_envs.base import EnvSettings

from .loader import HUB_PREFIX


class LifelongTaskSettings(EnvSettings):
    FILE_KIND: ClassVar[str] = "task"   # names the file in error messages (e.g. "DB task")
    FILE_HINT: ClassVar[str] = ""

    data_path: str = data_location(description="the task file (JSON keyed by sample index) or hf://<repo>[/<config>]")
    hub_split: str = "train"
    split: Literal["all", "train", "validation"] = "all"
    split_file: str | None = data_location(None)
    val_fraction: float = Field(0.3, gt=0.0, lt=1.0)
    split_seed: int = 0
    max_steps: int = Field(15, ge=1, description="turns per episode")
    cache_dir: str | None = no_effect(None, description="where split files are kept by default")

    @model_validator(mode="after")
    def _check_source(self) -> "LifelongTaskSettings":
        if not self.data_path.startswith(HUB_PREFIX) and not Path(self.data_path).expanduser().is_file():
            raise ValueError(f"data_path: no {self.FILE_KIND} file at {self.data_path} (set LIFELONG_DATA "
                             f"or env.data_path; {self.FILE_HINT}, or hf://<repo>/<config>)")
        if self.split_file is not None and self.split == "all":
            raise ValueError("split_file: only used with split=train or split=validation")
        return self
