"""Settings every Lifelong env shares: where the tasks come from, which split, which tasks,
in which order, how many turns, how memories are shown; the OS and DB settings add their
system's own."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from memrl.core.fields import data_location, no_effect
from memrl.env.base import EnvSettings
from memrl_envs.lifelong.data import HUB_PREFIX, VAL_AUTO, val_source


class LifelongTaskSettings(EnvSettings):
    FILE_KIND: ClassVar[str] = "task"   # names the file in error messages (e.g. "DB task")
    FILE_HINT: ClassVar[str] = ""
    VAL_FILE: ClassVar[str] = ""        # the benchmark's validation file, beside its train file

    data_path: str = data_location(description="the task file (JSON keyed by sample index) or hf://<repo>[/<config>]")
    hub_split: str = "train"
    split: Literal["all", "train", "validation"] = Field("all", description=(
        "all | train | validation (train / validation: the division in split_file)"))
    split_file: str | None = data_location(None, description=(
        "null = <cache_dir>/lifelong_splits/<data>.val<val_fraction>.seed<split_seed>.json"))
    # The official task set (MemTensor/MemRL @ 7c3beba, configs/rl_llb_config.yaml split_file:
    # train and validation merged, 500 tasks, played as one training stream)
    val_path: str | None = data_location(None, description=(
        "validation tasks added to the train tasks: null = none; auto = the benchmark's "
        "validation file beside data_path (os_interaction_val.json / db_val.json), or the hub's "
        "'validation' split for hf:// data; else a file (or hf://...) of the same format"))
    task_order: Literal["numeric", "string"] = Field("numeric", description=(
        "run order of the tasks: numeric = by sample index; string = keys sorted as strings, "
        "'10' before '2' (the official runner)"))
    # how retrieved memories are shown (memory_context): memrl = the shared block after the
    # instructions; official = the official code's block (successes first, failures without
    # their attempt) ahead of the instructions
    memory_format: Literal["memrl", "official"] = "memrl"
    val_fraction: float = Field(0.3, gt=0.0, lt=1.0)
    split_seed: int = 0
    max_steps: int = Field(15, ge=1, description="turns per episode (the paper's code: 15)")
    cache_dir: str | None = no_effect(None, description="where split files are kept by default")

    @model_validator(mode="after")
    def _check_source(self) -> "LifelongTaskSettings":
        if not self.data_path.startswith(HUB_PREFIX) and not Path(self.data_path).expanduser().is_file():
            raise ValueError(f"data_path: no {self.FILE_KIND} file at {self.data_path} (set LIFELONG_DATA "
                             f"or env.data_path; {self.FILE_HINT}, or hf://<repo>/<config>)")
        if self.split_file is not None and self.split == "all":
            raise ValueError("split_file: only used with split=train or split=validation")
        val = val_source(self.data_path, self.val_path, self.VAL_FILE)
        if val is not None and not val.startswith(HUB_PREFIX) and not Path(val).expanduser().is_file():
            where = f" (auto: {self.VAL_FILE} beside data_path)" if self.val_path == VAL_AUTO else ""
            raise ValueError(f"val_path: no {self.FILE_KIND} validation file at {val}{where}; "
                             "null runs the train tasks only")
        return self
