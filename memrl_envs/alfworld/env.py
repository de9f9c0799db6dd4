"""The ALFWorld env adapter: one task = one game; a ReAct LLM agent or ALFWorld's expert."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Sequence

from memrl.core.records import EpisodeResult, RetrievedMemory, Step, Task
from memrl.env.base import Env, Policy
from memrl.llm.base import LLMError, ModelProbe
from memrl_envs.alfworld import catalog, chat, speedups
from memrl_envs.alfworld.game import AlfworldGame, expert_rng_guard, seed_expert_rng, split_initial_observation
from memrl_envs.alfworld.prompts import (PROMPTS_FILENAME, STOP, build_prompt, chat_instruction, default_prompts_file,
                                         format_task_start, instruction_for, is_think, load_demonstrations,
                                         memory_block, parse_action, resolve_style, select_demonstrations)
from memrl_envs.alfworld.settings import AlfworldSettings

if TYPE_CHECKING:
    from memrl.llm.client import EpisodeLLM

_SAVE_EVERY = 20
log = logging.getLogger(__name__)


class AlfworldPolicy(Policy):
    """An ALFWorld agent: one action per turn from the episode so far. `replies` holds what it
    answered at each turn (a model's raw reply), for the episode's dialogue (chat.py)."""

    expert_plan: ClassVar[bool] = False     # the game computes ALFWorld's expert plan for it
    demonstrations: ClassVar[bool] = False  # its prompt shows ReAct demonstrations
    style: str | None = None                # which of them (prompts.DEMO_STYLES)

    def __init__(self, settings: AlfworldSettings, llm: "EpisodeLLM | None",
                 memories: Sequence[RetrievedMemory]) -> None:
        super().__init__(settings, llm, memories)
        self.replies: list[str] = []

    def act(self, demos: Sequence[str], task_start: str, transcript: Sequence[Step],
            infos: dict) -> str:
        raise NotImplementedError

    def dialogue_head(self, demos: Sequence[str], task_start: str) -> list[chat.Message]:
        """The episode's messages before its first reply (chat.dialogue_head): what the chat
        layout sends, and the text layout's equivalent (its instruction, its demonstrations as
        written, its memory block) for the memory the episode leaves."""
        return chat.dialogue_head(instruction_for(self.style or "act", self.s.reply_format),
                                  demos, "", task_start, merge_thoughts=False)


class ReactPolicy(AlfworldPolicy):
    """The LLM continues the ReAct prompt (demonstrations, memories, the episode so far)."""

    demonstrations = True

    def __init__(self, settings: AlfworldSettings, llm: "EpisodeLLM | None",
                 memories: Sequence[RetrievedMemory]) -> None:
        super().__init__(settings, llm, memories)
        self.style = resolve_style(settings.demo_style, llm)  # act-only for embedded models
        self._block: str | None = None

    def memory_block(self) -> str:
        """The memories as `memory_format` shows them (made once an episode)."""
        if self._block is None:
            self._block = memory_block(self.memories, self.s.memory_format)
        return self._block

    def dialogue_head(self, demos: Sequence[str], task_start: str) -> list[chat.Message]:
        if self.s.layout == "chat":
            return chat.dialogue_head(chat_instruction(), demos, self.memory_block(), task_start,
                                      merge_thoughts=True)
        return chat.dialogue_head(instruction_for(self.style, self.s.reply_format), demos,
                                  self.memory_block(), task_start, merge_thoughts=False)

    def prompt(self, demos: Sequence[str], task_start: str,
               transcript: Sequence[Step]) -> str | list[tuple[str, str]]:
        """The step's prompt: the text layout's plain text, or the chat layout's messages
        (the head, then the replies so far, each followed by its observation)."""
        if self.s.layout == "chat":
            messages = chat.dialogue(self.dialogue_head(demos, task_start),
                                     self.replies[:len(transcript)],
                                     [step.observation for step in transcript])
            return chat.as_chat(messages)
        return build_prompt(demos, self.memories, task_start, transcript,
                            instruction=instruction_for(self.style, self.s.reply_format),
                            memory_format=self.s.memory_format, reply_format=self.s.reply_format)

    def stop(self) -> tuple[str, ...]:
        """One line ends a `line` reply, where the provider takes stop sequences; a provider
        that drops them (and a two-line format) gets none: the reply is parsed instead, so
        a "Thought: / Action:" reply is never cut to its thought."""
        if self.s.reply_format == "line" and self.llm is not None and self.llm.honors_stop:
            return STOP
        return ()

    def act(self, demos: Sequence[str], task_start: str, transcript: Sequence[Step],
            infos: dict) -> str:
        reply = self.llm.complete(self.prompt(demos, task_start, transcript), purpose="act",
                                  max_tokens=self.s.max_tokens, stop=self.stop(),
                                  budget_key="env.max_tokens") or ""
        self.replies.append(reply)
        if self.s.action_parse == "official":
            return chat.parse_action_official(reply)
        return parse_action(reply)


class ExpertPolicy(AlfworldPolicy):
    """ALFWorld's handcoded expert (no LLM): the next action of its plan."""

    needs_llm = False
    reads_memories = False
    expert_plan = True

    def act(self, demos: Sequence[str], task_start: str, transcript: Sequence[Step],
            infos: dict) -> str:
        action = str(infos["extra.expert_plan"][0])
        self.replies.append(action)
        return action


