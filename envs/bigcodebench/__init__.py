"""BigCodeBench (single-turn Python tasks judged by unit tests, run in a sandbox) behind the
Env seam."""

from .adapter import BigCodeBenchEnv
from .settings import BigCodeBenchSettings

BigCodeBenchEnv.Settings = BigCodeBenchSettings  # the schema `memrl.config.validate` checks env=bigcodebench with
# the field a transfer run's `runner.eval_split` replaces (BCB's `split` is instruct|complete)
BigCodeBenchEnv.EVAL_SPLIT_FIELD = "part"

__all__ = ["BigCodeBenchEnv", "BigCodeBenchSettings"]
