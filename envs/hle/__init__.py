"""Humanity's Last Exam (HLE) behind the Env seam: questions, solver prompts, judge model."""

from .adapter import HLEEnv
from .settings import HLESettings

HLEEnv.Settings = HLESettings  # the schema `memrl.config.validate` checks env=hle with

__all__ = ["HLEEnv"]
