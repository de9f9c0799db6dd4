"""Humanity's Last Exam (HLE) behind the Env seam: questions, solver prompts, judge model."""

from .adapter import HLEEnv
from .settings import HLESettings

__all__ = ["HLEEnv", "HLESettings"]
