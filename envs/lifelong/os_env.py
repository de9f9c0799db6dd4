"""The Lifelong-OS env: LifelongAgentBench's Linux tasks, each episode in its own throwaway
root file system (see os_shell); an LLM agent ("react") or the ground-truth oracle ("gold")."""

from __future__ import annotations

import contextlib
import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from memrl.config import ConfigError
from memrl.records import EpisodeResult, RetrievedMemory, Task
from memrl_envs.sandbox import SandboxFitError

from . import loader
from .os_data import LITERAL_FIELDS, check_row, task_from_row
from .os_episode import ENV_ERROR, GoldPolicy, LLMPolicy, OsTask, Policy, play
from . import os_rootfs
from .os_rootfs import RootfsError, ensure_rootfs
from .os_settings import LifelongOsSettings
from .os_shell import OverlayShell, Shell, ShellError, overlay_facts

if TYPE_CHECKING:
    from memrl.llm.client import EpisodeLLM

log = logging.getLogger(__name__)

AGENTS = ("react", "gold")
TASK_PREFIX = "os"


class LifelongOsEnv(loader.TaskListing):
    """LifelongAgentBench OS tasks behind the Env seam.

    Args (the `env=lifelong_os` settings, see ``LifelongOsSettings``):
        data_path: the benchmark's OS JSON (keyed by sample index) or ``hf://<repo>/<config>``.
        split: all | train | validation (train/validation from the split file).
        agent: "react" (an LLM) or "gold" (runs the ground-truth script; no LLM).
        max_steps: turns per episode (commands, unreadable replies and finish).
        rootfs_dir: cache folder of the root file system (`os_rootfs`); ``build_rootfs``
            builds it on first use when missing (otherwise a missing one is an error).
        scratch_dir, upper_size_mb, pids_max, memory_mb, workdir: the episode's sandbox
            (`OverlayShell`): its disk (tmpfs), process and memory caps.
        max_parallel: episode sandboxes at once (None: as many as fit the machine at the caps;
            a larger number is lowered to that at start, and `sandbox_facts()` says why).
        command_timeout_s: per command, set-up and check included (20 s as the benchmark).
        observation_max_chars: output shown to the agent per command.
        shell_factory: for tests and other backends: ``f(rootfs_path) -> Shell``.
    """

    name = "lifelong_os"
    Settings = LifelongOsSettings  # the schema `memrl.config.validate` checks env=lifelong_os with
    TASK_PREFIX, LABEL, LITERAL_FIELDS = TASK_PREFIX, "Lifelong-OS", LITERAL_FIELDS
    check_row = staticmethod(check_row)
    make_task = staticmethod(task_from_row)

    def __init__(
        self,
        data_path: str,
        agent: str = "react",
        hub_split: str = "train",
        split: str = "all",
        split_file: str | None = None,
        val_fraction: float = 0.3,
        split_seed: int = 0,
        max_steps: int = 15,
        max_tasks: int | None = None,
        task_ids: Iterable[str] | None = None,
        rootfs_dir: str | None = None,
        build_rootfs: bool = False,
        scratch_dir: str | None = None,
        upper_size_mb: int = 1024,
        pids_max: int = 1024,
        memory_mb: int | None = 2048,
        max_parallel: int | None = None,
        workdir: str = "/",
        command_timeout_s: float = 20.0,
        observation_max_chars: int = 2000,
        with_example: bool = True,
        max_tokens: int = 256,
        cache_dir: str | None = None,
        shell_factory: Callable[[Path], Shell] | None = None,
    ) -> None:
        if agent not in AGENTS:
            raise ValueError(f"unknown Lifelong-OS agent {agent!r}; expected one of {AGENTS}")
        if max_steps < 1:
            raise ValueError("max_steps must be >= 1")
        if command_timeout_s <= 0:
            raise ValueError("command_timeout_s must be > 0")
        self.data_path = str(data_path)
        self.agent = agent
        self.hub_split = hub_split
        self.split, self.split_file = split, split_file
        self.val_fraction, self.split_seed = val_fraction, split_seed
        self.max_steps = int(max_steps)
        self.max_tasks = max_tasks
        self.task_ids = list(task_ids) if task_ids is not None else None
        self.rootfs_dir = rootfs_dir
        self.build_rootfs = build_rootfs
        self.scratch_dir = scratch_dir
        self.upper_size_mb, self.pids_max, self.workdir = upper_size_mb, pids_max, workdir
        self.memory_mb, self.max_parallel = memory_mb, max_parallel
        self.command_timeout_s = float(command_timeout_s)
        self.observation_max_chars = observation_max_chars
        self.with_example = with_example
        self.max_tokens = max_tokens
        self.cache_dir = cache_dir
        self.shell_factory = shell_factory or self._overlay_shell
        self.skipped: list[loader.Skipped] = []
        self.fingerprint: str | None = None
        self._tasks: dict[str, OsTask] | None = None
        self._rootfs: Path | None = None
        self._lock = threading.Lock()
        self._facts: dict | None = None
        self._slots: threading.BoundedSemaphore | None = None

    # -- tasks -------------------------------------------------------------------------
    def tasks(self) -> list[Task]:
        return [Task(task_id=loader.make_task_id(TASK_PREFIX, key), intent=t.instruction,
                     payload={"key": key, "skills": list(t.skills)})
                for key, t in self._load().items()]

    # -- the system --------------------------------------------------------------------
    def rootfs(self) -> Path:
        """The cached root file system (built here when ``build_rootfs`` and missing)."""
        with self._lock:
            if self._rootfs is None:
                try:
                    self._rootfs = ensure_rootfs(self.rootfs_dir)
                except RootfsError:
                    if not self.build_rootfs:
                        raise
                    self._rootfs = os_rootfs.build_rootfs(self.rootfs_dir, log=log.info)
            return self._rootfs

    def _overlay_shell(self, rootfs: Path) -> Shell:
        return OverlayShell(rootfs, scratch_dir=self.scratch_dir, upper_size_mb=self.upper_size_mb,
                            workdir=self.workdir, pids_max=self.pids_max, memory_mb=self.memory_mb,
                            output_bytes=max(4 * self.observation_max_chars, 4096))

    def sandbox_facts(self) -> dict:
        """The episodes' sandbox: mode, caps (enforced and missing), parallelism (for the run
        card; made once, at start, where the run is refused if not one episode fits)."""
        with self._lock:
            if self._facts is None:
                if self.shell_factory != self._overlay_shell:
                    self._facts = {"mode": "a stand-in shell (shell_factory)"}
                else:
                    try:
                        self._facts = overlay_facts(upper_size_mb=self.upper_size_mb, pids_max=self.pids_max,
                                                    memory_mb=self.memory_mb, max_parallel=self.max_parallel,
                                                    scratch_dir=self.scratch_dir,
                                                    command_timeout_s=self.command_timeout_s)
                    except SandboxFitError as exc:
                        raise ConfigError(f"env.max_parallel / sandbox caps: {exc}") from exc
                    self._slots = threading.BoundedSemaphore(self._facts["parallel"]["granted"])
            return self._facts

    # -- episodes ----------------------------------------------------------------------
    def solve(self, task: Task, memories: Sequence[RetrievedMemory], llm: "EpisodeLLM | None",
              seed: int) -> EpisodeResult:
        os_task = self.task(task.task_id)
        policy: Policy
        if self.agent == "gold":
            policy = GoldPolicy()
        else:
            if llm is None:
                raise ValueError("the Lifelong-OS react agent needs an LLM")
            policy = LLMPolicy(llm, memories, self.max_tokens, self.command_timeout_s, self.with_example)
        return self.run_episode(os_task, policy, injected=0 if self.agent == "gold" else len(memories))

    def run_episode(self, os_task: OsTask, policy: Policy, injected: int = 0) -> EpisodeResult:
        info: dict = {"agent": self.agent, "skills": list(os_task.skills), "memories_injected": injected}
        errors: list[str] = []
        outcome = None
        shell: Shell | None = None
        self.sandbox_facts()
        with self._slots or contextlib.nullcontext():  # at most the episodes that fit at once
            try:
                shell = self.shell_factory(self.rootfs())
                outcome = play(shell, os_task, policy, self.max_steps, self.command_timeout_s,
                               self.observation_max_chars)
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
            info["outcome"] = ENV_ERROR
            return EpisodeResult(success=False, reward=0.0, steps=0, errors=errors, info=info)
        info.update(outcome=outcome.outcome, finished=outcome.finished, invalid_actions=outcome.invalid_actions,
                    timeouts=outcome.timeouts, init_exit=outcome.init_exit, eval_exit=outcome.eval_exit,
                    eval_output=outcome.eval_output, seconds=round(outcome.seconds, 3),
                    truncated=not outcome.finished and len(outcome.steps) >= self.max_steps)
        return EpisodeResult(success=outcome.success, reward=1.0 if outcome.success else 0.0,
                             steps=len(outcome.steps), transcript=outcome.steps,
                             errors=outcome.errors + errors, info=info)

    def close(self) -> None:
        """Nothing stays open between episodes (each one's system is gone when it ends)."""
