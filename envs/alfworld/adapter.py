"""The ALFWorld env adapter: one task = one game; a ReAct LLM agent or ALFWorld's expert."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

from memrl.llm.base import LLMError
from memrl.records import EpisodeResult, RetrievedMemory, Step, Task

from . import catalog, speedups
from .game import AlfworldGame, expert_rng_guard, seed_expert_rng, split_initial_observation
from .prompts import (
    INSTRUCTIONS,
    MEMORY_FORMATS,
    PROMPTS_FILENAME,
    build_prompt,
    default_prompts_file,
    format_task_start,
    is_think,
    load_demonstrations,
    parse_action,
    resolve_style,
    select_demonstrations,
)

if TYPE_CHECKING:
    from memrl.llm.client import EpisodeLLM

AGENTS = ("react", "expert")
_SAVE_EVERY = 20


class AlfworldEnv:
    """ALFWorld text games (TextWorld) behind the project's Env seam.

    Args:
        split: valid_train | valid_seen | valid_unseen | train (json_2.1.1 subfolders).
        data_root: the ALFWorld data folder; default ``$ALFWORLD_DATA``.
        agent: "react" (needs an LLM) or "expert" (ALFWorld's handcoded expert, no LLM).
        max_steps: actions per episode ("think:" actions count, as in ReAct).
        max_tasks: keep the first N games after sorting by task id.
        task_ids: keep only these task ids (applied before ``max_tasks``).
        intent_with_observation: the intent is the room description plus the task
            sentence instead of the task sentence alone.
        cache_dir: where the per-game intent cache lives; default ``$MEMRL_CACHE_DIR``
            or ``~/.cache/memrl``.
        prompts_file: ReAct demonstrations (keys ``react_<type>_<i>`` and ``act_<type>_<i>``);
            default ``<data_root>/react_alfworld_3prompts.json``.
        demo_index, num_demos: which demonstrations of the task's type go in the prompt.
        demo_style: auto | react | act (see ``prompts``: auto = act-only demonstrations for
            the embedded models, ReAct for the others).
        memory_format: episode (memories shown as episodes) | text (as stored).
        max_tokens, stop: generation settings of the action call.
        show_progress: show a progress bar while intents are computed.
    """

    name = "alfworld"

    def __init__(
        self,
        split: str = "valid_seen",
        data_root: str | os.PathLike[str] | None = None,
        agent: str = "react",
        max_steps: int = 30,
        max_tasks: int | None = None,
        task_ids: Iterable[str] | None = None,
        intent_with_observation: bool = False,
        cache_dir: str | os.PathLike[str] | None = None,
        prompts_file: str | os.PathLike[str] | None = None,
        demo_index: int = 0,
        num_demos: int = 1,
        demo_style: str = "auto",
        memory_format: str = "episode",
        max_tokens: int = 128,
        stop: Sequence[str] = ("\n",),
        show_progress: bool = True,
    ) -> None:
        if agent not in AGENTS:
            raise ValueError(f"unknown ALFWorld agent {agent!r}; expected one of {AGENTS}")
        if max_steps < 1:
            raise ValueError("max_steps must be >= 1")
        if max_tasks is not None and max_tasks < 0:
            raise ValueError("max_tasks must be >= 0")
        self.split = split
        self.data_root = catalog.resolve_data_root(data_root)
        self.split_dir = catalog.split_folder(self.data_root, split)
        # alfworld's import creates ~/.cache/alfworld unless ALFWORLD_DATA is set.
        os.environ.setdefault("ALFWORLD_DATA", str(self.data_root))
        self.agent = agent
        self.max_steps = int(max_steps)
        self.max_tasks = max_tasks
        self.task_ids = list(task_ids) if task_ids is not None else None
        self.intent_with_observation = intent_with_observation
        self.cache = catalog.GameInfoCache(cache_dir)
        speedups.set_disk_dir(self.cache.path.parent)  # PDDL translations, next to the game facts
        self.demo_index = demo_index
        self.num_demos = num_demos
        self.demo_style = demo_style
        resolve_style(demo_style, None)  # a bad value fails here, not in an episode
        if memory_format not in MEMORY_FORMATS:
            raise ValueError(f"memory_format: {' | '.join(MEMORY_FORMATS)} (got {memory_format!r})")
        self.memory_format = memory_format
        self.max_tokens = max_tokens
        self.stop = tuple(stop)
        self.show_progress = show_progress
        self._demos: dict[tuple[str, str], list[str]] = {}  # (style, task type) -> demonstrations
        if agent == "react" and num_demos > 0:
            path = Path(prompts_file) if prompts_file is not None else default_prompts_file(self.data_root)
            if path is None or not path.is_file():
                wanted = prompts_file or self.data_root / PROMPTS_FILENAME
                raise ValueError(f"ReAct prompts file not found ({wanted}): pass prompts_file=..., or num_demos=0")
            all_demos = load_demonstrations(path)
            styles = ("react", "act") if demo_style == "auto" else (demo_style,)
            for style in styles:
                for task_type in catalog.TASK_TYPES.values():
                    self._demos[(style, task_type)] = select_demonstrations(
                        all_demos, task_type, demo_index, num_demos, style=style)
        self._tasks: list[Task] | None = None
        self._tasks_lock = threading.Lock()

    # -- tasks -----------------------------------------------------------------------
    def tasks(self) -> list[Task]:
        with self._tasks_lock:
            if self._tasks is None:
                self._tasks = self._list_tasks()
            return list(self._tasks)

    def _list_tasks(self) -> list[Task]:
        entries = catalog.candidate_games(self.split_dir)
        if self.task_ids is not None:
            by_id = {e.task_id: e for e in entries}
            missing = [t for t in self.task_ids if t not in by_id]
            if missing:
                raise ValueError(f"unknown task ids for split {self.split!r} ({self.split_dir}): {missing[:5]}")
            wanted = set(self.task_ids)
            entries = [e for e in entries if e.task_id in wanted]
        chosen: list[tuple[catalog.GameEntry, str]] = []
        for entry in entries:
            if self.max_tasks is not None and len(chosen) >= self.max_tasks:
                break
            digest = catalog.file_digest(entry.game_file)
            if catalog.is_solvable(entry.game_file, self.cache, digest):
                chosen.append((entry, digest))
        if not chosen and self.max_tasks != 0:
            raise ValueError(
                f"no playable ALFWorld games in {self.split_dir} (after filters): {catalog.DATA_HINT}"
            )
        self._fill_intents(chosen)
        tasks = []
        for entry, digest in chosen:
            known = self.cache.get(digest)
            room, sentence = known["room"], known["task"]
            intent = format_task_start(room, sentence) if self.intent_with_observation else sentence
            payload = {
                "game_file": str(entry.game_file),
                "task_type": entry.task_type,
                "family": entry.family,
                "split": self.split,
                "task": sentence,
                "room": room,
            }
            tasks.append(Task(task_id=entry.task_id, intent=intent, payload=payload))
        return tasks

    def _fill_intents(self, chosen: list[tuple[catalog.GameEntry, str]]) -> None:
        todo = [(e, d) for e, d in chosen if "task" not in self.cache.get(d)]
        if not todo:
            self.cache.save()
            return
        from tqdm import tqdm

        bar = tqdm(todo, desc=f"alfworld {self.split}: reading task intents", disable=not self.show_progress)
        try:
            for n, (entry, digest) in enumerate(bar, 1):
                with AlfworldGame(str(entry.game_file), max_env_steps=1) as game:
                    obs, _ = game.reset()
                room, sentence = split_initial_observation(obs)
                self.cache.update(digest, room=room, task=sentence)
                if n % _SAVE_EVERY == 0:
                    self.cache.save()
        finally:
            bar.close()
            self.cache.save()

    # -- episodes --------------------------------------------------------------------
    def _entry_for(self, task: Task) -> catalog.GameEntry:
        game_file = Path(task.payload.get("game_file") or self.split_dir / task.task_id / catalog.GAME_FILE)
        if not game_file.is_file():
            raise ValueError(f"task {task.task_id!r}: no game file at {game_file}")
        return catalog.GameEntry(task_id=task.task_id, game_file=game_file, family=catalog.task_family(task.task_id))

    def solve(
        self,
        task: Task,
        memories: Sequence[RetrievedMemory],
        llm: "EpisodeLLM | None",
        seed: int,
    ) -> EpisodeResult:
        entry = self._entry_for(task)
        if self.agent == "expert":
            with expert_rng_guard():
                return self._play(entry, memories, None, seed)
        if llm is None:
            raise ValueError("the ReAct ALFWorld agent needs an LLM")
        return self._play(entry, memories, llm, seed)

    def _play(
        self,
        entry: catalog.GameEntry,
        memories: Sequence[RetrievedMemory],
        llm: "EpisodeLLM | None",
        seed: int,
    ) -> EpisodeResult:
        expert = llm is None
        transcript: list[Step] = []
        errors: list[str] = []
        won = done = False
        env_steps = 0
        empty_actions = 0  # replies with no parseable action (empty or blank): a wasted step
        task_start = ""
        style = resolve_style(self.demo_style, llm)
        game = AlfworldGame(str(entry.game_file), max_env_steps=self.max_steps, with_expert=expert)
        try:
            obs, infos = game.reset()
            task_start = format_task_start(*split_initial_observation(obs))
            if expert:
                seed_expert_rng(seed)
            demos = self._demos.get((style, entry.task_type), [])
            while not done and len(transcript) < self.max_steps:
                if expert:
                    action = str(infos["extra.expert_plan"][0])
                else:
                    prompt = build_prompt(demos, memories, task_start, transcript,
                                          instruction=INSTRUCTIONS[style],
                                          memory_format=self.memory_format)
                    try:
                        reply = llm.complete(prompt, purpose="act", max_tokens=self.max_tokens, stop=self.stop)
                    except LLMError as exc:
                        errors.append(f"LLMError at step {len(transcript) + 1}: {exc}")
                        break
                    action = parse_action(reply or "")
                    empty_actions += not action
                if is_think(action):
                    observation = "OK."
                else:
                    observation, won, done, infos = game.step(action)
                    env_steps += 1
                transcript.append(Step(action=action, observation=observation))
        except Exception as exc:  # an env failure ends the episode as failed, not the run
            errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            game.close()
        truncated = not won and not errors and len(transcript) >= self.max_steps
        return EpisodeResult(
            success=won,
            reward=1.0 if won else 0.0,
            steps=len(transcript),
            transcript=transcript,
            errors=errors,
            info={
                "task_type": entry.task_type,
                "family": entry.family,
                "agent": self.agent,
                "truncated": truncated,
                "env_steps": env_steps,
                "empty_actions": empty_actions,
                "initial_observation": task_start,
                "memories_injected": 0 if expert else len(memories),
                **({} if expert else {"demo_style": style}),
            },
        )

    def close(self) -> None:
        self.cache.save()

