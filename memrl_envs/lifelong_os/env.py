"""The Lifelong-OS env: LifelongAgentBench's Linux tasks, each episode in its own throwaway
root file system (see os_shell); an LLM agent ("react") or the ground-truth oracle ("gold")."""

from __future__ import annotations

import contextlib
import logging
import threading
from pathlib import Path
from typing import Callable

from memrl.core.errors import ConfigError
from memrl.core.records import EpisodeResult
from memrl.env.base import Env
from memrl_envs.lifelong import data as lifelong_data
from memrl_envs.lifelong_os import rootfs
from memrl_envs.lifelong_os.data import LITERAL_FIELDS, check_row, task_from_row
from memrl_envs.lifelong_os.episode import SHARED, Actor, EpisodeOutcome, GoldPolicy, LLMPolicy, OsTask, play
from memrl_envs.lifelong_os.prompts import memory_trajectory
from memrl_envs.lifelong_os.rootfs import RootfsError, ensure_rootfs
from memrl_envs.lifelong_os.settings import LifelongOsSettings
from memrl_envs.lifelong_os.shell import OverlayShell, Shell, ShellError
from memrl_envs.lifelong_os.shell_facts import overlay_facts
from memrl_envs.sandbox import SandboxFitError

log = logging.getLogger(__name__)