class AlfworldEnv(Env):
    """ALFWorld text games (TextWorld) behind the project's Env seam.

    Settings (``AlfworldSettings``, the `env=alfworld` group): the split (json_2.1.1
    subfolder), data_root, max_steps (actions per episode; "think:" actions count, as in
    ReAct), max_tasks / task_ids, intent_with_observation (the intent is the room
    description plus the task sentence), cache_dir (the per-game intent cache), prompts_file
    and demo_index / num_demos (the ReAct demonstrations), demo_style (auto | react | act:
    auto = ReAct's act-only demonstrations for the embedded models, ReAct for the others),
    memory_format (episode: memories shown as episodes | text: as stored | official: the
    official code's display), max_tokens (per action reply), reply_format (line |
    thought_action), layout (text: one plain prompt | chat: the official code's dialogue,
    chat.py), action_parse (memrl | official: the text after the last "Action:", an empty
    reply plays "look", no think steps).
    Every result carries `memory_trajectory`: the episode's dialogue as JSON (chat.py), in
    either layout.
    Agents: "react" (an LLM) or "expert" (ALFWorld's handcoded expert, no LLM).
    `show_progress`: a progress bar while intents are computed, only on a terminal (tqdm's
    `disable=None`, as `runner.progress: auto`), so a batch job's log holds no bar redraws;
    elsewhere a log line every 10 s (INFO, `memrl plan` shows them).
    """

    name = "alfworld"
    Settings = AlfworldSettings
    POLICIES = {"react": ReactPolicy, "expert": ExpertPolicy}

    def __init__(self, settings: AlfworldSettings, *, agent: str, show_progress: bool = True) -> None:
        super().__init__(settings, agent=agent)
        self.data_root = catalog.resolve_data_root(settings.data_root)
        self.split_dir = catalog.split_folder(self.data_root, settings.split)
        # alfworld's import creates ~/.cache/alfworld unless ALFWORLD_DATA is set.
        os.environ.setdefault("ALFWORLD_DATA", str(self.data_root))
        self.cache = catalog.GameInfoCache(settings.cache_dir)
        speedups.set_disk_dir(self.cache.path.parent)  # PDDL translations, next to the game facts
        self.show_progress = show_progress
        self._skipped: list[dict[str, str]] = []  # game folders left out, with the reason
        self._demos: dict[tuple[str, str], list[str]] = {}  # (style, task type) -> demonstrations
        if self.policy_cls.demonstrations and settings.num_demos > 0:
            path = Path(settings.prompts_file) if settings.prompts_file is not None \
                else default_prompts_file(self.data_root)
            if path is None or not path.is_file():
                wanted = settings.prompts_file or self.data_root / PROMPTS_FILENAME
                raise ValueError(f"ReAct prompts file not found ({wanted}): set prompts_file, or num_demos=0")
            all_demos = load_demonstrations(path)
            styles = ("react", "act") if settings.demo_style == "auto" else (settings.demo_style,)
            for style in styles:
                for task_type in catalog.TASK_TYPES.values():
                    self._demos[(style, task_type)] = select_demonstrations(
                        all_demos, task_type, settings.demo_index, settings.num_demos, style=style)

    # -- tasks -----------------------------------------------------------------------
    def _list_tasks(self) -> list[Task]:
        s = self.s
        entries = catalog.candidate_games(self.split_dir)
        if s.task_ids is not None:
            by_id = {e.task_id: e for e in entries}
            missing = [t for t in s.task_ids if t not in by_id]
            if missing:
                raise ValueError(f"unknown task ids for split {s.split!r} ({self.split_dir}): {missing[:5]}")
            damaged = [f"{t}: {by_id[t].problem}" for t in s.task_ids if by_id[t].problem]
            if damaged:
                raise ValueError(f"task ids whose game cannot be played: {'; '.join(damaged[:5])}: "
                                 f"{catalog.DATA_HINT}")
            wanted = set(s.task_ids)
            entries = [e for e in entries if e.task_id in wanted]
        chosen: list[tuple[catalog.GameEntry, str]] = []
        self._skipped = []
        for entry in entries:
            if s.max_tasks is not None and len(chosen) + len(self._skipped) >= s.max_tasks:
                break
            if entry.problem is not None:  # keeps its place: the next game does not move up
                log.warning("alfworld: skipping %s: %s", entry.task_id, entry.problem)
                self._skipped.append({"item": entry.task_id, "reason": entry.problem})
                continue
            digest = catalog.file_digest(entry.game_file)
            if catalog.is_solvable(entry.game_file, self.cache, digest):
                chosen.append((entry, digest))
        if not chosen:
            raise ValueError(
                f"no playable ALFWorld games in {self.split_dir} (after filters): {catalog.DATA_HINT}"
            )
        self._fill_intents(chosen)
        tasks = []
        for entry, digest in chosen:
            known = self.cache.get(digest)
            room, sentence = known["room"], known["task"]
            intent = format_task_start(room, sentence) if s.intent_with_observation else sentence
            payload = {
                "game_file": str(entry.game_file),
                "task_type": entry.task_type,
                "family": entry.family,
                "split": s.split,
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

        bar = tqdm(todo, desc=f"alfworld {self.s.split}: reading task intents",
                   disable=None if self.show_progress else True)
        said = time.monotonic()
        try:
            for n, (entry, digest) in enumerate(bar, 1):
                if bar.disable and self.show_progress and (time.monotonic() - said > 10 or n == len(todo)):
                    said = time.monotonic()  # no bar (not a terminal): a log line every 10 s
                    log.info("alfworld %s: reading task intents %d/%d", self.s.split, n, len(todo))
                with AlfworldGame(str(entry.game_file), max_env_steps=1) as game:
                    obs, _ = game.reset()
                room, sentence = split_initial_observation(obs)
                self.cache.update(digest, room=room, task=sentence)
                if n % _SAVE_EVERY == 0:
                    self.cache.save()
        finally:
            bar.close()
            self.cache.save()

    def data_skipped(self) -> list[dict[str, str]]:
        return list(self._skipped)

    @classmethod
    def replay_prompts(cls, settings: AlfworldSettings, episode: Mapping[str, Any], memory: RetrievedMemory,
                       llm: Any = None) -> list[str]:
        """The text-layout prompt at each step of `episode` (the instruction and demonstration of
        its task type, `memory` shown as configured, the history so far): what a student copying
        that episode sees (memrl.demo.bench)."""
        from memrl_envs.alfworld.prompts import INSTRUCTIONS

        s = settings
        demos = load_demonstrations(s.prompts_file or default_prompts_file(Path(s.data_root)))
        style = resolve_style(s.demo_style, llm)
        info = episode.get("info") or {}
        task_type = info.get("task_type") or catalog.TASK_TYPES[catalog.task_family(episode["task_id"])]
        shown = select_demonstrations(demos, task_type, s.demo_index, s.num_demos, style=style)
        steps = [Step(**x) for x in episode.get("transcript") or []]
        return [build_prompt(shown, [memory], info["initial_observation"], steps[:t],
                             instruction=INSTRUCTIONS[style], memory_format=s.memory_format)
                for t in range(len(steps))]

    def model_probes(self, task: Task, llm: "EpisodeLLM") -> list[ModelProbe]:
        """The first step of `task` as the agent asks it (memrl.control.preflight)."""
        if not self.policy_cls.needs_llm:
            return []
        policy = ReactPolicy(self.s, llm, [])
        demos = self._demos.get((policy.style or "", task.payload.get("task_type", "")), [])
        start = format_task_start(task.payload.get("room", ""), task.payload.get("task", task.intent))
        return [ModelProbe(role="llm", purpose="act", prompt=policy.prompt(demos, start, []),
                           answer_tokens=self.s.max_tokens, budget_key="env.max_tokens",
                           stop=policy.stop())]

    # -- episodes --------------------------------------------------------------------
    def _entry_for(self, task: Task) -> catalog.GameEntry:
        game_file = Path(task.payload.get("game_file") or self.split_dir / task.task_id / catalog.GAME_FILE)
        if not game_file.is_file():
            raise ValueError(f"task {task.task_id!r}: no game file at {game_file}")
        return catalog.GameEntry(task_id=task.task_id, game_file=game_file, family=catalog.task_family(task.task_id))

    def solve(self, task: Task, memories: Sequence[RetrievedMemory], llm: "EpisodeLLM | None",
              seed: int) -> EpisodeResult:
        entry = self._entry_for(task)
        policy = self.new_policy(llm, memories)
        if policy.expert_plan:
            with expert_rng_guard():
                return self._play(entry, policy, seed)
        return self._play(entry, policy, seed)

    def _play(self, entry: catalog.GameEntry, policy: AlfworldPolicy, seed: int) -> EpisodeResult:
        max_steps = self.s.max_steps
        transcript: list[Step] = []
        errors: list[str] = []
        outcome = ""
        won = done = False
        env_steps = 0
        empty_actions = 0  # replies with no parseable action (empty or blank): a wasted step
        official = self.s.action_parse == "official"
        call_failed = False  # the episode's last model call raised (no reply to it)
        task_start = ""
        demos = self._demos.get((policy.style or "", entry.task_type), [])
        game = AlfworldGame(str(entry.game_file), max_env_steps=max_steps, with_expert=policy.expert_plan)
        try:
            obs, infos = game.reset()
            task_start = format_task_start(*split_initial_observation(obs))
            if policy.expert_plan:
                seed_expert_rng(seed)
            while not done and len(transcript) < max_steps:
                try:
                    action = policy.act(demos, task_start, transcript, infos)
                except LLMError as exc:
                    errors.append(f"LLMError at step {len(transcript) + 1}: {exc}")
                    outcome = "llm_error"
                    call_failed = True
                    break
                empty_actions += not action
                if official and not action:  # the official runner plays "look" for no action
                    action = "look"
                if not official and is_think(action):
                    observation = "OK."
                else:
                    observation, won, done, infos = game.step(action)
                    env_steps += 1
                transcript.append(Step(action=action, observation=observation))
        except Exception as exc:  # an env failure ends the episode as failed, not the run
            errors.append(f"{type(exc).__name__}: {exc}")
            outcome = "env_error"
        finally:
            game.close()
        truncated = not won and not errors and len(transcript) >= max_steps
        if won:
            outcome, detail = "success", "won"
        else:
            outcome = outcome or "failure"
            detail = "step_limit" if truncated else outcome
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
                "memories_injected": len(policy.memories),
                **({"demo_style": policy.style} if policy.style else {}),
            },
            outcome=outcome,
            outcome_detail=detail,
            memory_trajectory=self._memory_trajectory(policy, demos, task_start, transcript, call_failed),
        )

    def _memory_trajectory(self, policy: AlfworldPolicy, demos: Sequence[str], task_start: str,
                           transcript: Sequence[Step], call_failed: bool) -> str:
        """The dialogue the official writer is handed: the messages of the last model call
        plus its reply, so without the final observation (after a failed call: the messages
        it was sent), as JSON (chat.trajectory_json)."""
        observations = [step.observation for step in transcript]
        if not call_failed:
            observations = observations[:max(len(policy.replies) - 1, 0)]
        head = policy.dialogue_head(demos, task_start)
        return chat.trajectory_json(chat.dialogue(head, policy.replies, observations))

    def close(self) -> None:
        self.cache.save()

