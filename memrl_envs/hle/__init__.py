"""Humanity's Last Exam (HLE) behind the Env seam: questions, solver prompts, judge model."""

from memrl_envs.hle.env import HLEEnv
from memrl_envs.hle.settings import HLESettings

__all__ = ["HLEEnv", "HLESettings"]
