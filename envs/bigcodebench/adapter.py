"""The BigCodeBench env adapter: one task = one function to write; one attempt per episode,
judged by the task's unit tests in a sandbox (see executor.py, outcome.py)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

from memrl.llm.base import LLMError
from memrl.records import EpisodeResult, RetrievedMemory, Step, Task
from memrl_envs.sandbox import SandboxError

from . import loader
from .executor import Executor, imported_modules, required_modules
from .extract import extract_code
from .outcome import Outcome, classify
from .prompts import build_prompt, completion_prefix, task_intent

if TYPE_CHECKING:
    from memrl.llm.client import EpisodeLLM

AGENTS = ("react", "canonical")
SPLITS = ("instruct", "complete")
SUBSETS = ("full", "hard")
PARTS = ("train", "validation", "all")
INTENTS = ("task", "prompt")  # what retrieval embeds: the task description | the whole prompt
_OBS_CHARS = 1200


class BigCodeBenchEnv:
    """BigCodeBench (v0.1.4; full or hard) behind the project's Env seam.

    Args:
        data_path: a local JSONL in the hub's schema; None loads the hub dataset via `datasets`.
        version: the hub split (dataset version), "v0.1.4".
        split: "instruct" (natural-language task) or "complete" (function header + docstring).
        subset: "full" (1,140 tasks) or "hard" (148).
        part: "train" | "validation" (the seeded 7:3 division, kept in a split file) | "all".
        split_seed, train_ratio, split_file: the division; the file is read when it exists and
            written otherwise (default: under cache_dir, named by subset, task ids and seed).
        max_tasks, task_ids: keep these tasks / the first N (numeric task order).
        agent: "react" (an LLM writes the code) or "canonical" (the task's own solution goes
            through the same extraction and checker: a check of the executor and the libraries).
        max_tokens: tokens of the code reply.
        time_limit_s, memory_mb, nproc: the checker's per-task time limit (the benchmark's
            240 s) and the sandbox's address-space and process limits.
        calibrated: put the code prompt (imports + header) in front of the solution, as
            bigcodebench's calibrated evaluation does.
        intent: what retrieval embeds and memories are keyed by: "task" (the description,
            without the code header) or "prompt" (the split's whole prompt, as the official
            MemRL code does).
        max_parallel: sandboxes at once across threads (default: CPU count).
        max_steps: accepted for the shared debug presets; an episode is one attempt.
    """

    name = "bigcodebench"

    def __init__(self, data_path: str | os.PathLike[str] | None = None, version: str = "v0.1.4",
                 split: str = "instruct", subset: str = "hard", part: str = "train",
                 split_seed: int = 42, train_ratio: float = 0.7,
                 split_file: str | os.PathLike[str] | None = None, max_tasks: int | None = None,
                 task_ids: Iterable[str] | None = None, max_steps: int = 1, max_tokens: int = 1280,
                 time_limit_s: float = 240.0, memory_mb: int = 4096, nproc: int = 256,
                 calibrated: bool = True, max_parallel: int | None = None, intent: str = "task",
                 cache_dir: str | os.PathLike[str] | None = None, agent: str = "react",
                 executor: Executor | None = None) -> None:
        for value, allowed, what in ((agent, AGENTS, "agent"), (split, SPLITS, "split"),
                                     (subset, SUBSETS, "subset"), (part, PARTS, "part")):
            if value not in allowed:
                raise ValueError(f"unknown BigCodeBench {what} {value!r}; expected one of {allowed}")
        if intent not in INTENTS:
            raise ValueError(f"unknown BigCodeBench intent {intent!r}; expected one of {INTENTS}")
        self.intent = intent
        if max_tasks is not None and max_tasks < 1:
            raise ValueError("max_tasks must be >= 1")
        if not 0.0 < train_ratio < 1.0:
            raise ValueError("train_ratio must be in (0, 1)")
        self.data_path = str(Path(data_path).expanduser()) if data_path is not None else None
        self.version, self.split, self.subset, self.part = version, split, subset, part
        self.split_seed, self.train_ratio = int(split_seed), float(train_ratio)
        self.split_file = Path(split_file).expanduser() if split_file is not None else None
        self.max_tasks = max_tasks
        self.task_ids = list(task_ids) if task_ids is not None else None
        self.agent = agent
        self.max_tokens = int(max_tokens)
        self.calibrated = calibrated
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else None
        self.executor = executor or Executor(time_limit_s=time_limit_s, memory_mb=memory_mb,
                                             nproc=nproc, cache_dir=self.cache_dir,
                                             max_parallel=max_parallel)
        # how many episodes may usefully run at once (one sandbox each); a runner without an
        # LLM to size its thread pool by can read it
        self.parallel_episodes = max_parallel or os.cpu_count() or 1
        self.skipped_rows: list[str] = []
        self.split_path: Path | None = None
        self._problems: dict[str, loader.BCBProblem] = {}
        self._tasks: list[Task] | None = None
        self._lock = threading.Lock()

    # -- tasks -----------------------------------------------------------------------
    def tasks(self) -> list[Task]:
        with self._lock:
            if self._tasks is None:
                self._tasks = self._list_tasks()
            return list(self._tasks)

    def _list_tasks(self) -> list[Task]:
        report = loader.load_problems(self.data_path, self.subset, self.version)
        self.skipped_rows = list(report.skipped)
        problems = {p.task_id: p for p in report.problems}
        ids = sorted(problems, key=loader.task_sort_key)
        if self.part != "all":
            self.split_path = self.split_file or loader.default_split_path(
                self._cache_base(), self.subset, ids, self.split_seed, self.train_ratio)
            division = loader.load_or_create_division(self.split_path, ids, self.split_seed,
                                                      self.train_ratio)
            keep = division.part(self.part)
            ids = [t for t in ids if t in keep]
        if self.task_ids is not None:
            missing = [t for t in self.task_ids if t not in ids]
            if missing:
                raise ValueError(f"unknown task ids for BigCodeBench part {self.part!r} "
                                 f"({report.source}): {missing[:5]}")
            wanted = set(self.task_ids)
            ids = [t for t in ids if t in wanted]
        if self.max_tasks is not None:
            ids = ids[:self.max_tasks]
        if not ids:
            raise ValueError(f"no BigCodeBench tasks left in part {self.part!r} of {report.source}")
        self._problems = {t: problems[t] for t in ids}
        return [self._task(problems[t]) for t in ids]

    def _task(self, p: loader.BCBProblem) -> Task:
        return Task(task_id=p.task_id, intent=task_intent(p, self.split, self.intent == "prompt"),
                    payload={"split": self.split, "subset": self.subset, "part": self.part,
                             "entry_point": p.entry_point, "libs": list(p.libs),
                             "content_hash": p.content_hash})

    def _cache_base(self) -> Path:
        if self.cache_dir is not None:
            return self.cache_dir
        from memrl.llm.cache import default_cache_dir

        return Path(default_cache_dir())

    def problem(self, task_id: str) -> loader.BCBProblem:
        if not self._problems:
            self.tasks()
        try:
            return self._problems[task_id]
        except KeyError:
            raise ValueError(f"task {task_id!r} is not one of this env's tasks") from None

    # -- episodes --------------------------------------------------------------------
    def solve(self, task: Task, memories: Sequence[RetrievedMemory], llm: "EpisodeLLM | None",
              seed: int) -> EpisodeResult:
        problem = self.problem(task.task_id)
        info = {"agent": self.agent, "split": self.split, "subset": self.subset,
                "libs": list(problem.libs),
                "memories_injected": 0 if self.agent == "canonical" else len(memories)}
        if self.agent == "canonical":
            reply = problem.complete_prompt + "\n" + problem.canonical_solution
        else:
            if llm is None:
                raise ValueError("the BigCodeBench react agent needs an LLM")
            prompt = build_prompt(problem, self.split, memories)
            try:
                reply = llm.complete(prompt, purpose="code", max_tokens=self.max_tokens)
            except LLMError as exc:
                info.update(outcome="llm_error", reason=str(exc)[:300])
                return EpisodeResult(success=False, reward=0.0, steps=0, errors=[f"LLMError: {exc}"],
                                     info=info)
        extracted = extract_code(reply, problem.entry_point, completion_prefix(problem, self.split))
        info["code_source"] = extracted.source
        info["reply_chars"] = len(reply or "")
        errors: list[str] = []
        if not extracted.ok:
            outcome = Outcome("syntax_error", extracted.syntax_error or "no code")
        else:
            outcome = self._run(problem, extracted.code, info)
        if outcome.kind == "env_error":
            errors.append(f"env_error: {outcome.reason}")
        info.update(outcome=outcome.kind, reason=outcome.reason, failed_tests=outcome.failed_tests[:20],
                    missing_libs=outcome.missing)
        action = extracted.code if extracted.code else (reply or "").strip()
        observation = f"Outcome: {outcome.kind} - {outcome.reason}"[:_OBS_CHARS]
        return EpisodeResult(success=outcome.success, reward=1.0 if outcome.success else 0.0, steps=1,
                             transcript=[Step(action=action, observation=observation)],
                             errors=errors, info=info)

    def program(self, problem: loader.BCBProblem, code: str) -> str:
        """What is executed: with calibration, the code prompt and a `pass` body first (so the
        imports the task header names exist), as bigcodebench's calibrated evaluation does."""
        if not self.calibrated:
            return code
        return problem.code_prompt + "\n    pass\n" + code

    def _run(self, problem: loader.BCBProblem, code: str, info: dict) -> Outcome:
        modules = required_modules(problem.libs, problem.test)
        try:
            check = self.executor.check(self.program(problem, code), problem.test,
                                        problem.entry_point, modules)
        except SandboxError as exc:
            return Outcome("env_error", f"no sandbox: {exc}"[:300])
        info["exec_s"] = check.wall_s
        return classify(check, self.executor.time_limit_s, imported_modules(code))

    def close(self) -> None:
        """Nothing persistent to release (each check's sandbox is gone when it returns)."""
