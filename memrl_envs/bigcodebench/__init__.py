"""BigCodeBench (single-turn Python tasks judged by unit tests, run in a sandbox) behind the
Env seam."""

from memrl_envs.bigcodebench.env import BigCodeBenchEnv
from memrl_envs.bigcodebench.settings import BigCodeBenchSettings

__all__ = ["BigCodeBenchEnv", "BigCodeBenchSettings"]
