"""Building and stepping one ALFWorld game (TextWorld PDDL backend).

The wrapper chain mirrors what ALFWorld's own ``AlfredTWEnv.init_env`` assembles
(TextWorld's generic environment, a step limit, ALFWorld's name demangler and info
wrappers, optionally ALFWorld's handcoded expert, then TextWorld's info filter), but it
is built here around exactly one game file: ``load(game_file)`` on our chain plays that
game and nothing else, so there is no random game sampling and no gym registry.

Thread safety. TextWorld's PDDL backend is not thread-safe: every ``load``/``reset``/
``step`` goes through module-level TatSu parsers (shared tokenizer state), and the PDDL
to SAS translation mutates global translator options, ``sys.argv`` and ``sys.stdout``.
Concurrent games corrupt each other (observed: parse errors and wrong observations).
So every call into TextWorld holds ``TEXTWORLD_LOCK``; the slow part of an LLM episode
(the model call) runs outside it. What runs inside it is kept short by ``speedups`` (cached
parses and translations: a step takes a few ms instead of tens). ALFWorld's handcoded expert
draws from Python's global ``random``: expert episodes additionally hold ``EXPERT_LOCK`` for
their whole duration.

Memory. Each TextWorld PDDL environment ``dlopen``s a private ~34 MB copy of
fast-downward's library and never releases it (``dlclose`` crashes at interpreter exit),
so a fresh environment per episode would grow the process by ~2 MB per episode. Base
environments are therefore pooled and reused (re-``load`` of another game is how
ALFWorld itself moves between games); the pool holds at most one per concurrent episode.
"""

from __future__ import annotations

import random
import sys
import threading
from contextlib import contextmanager
from typing import Any, Iterator

from memrl_envs.alfworld import speedups

TEXTWORLD_LOCK = threading.RLock()
EXPERT_LOCK = threading.Lock()

WELCOME_PREFIX = "-= Welcome to TextWorld"
TASK_MARKER = "Your task is to: "

_idle_bases: list[Any] = []
_pool_lock = threading.Lock()


def _textworld_modules() -> dict[str, Any]:
    """Import TextWorld / ALFWorld lazily: they are an optional extra of the package."""
    try:
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredExpert, AlfredInfos
        from textworld.envs.wrappers import Filter, GenericEnvironment, Limit
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError(
            "The ALFWorld env needs the `alfworld` package (pip install 'memrl-harness[alfworld]')."
        ) from exc
    speedups.install()
    return {
        "EnvInfos": textworld.EnvInfos,
        "GenericEnvironment": GenericEnvironment,
        "Limit": Limit,
        "Filter": Filter,
        "AlfredDemangler": AlfredDemangler,
        "AlfredInfos": AlfredInfos,
        "AlfredExpert": AlfredExpert,
    }


@contextmanager
def _textworld_call() -> Iterator[None]:
    """Serialise a TextWorld call and undo its side effect on ``sys.argv``."""
    with TEXTWORLD_LOCK:
        saved_argv = list(sys.argv)
        try:
            yield
        finally:
            sys.argv[:] = saved_argv


def _acquire_base() -> Any:
    with _pool_lock:
        if _idle_bases:
            return _idle_bases.pop()
    mods = _textworld_modules()
    return mods["GenericEnvironment"](mods["EnvInfos"]())


def _release_base(base: Any) -> None:
    with _pool_lock:
        _idle_bases.append(base)


def split_initial_observation(obs: str) -> tuple[str, str]:
    """Split ALFWorld's first observation into (room description, task sentence).

    The TextWorld banner ("-= Welcome to TextWorld, ALFRED! =-") is dropped. The task
    sentence is the text after "Your task is to: ", e.g. "put a clean mug in coffeemachine.".
    """
    parts = [p.strip() for p in obs.strip().split("\n\n")]
    parts = [p for p in parts if p and not p.startswith(WELCOME_PREFIX)]
    text = "\n".join(parts)
    idx = text.find(TASK_MARKER)
    if idx < 0:
        raise ValueError(f"no '{TASK_MARKER.strip()}' in the initial observation: {obs[:200]!r}")
    room = text[:idx].strip()
    task = text[idx + len(TASK_MARKER):].strip()
    return room, task


class AlfworldGame:
    """One playable ALFWorld game. Use as a context manager, or call ``close()``.

    ``with_expert=True`` adds ALFWorld's handcoded expert, whose next action is
    ``infos["extra.expert_plan"][0]`` after every reset/step.
    """

    def __init__(self, game_file: str, max_env_steps: int, with_expert: bool = False) -> None:
        if max_env_steps < 1:
            raise ValueError("max_env_steps must be >= 1")
        self.game_file = str(game_file)
        self.max_env_steps = int(max_env_steps)
        self.with_expert = with_expert
        self._base: Any = None
        self._env: Any = None

    # -- lifecycle -------------------------------------------------------------------
    def _build(self) -> Any:
        mods = _textworld_modules()
        base = _acquire_base()
        self._base = base
        # The request object is shared by every wrapper and by the backend: set it afresh.
        infos = base.request_infos
        for slot in infos.basics:
            setattr(infos, slot, False)
        infos.won = True
        infos.admissible_commands = True
        infos.extras = ["gamefile"] + (["expert_plan"] if self.with_expert else [])
        env = mods["Limit"](base, max_episode_steps=self.max_env_steps)
        env = mods["AlfredDemangler"](shuffle=False)(env)
        env = mods["AlfredInfos"](env)
        if self.with_expert:
            env = mods["AlfredExpert"](env, expert_type="handcoded")
        return mods["Filter"](env)

    def reset(self) -> tuple[str, dict[str, Any]]:
        """Load the game and return (initial observation, infos)."""
        with _textworld_call():
            if self._env is None:
                self._env = self._build()
            self._env.load(self.game_file)
            obs, infos = self._env.reset()
        played = infos.get("extra.gamefile")
        if played is not None and str(played) != self.game_file:
            raise RuntimeError(f"TextWorld loaded {played!r} instead of {self.game_file!r}")
        return obs, infos

    def step(self, command: str) -> tuple[str, bool, bool, dict[str, Any]]:
        """Send one command; return (observation, won, done, infos)."""
        if self._env is None:
            raise RuntimeError("reset() the game before stepping it")
        with _textworld_call():
            obs, score, done, infos = self._env.step(command)
        won = bool(infos.get("won")) or float(score or 0) > 0
        return obs, won, bool(done), infos

    def close(self) -> None:
        if self._base is not None:
            _release_base(self._base)
        self._base = None
        self._env = None

    def __enter__(self) -> "AlfworldGame":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def expert_rng_guard() -> Iterator[None]:
    """Hold the expert lock; restore Python's global ``random`` state afterwards.

    ALFWorld's handcoded expert calls the global ``random`` without a seed. Holding the
    lock keeps concurrent expert episodes from interleaving their draws, so an episode's
    actions depend only on (game, seed).
    """
    with EXPERT_LOCK:
        saved = random.getstate()
        try:
            yield
        finally:
            random.setstate(saved)


def seed_expert_rng(seed: int) -> None:
    """Seed the global generator the handcoded expert draws from (call inside ``expert_rng_guard``)."""
    random.seed(int(seed))
