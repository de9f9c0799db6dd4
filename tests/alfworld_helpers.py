"""ALFWorld for tests: the shared data folder, the skip mark when it is absent, an env on it
with any settings (`make_env`), and a fake model that answers the adapter's prompts."""

from __future__ import annotations

from pathlib import Path

import pytest
from data_paths import ALFWORLD


needs_data = pytest.mark.skipif(not ALFWORLD.is_dir(), reason=f"ALFWorld data not at {ALFWORLD}")


def alfworld_module():
    pytest.importorskip("alfworld", reason="the alfworld extra is not installed")
    import memrl_envs.alfworld as mod

    return mod


def make_env(cache_dir, *, agent, **fields):
    mod = alfworld_module()
    fields.setdefault("split", "valid_seen")
    fields.setdefault("data_root", ALFWORLD)
    settings = mod.AlfworldSettings(cache_dir=str(cache_dir),
                                    **{k: str(v) if isinstance(v, Path) else v for k, v in fields.items()})
    return mod.AlfworldEnv(settings, agent=agent, show_progress=False)


class FakeLLM:
    """What of EpisodeLLM the adapter uses; replies come from `reply(prompt, i)`."""

    honors_stop = True  # a provider that takes stop sequences (the one-line reply is cut there)

    def __init__(self, reply):
        self._reply = reply
        self.prompts: list[str] = []
        self.kwargs: list[dict] = []

    def complete(self, prompt, *, purpose, max_tokens=None, stop=(), **_):
        self.prompts.append(prompt)
        self.kwargs.append({"purpose": purpose, "max_tokens": max_tokens, "stop": stop})
        return self._reply(prompt, len(self.prompts) - 1)
