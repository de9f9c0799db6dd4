"""Scripted models for runs of the newer memory methods (memrl_baselines: memq, reasoningbank,
expel, awm) through `python -m memrl.cli run` (`llm=scripted llm.script=method_replies:<fn>`;
PYTHONPATH must include tests/).

- `tiny`: the tiny benchmark's model (tests/tiny_env.py `reply`: a hash, so outcomes vary)
  for the actions, and the provider emulation's replies (memrl.testing.replies) to the
  methods' own prompts (the judge, ReasoningBank's items, ExpeL's operations, AWM's
  workflows).
- `bench`: the provider emulation's replies to everything (plausible for every benchmark's
  parser: memrl.testing.replies), for runs on the real benchmarks.

Both wait $METHOD_REPLY_DELAY seconds first (a run that a test kills in the middle; the delay
is not part of the config, so the same command runs fast or slow).
"""

from __future__ import annotations

import os
import time

import tiny_env
from memrl.llm.base import content_text
from memrl.testing.replies import memory_method_reply, reply_for


def _wait() -> None:
    time.sleep(float(os.environ.get("METHOD_REPLY_DELAY", "0")))


def tiny(request) -> str:
    _wait()
    return memory_method_reply(content_text(request.messages[-1][1])) or tiny_env.reply(request)


def bench(request) -> str:
    _wait()
    return reply_for([{"role": role, "content": content} for role, content in request.messages])