class LifelongOsEnv(lifelong_data.TaskListing, Env):
    """LifelongAgentBench OS tasks behind the Env seam.

    Settings (``LifelongOsSettings``, the `env=lifelong_os` group): data_path (the
    benchmark's OS JSON keyed by sample index, or ``hf://<repo>/<config>``), val_path (the
    validation tasks added to them: ``auto`` = os_interaction_val.json beside it, or the hub's
    validation split), task_order (numeric | string), split (all |
    train | validation, from the split file), max_steps (turns: commands, unreadable replies
    and finish), memory_format (memrl | official, memory_context),
    rootfs_dir / build_rootfs (the cached root file system, `os_rootfs`; built
    on first use only when build_rootfs), scratch_dir / upper_size_mb / pids_max / memory_mb /
    workdir (the episode's sandbox, `OverlayShell`: its disk (tmpfs), process and memory caps),
    max_parallel (episode sandboxes at once; null: as many as fit the machine at the caps, a
    larger number is lowered to that at start and `sandbox_facts()` says why),
    command_timeout_s (per command, set-up and check
    included), observation_max_chars (output shown to the agent per command).
    Agents: "react" (an LLM) or "gold" (runs the ground-truth script; no LLM).
    `shell_factory`: for tests and other backends, ``f(rootfs_path) -> Shell``.
    """

    name = "lifelong_os"
    Settings = LifelongOsSettings
    POLICIES = {"react": LLMPolicy, "gold": GoldPolicy}
    TASK_PREFIX, LABEL, LITERAL_FIELDS = "os", "Lifelong-OS", LITERAL_FIELDS
    check_row = staticmethod(check_row)
    make_task = staticmethod(task_from_row)

    def __init__(self, settings: LifelongOsSettings, *, agent: str,
                 shell_factory: Callable[[Path], Shell] | None = None) -> None:
        super().__init__(settings, agent=agent)
        self.shell_factory = shell_factory or self._overlay_shell
        self.skipped: list[lifelong_data.Skipped] = []
        self.fingerprint: str | None = None
        self._tasks: dict[str, OsTask] | None = None
        self._rootfs: Path | None = None
        self._lock = threading.Lock()
        self._facts: dict | None = None
        self._slots: threading.BoundedSemaphore | None = None

    # -- tasks -------------------------------------------------------------------------
    # -- the system --------------------------------------------------------------------
    def rootfs(self) -> Path:
        """The cached root file system (built here when ``build_rootfs`` and missing)."""
        with self._lock:
            if self._rootfs is None:
                try:
                    self._rootfs = ensure_rootfs(self.s.rootfs_dir)
                except RootfsError:
                    if not self.s.build_rootfs:
                        raise
                    self._rootfs = rootfs.build_rootfs(self.s.rootfs_dir, log=log.info)
            return self._rootfs

    def _overlay_shell(self, rootfs: Path) -> Shell:
        s = self.s
        return OverlayShell(rootfs, scratch_dir=s.scratch_dir, upper_size_mb=s.upper_size_mb,
                            workdir=s.workdir, pids_max=s.pids_max, memory_mb=s.memory_mb,
                            output_bytes=max(4 * s.observation_max_chars, 4096))

    def sandbox_facts(self) -> dict:
        """The episodes' sandbox: mode, caps (enforced and missing), parallelism (for the run
        card; made once, at start, where the run is refused if not one episode fits)."""
        with self._lock:
            if self._facts is None:
                if self.shell_factory != self._overlay_shell:
                    self._facts = {"mode": "a stand-in shell (shell_factory)"}
                else:
                    try:
                        self._facts = overlay_facts(upper_size_mb=self.s.upper_size_mb, pids_max=self.s.pids_max,
                                                    memory_mb=self.s.memory_mb, max_parallel=self.s.max_parallel,
                                                    scratch_dir=self.s.scratch_dir,
                                                    command_timeout_s=self.s.command_timeout_s,
                                                    rootfs=self._rootfs or rootfs.rootfs_path(self.s.rootfs_dir))
                    except SandboxFitError as exc:
                        raise ConfigError(f"env.max_parallel / sandbox caps: {exc}") from exc
                    self._slots = threading.BoundedSemaphore(self._facts["parallel"]["granted"])
            return self._facts

    # -- episodes ----------------------------------------------------------------------
    def run_episode(self, os_task: OsTask, policy: Actor, injected: int = 0) -> EpisodeResult:
        s = self.s
        info: dict = {"agent": self.agent, "skills": list(os_task.skills), "memories_injected": injected}
        self.note_task_file(info, os_task.key)
        errors: list[str] = []
        outcome = None
        shell: Shell | None = None
        self.sandbox_facts()
        with self._slots or contextlib.nullcontext():  # at most the episodes that fit at once
            try:
                shell = self.shell_factory(self.rootfs())
                outcome = play(shell, os_task, policy, s.max_steps, s.command_timeout_s,
                               s.observation_max_chars)
            except (RootfsError, ShellError) as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
            except Exception as exc:  # a failure of the env ends this episode, not the run
                log.exception("Lifelong-OS episode %s failed", os_task.key)
                errors.append(f"{type(exc).__name__}: {exc}")
            finally:
                if shell is not None:
                    try:
                        shell.close()
                    except Exception as exc:  # the verdict stands; the error is kept
                        errors.append(f"closing the episode's system failed: {type(exc).__name__}: {exc}")
                        info["cleanup_error"] = True
        if outcome is None:
            return lifelong_data.env_error_result(errors, info)
        info.update(finished=outcome.finished, invalid_actions=outcome.invalid_actions,
                    timeouts=outcome.timeouts, init_exit=outcome.init_exit, eval_exit=outcome.eval_exit,
                    eval_output=outcome.eval_output, seconds=round(outcome.seconds, 3),
                    truncated=not outcome.finished and len(outcome.steps) >= s.max_steps)
        return EpisodeResult(success=outcome.success, reward=1.0 if outcome.success else 0.0,
                             steps=len(outcome.steps), transcript=outcome.steps,
                             errors=outcome.errors + errors, info=info,
                             outcome=SHARED[outcome.outcome], outcome_detail=outcome.outcome,
                             memory_trajectory=self._memory_trajectory(os_task, outcome))

    def _memory_trajectory(self, os_task: OsTask, outcome: EpisodeOutcome) -> str:
        """The chat history of the episode (os_prompts.memory_trajectory); "" when the set-up
        failed before the agent got the task (the official history is empty then too)."""
        if not outcome.agent_started:
            return ""
        return memory_trajectory(os_task.instruction, outcome.steps, self.s.command_timeout_s,
                                 self.s.with_example, agent_failed=outcome.agent_failed)

    def close(self) -> None:
        """Nothing stays open between episodes (each one's system is gone when it ends)."""
