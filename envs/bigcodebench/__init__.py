"""BigCodeBench (single-turn Python tasks judged by unit tests, run in a sandbox) behind the
Env seam."""

from .adapter import BigCodeBenchEnv
from .settings import BigCodeBenchSettings

__all__ = ["BigCodeBenchEnv", "BigCodeBenchSettings"]
