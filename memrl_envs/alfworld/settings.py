"""Validated settings of the ALFWorld env (the `env=alfworld` config group)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from memrl.core.fields import data_location, no_effect
from memrl.env.base import EnvSettings

# ALFWorld's splits: the folders of json_2.1.1 (valid_train: the paper's training tasks)
SPLITS = ("valid_train", "valid_seen", "valid_unseen", "train")


class AlfworldSettings(EnvSettings):
    name: str = "alfworld"  # the benchmark's name (names the run directory)
    data_root: str | None = data_location(None, description="ALFWorld data folder ($ALFWORLD_DATA)")
    split: Literal[SPLITS] = "valid_train"  # the ALFWorld split whose games are the tasks
    max_steps: int = Field(30, ge=1, description="actions per episode (think: actions count); 30 is "
                           "the paper's code")
    prompts_file: str | None = Field(None, description="ReAct few-shot file; null = "
                                     "<data_root>/react_alfworld_3prompts.json")
    demo_index: int = Field(0, ge=0)  # which of a task type's demonstrations comes first
    num_demos: int = Field(1, ge=0)  # demonstrations shown per prompt (0: none)
    # auto: act-only demonstrations for the embedded models, ReAct for the others
    demo_style: Literal["auto", "react", "act"] = "auto"
    # episode: memories shown as episodes (task line, `> action` / observation) | text: as stored
    # | official: the official code's display (successes, then failures; each memory's script
    # or reflection, then its dialogue from its task on: memrl_envs/alfworld/chat.py)
    memory_format: Literal["episode", "text", "official"] = "episode"
    # text: one plain-text prompt per step (prompts.py) | chat: the official code's chat layout
    # (a system message, one worked example as user/assistant turns, the memories as a system
    # message, the task, then the replies and "Observation: ..." turns: memrl_envs/alfworld/chat.py)
    layout: Literal["text", "chat"] = "text"
    # memrl: the first line that acts, a thoughts-only reply is a think step (prompts.py) |
    # official: the text after the last "Action:" (else the whole reply), an empty one plays
    # "look", and nothing is a think step (memrl_envs/alfworld/chat.py)
    action_parse: Literal["memrl", "official"] = "memrl"
    max_tokens: int = Field(64, ge=1, description="tokens per action reply (a reasoning model gets "
                            "headroom on top: memrl.llm.profile)")
    # line: one command after '>' | thought_action: "Thought: ..." then "Action: ..." (the
    # official code's chat ReAct format); either is parsed as the format allows (prompts.py)
    reply_format: Literal["line", "thought_action"] = "line"
    intent_with_observation: bool = False  # the task's intent (its retrieval key) includes the room's description
    cache_dir: str | None = no_effect(None)  # the game facts cache; null = the cache folder's (memrl.core.cachedir)

    @model_validator(mode="after")
    def _check_paths(self) -> "AlfworldSettings":
        if self.data_root is None:
            raise ValueError("data_root: not set: set ALFWORLD_DATA to the ALFWorld data folder or "
                             "pass env.data_root=<folder> (`make data-alfworld` downloads the data)")
        root = Path(self.data_root).expanduser()
        split_dir = root / "json_2.1.1" / self.split
        if not split_dir.is_dir():
            raise ValueError(
                f"data_root: no ALFWorld split folder at {split_dir} "
                "(set ALFWORLD_DATA or env.data_root; `make data-alfworld` downloads the data)")
        if self.layout == "chat" and self.reply_format != "thought_action":
            raise ValueError("layout: chat asks for 'Thought: ... / Action: ...' replies (its "
                             "example turns are written so): set reply_format=thought_action")
        if self.prompts_file is not None and not Path(self.prompts_file).expanduser().is_file():
            raise ValueError(f"prompts_file: {self.prompts_file} does not exist")
        return self
