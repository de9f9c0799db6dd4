"""The BigCodeBench env adapter: one task = one function to write; one attempt per episode,
judged by the task's unit tests in a sandbox (see executor.py, outcome.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from memrl.core.errors import ConfigError
from memrl.core.records import EpisodeResult, RetrievedMemory, Step, Task
from memrl.env.base import Env, Policy
from memrl.llm.base import LLMError, ModelProbe
from memrl_envs.bigcodebench import data
from memrl_envs.bigcodebench.executor import Executor, imported_modules, required_modules
from memrl_envs.bigcodebench.extract import extract_code
from memrl_envs.bigcodebench.outcome import Outcome, classify
from memrl_envs.bigcodebench.prompts import build_prompt, completion_prefix, task_intent
from memrl_envs.bigcodebench.settings import BigCodeBenchSettings
from memrl_envs.sandbox import SandboxError, SandboxFitError

if TYPE_CHECKING:
    from memrl.llm.client import EpisodeLLM

_OBS_CHARS = 1200


def memory_trajectory(reply: str, prompt: str, code: str, status: str, error: str,
                      memories: Sequence[RetrievedMemory] = ()) -> str:
    """The episode as the official writer is handed it (memrl/run/bcb_runner.py
    `_trajectory_from_raw_or_fallback`): the model's raw reply, exactly; only when the reply
    is empty, a short account in four parts: the task prompt, the memories retrieved (when
    any), the code tested, the test result (status, and the error when there is one)."""
    if reply:
        return reply
    lines = ["[1] Task prompt", prompt]
    if memories:
        best = max(m.similarity for m in memories)
        lines += ["", "[2] Memories retrieved", f"count: {len(memories)}", f"best similarity: {best:.4f}",
                  f"ids: {[m.memory_id for m in memories]}"]
    lines += ["", "[3] Code tested", "```python", code, "```", "", "[4] Test result", f"status: {status}"]
    if error:
        lines += ["error:", error]
    return "\n".join(lines)


class CodePolicy(Policy):
    """A BigCodeBench agent: one reply holding the solution."""

    def reply(self, problem: data.BCBProblem) -> str:
        raise NotImplementedError


class ReactPolicy(CodePolicy):
    """An LLM writes the code (the env's prompt with the injected memories)."""

    def prompt(self, problem: data.BCBProblem) -> str:
        return build_prompt(problem, self.s.split, self.memories, memory_format=self.s.memory_format,
                            memory_chars=self.s.memory_chars, official_header_bug=self.s.official_header_bug)

    def reply(self, problem: data.BCBProblem) -> str:
        return self.llm.complete(self.prompt(problem), purpose="code", max_tokens=self.s.max_tokens,
                                 budget_key="env.max_tokens")


class CanonicalPolicy(CodePolicy):
    """The task's own solution, through the same extraction and checker as a model's code:
    a check of the executor and the installed libraries (no LLM)."""

    needs_llm = False
    reads_memories = False

    def reply(self, problem: data.BCBProblem) -> str:
        return problem.complete_prompt + "\n" + problem.canonical_solution


class BigCodeBenchEnv(Env):
    """BigCodeBench (v0.1.4; full or hard) behind the project's Env seam.

    Settings (``BigCodeBenchSettings``, the `env=bigcodebench` group): data_path (a local
    JSONL in the hub's schema; null loads the hub dataset via `datasets`), version (the hub
    split), split (instruct | complete), subset (full: 1,140 tasks | hard: 148), part (train |
    validation, the seeded 7:3 division kept in a split file, | all; a transfer run's
    eval_split replaces `part`), split_seed / train_ratio / split_file, max_tasks / task_ids
    (numeric task order), max_tokens (of the code reply), time_limit_s / memory_mb / nproc
    (the checker's per-task limit, each process's address space, the pids cgroup),
    sandbox_memory_mb / disk_mb / tmp_mb (caps on one whole sandbox: its memory cgroup with its
    tmpfs folders, its work folder, each of /tmp and /dev/shm), calibrated (the code prompt in front of
    the solution, as bigcodebench's calibrated evaluation), max_parallel (sandboxes at once;
    default the CPU count; lowered at start to what fits the machine at the caps, see
    `sandbox_facts()`), intent (what retrieval embeds and memories are keyed by: task, the
    description without the code header, | prompt, the split's whole prompt, as the official
    MemRL code does), memory_format / memory_chars / official_header_bug (how memories are
    shown: memrl's shared block | the official runner's typed entries, cut to an even share of
    memory_chars; prompts.py), cache_dir.
    Every result carries `memory_trajectory` (what the official writer is handed: the raw
    reply, or for an empty one an account of the episode: the function `memory_trajectory`).
    Agents: "react" (an LLM writes the code) or "canonical" (the task's own solution).
    `executor`: another checker (tests).
    """

    name = "bigcodebench"
    Settings = BigCodeBenchSettings
    POLICIES = {"react": ReactPolicy, "canonical": CanonicalPolicy}

    def __init__(self, settings: BigCodeBenchSettings, *, agent: str,
                 executor: Executor | None = None) -> None:
        super().__init__(settings, agent=agent)
        self.cache_dir = Path(settings.cache_dir).expanduser() if settings.cache_dir is not None else None
        try:
            self.executor = executor or Executor(
                time_limit_s=settings.time_limit_s, memory_mb=settings.memory_mb, nproc=settings.nproc,
                cache_dir=self.cache_dir, max_parallel=settings.max_parallel,
                sandbox_memory_mb=settings.sandbox_memory_mb, disk_mb=settings.disk_mb,
                tmp_mb=settings.tmp_mb)
        except SandboxFitError as exc:
            raise ConfigError(f"env.max_parallel / sandbox caps: {exc}") from exc
        # how many episodes may usefully run at once (one sandbox each); a runner without an
        # LLM to size its thread pool by reads it
        self.parallel_episodes = (getattr(self.executor, "parallel", None) or settings.max_parallel
                                  or os.cpu_count() or 1)
        self.skipped_rows: list[str] = []
        self.split_path: Path | None = None
        self._problems: dict[str, data.BCBProblem] = {}

    def data_skipped(self) -> list[dict[str, str]]:
        out = []
        for line in self.skipped_rows:  # "<where>: <reason>"
            where, _, reason = line.partition(": ")
            out.append({"item": where, "reason": reason or line})
        return out

    # -- tasks -----------------------------------------------------------------------
    def _list_tasks(self) -> list[Task]:
        s = self.s
        data_path = str(Path(s.data_path).expanduser()) if s.data_path is not None else None
        report = data.load_problems(data_path, s.subset, s.version)
        self.skipped_rows = list(report.skipped)
        problems = {p.task_id: p for p in report.problems}
        ids = sorted(problems, key=data.task_sort_key)
        if s.part != "all":
            self.split_path = Path(s.split_file).expanduser() if s.split_file is not None else \
                data.default_split_path(self._cache_base(), s.subset, ids, s.split_seed, s.train_ratio)
            division = data.load_or_create_division(self.split_path, ids, s.split_seed, s.train_ratio)
            keep = division.part(s.part)
            ids = [t for t in ids if t in keep]
        if s.task_ids is not None:
            missing = [t for t in s.task_ids if t not in ids]
            if missing:
                raise ValueError(f"unknown task ids for BigCodeBench part {s.part!r} "
                                 f"({report.source}): {missing[:5]}")
            wanted = set(s.task_ids)
            ids = [t for t in ids if t in wanted]
        if s.max_tasks is not None:
            ids = ids[:s.max_tasks]
        if not ids:
            raise ValueError(f"no BigCodeBench tasks left in part {s.part!r} of {report.source}")
        self._problems = {t: problems[t] for t in ids}
        return [self._task(problems[t]) for t in ids]

    def _task(self, p: data.BCBProblem) -> Task:
        return Task(task_id=p.task_id, intent=task_intent(p, self.s.split, self.s.intent == "prompt"),
                    payload={"split": self.s.split, "subset": self.s.subset, "part": self.s.part,
                             "entry_point": p.entry_point, "libs": list(p.libs),
                             "content_hash": p.content_hash})

    def _cache_base(self) -> Path:
        if self.cache_dir is not None:
            return self.cache_dir
        from memrl.core.cachedir import default_cache_dir

        return Path(default_cache_dir())

    def problem(self, task_id: str) -> data.BCBProblem:
        if not self._problems:
            self.tasks()
        try:
            return self._problems[task_id]
        except KeyError:
            raise ValueError(f"task {task_id!r} is not one of this env's tasks") from None

    # -- episodes --------------------------------------------------------------------
    def model_probes(self, task: Task, llm: "EpisodeLLM") -> list[ModelProbe]:
        """The task's code call as the model agent makes it (memrl.control.preflight)."""
        if not self.policy_cls.needs_llm:
            return []
        policy = ReactPolicy(self.s, llm, [])
        return [ModelProbe(role="llm", purpose="code", prompt=policy.prompt(self.problem(task.task_id)),
                           answer_tokens=self.s.max_tokens, budget_key="env.max_tokens")]

    def solve(self, task: Task, memories: Sequence[RetrievedMemory], llm: "EpisodeLLM | None",
              seed: int) -> EpisodeResult:
        problem = self.problem(task.task_id)
        policy = self.new_policy(llm, memories)
        info = {"agent": self.agent, "split": self.s.split, "subset": self.s.subset,
                "libs": list(problem.libs), "memories_injected": len(policy.memories)}
        try:
            reply = policy.reply(problem)
        except LLMError as exc:
            info.update(reason=str(exc)[:300])
            trajectory = memory_trajectory("", self._task_prompt(problem), "", "llm_error", str(exc),
                                           policy.memories)
            return EpisodeResult(success=False, reward=0.0, steps=0, errors=[f"LLMError: {exc}"],
                                 info=info, outcome="llm_error", outcome_detail="llm_error",
                                 memory_trajectory=trajectory)
        extracted = extract_code(reply, problem.entry_point, completion_prefix(problem, self.s.split))
        info["code_source"] = extracted.source
        info["reply_chars"] = len(reply or "")
        errors: list[str] = []
        if not extracted.ok:
            outcome = Outcome("syntax_error", extracted.syntax_error or "no code")
        else:
            outcome = self._run(problem, extracted.code, info)
        if outcome.kind == "env_error":
            errors.append(f"env_error: {outcome.reason}")
        info.update(reason=outcome.reason, failed_tests=outcome.failed_tests[:20], missing_libs=outcome.missing)
        action = extracted.code if extracted.code else (reply or "").strip()
        observation = f"Outcome: {outcome.kind} - {outcome.reason}"[:_OBS_CHARS]
        trajectory = memory_trajectory(reply or "", self._task_prompt(problem), extracted.code, outcome.kind,
                                       "" if outcome.success else outcome.reason, policy.memories)
        return EpisodeResult(success=outcome.success, reward=1.0 if outcome.success else 0.0, steps=1,
                             transcript=[Step(action=action, observation=observation)],
                             errors=errors, info=info, outcome=outcome.shared, outcome_detail=outcome.kind,
                             memory_trajectory=trajectory)

    def _task_prompt(self, problem: data.BCBProblem) -> str:
        """The task's prompt as the official runner has it (get_prompt: the split's prompt)."""
        return problem.instruct_prompt if self.s.split == "instruct" else problem.complete_prompt

    def program(self, problem: data.BCBProblem, code: str) -> str:
        """What is executed: with calibration, the code prompt and a `pass` body first (so the
        imports the task header names exist), as bigcodebench's calibrated evaluation does."""
        if not self.s.calibrated:
            return code
        return problem.code_prompt + "\n    pass\n" + code

    def _run(self, problem: data.BCBProblem, code: str, info: dict) -> Outcome:
        modules = required_modules(problem.libs, problem.test)
        try:
            check = self.executor.check(self.program(problem, code), problem.test,
                                        problem.entry_point, modules)
        except SandboxError as exc:
            return Outcome("env_error", f"no sandbox: {exc}"[:300])
        info["exec_s"] = check.wall_s
        if check.tampered:
            # the verdict stands (it is the checker's exit status); the record says what was seen
            info["channel_tampered"] = check.tampered
        return classify(check, self.executor.time_limit_s, imported_modules(code))

    def sandbox_facts(self) -> dict:
        """The sandboxes' mode, caps (enforced and missing), parallelism: for the run card."""
        facts = getattr(self.executor, "facts", None)
        return facts() if facts is not None else {"mode": f"a stand-in executor ({type(self.executor).__name__})"}

    def close(self) -> None:
        """Nothing persistent to release (each check's sandbox is gone when it returns)."""
