"""The env seam: what the runner and the builder use of a benchmark adapter.

An env is built from its validated settings, whole, and the name of an agent:
``EnvClass(settings, agent="react")``. The class declares

- ``Settings``: the pydantic schema of its config group (an ``EnvSettings``), whose
  ``EVAL_SPLIT_FIELD`` names the field a transfer run's ``runner.eval_split`` replaces;
- ``POLICIES``: its agents by name, each a ``Policy`` class (``react``, the LLM agent, and
  the env's oracle: ALFWorld ``expert``, BigCodeBench ``canonical``, HLE / Lifelong ``gold``).
  Config validation refuses an agent the env does not list, and whether a run needs a model
  follows from the chosen policy's ``needs_llm``;

and an instance offers ``parallel_episodes`` (how many episodes may usefully run at once when
there is no model to size the pool by), ``tasks()``, ``solve(...)`` and ``close()``; and, for
the run card and the run's guards, ``sandbox_facts()`` (what confines its episodes),
``data_skipped()`` (task data left out while listing, each with its reason) and
``model_clients()`` (model clients the env keeps of its own, e.g. a judge: the run preflights
them, counts their spend and stops on their fatal errors) and ``model_probes(task, llm)``
(one call of each kind its agent and judge make, as they make it: the preflight sends them).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field, model_validator

from memrl.core.records import EpisodeResult, RetrievedMemory, Task
from memrl.llm.base import ModelProbe

if TYPE_CHECKING:
    from memrl.llm.client import EpisodeLLM, LLMClient


class RetrievalDefaults(BaseModel):
    """The retrieval settings that go with a benchmark (paper v2, Table 8): the similarity
    gate δ and the pool sizes k1 / k2 (the baselines' top-k is k2). Memory configs read them
    from ``env.retrieval``; the env itself does not."""

    model_config = ConfigDict(extra="forbid")
    delta: float | Literal["auto"] = Field(description="similarity gate δ, or 'auto'")
    k1: int = Field(ge=1, description="Phase-A candidate pool size")
    k2: int = Field(ge=1, description="memories injected (the baselines' top-k)")


class EnvSettings(BaseModel):
    """Fields every env's settings have: the task selection the debug presets and the
    transfer protocol set, and the benchmark's retrieval defaults."""

    model_config = ConfigDict(extra="forbid")
    EVAL_SPLIT_FIELD: ClassVar[str] = "split"  # what `runner.eval_split` replaces

    name: str  # the benchmark's name (names the run directory)
    # the benchmark's δ / k1 / k2 (paper v2, Table 8), read by the memory configs
    retrieval: RetrievalDefaults | None = None
    max_tasks: int | None = Field(None, ge=1, description="the first N tasks; null = all")
    task_ids: list[str] | None = None  # only these tasks (ids of the split); null = all
    max_steps: int = Field(1, ge=1, description="turns per episode")

    @model_validator(mode="after")
    def _check_task_ids(self) -> "EnvSettings":
        if self.task_ids is not None and not self.task_ids:
            raise ValueError("task_ids: an empty list selects no task (use null for all)")
        return self


class Policy:
    """One agent of an env, made for one episode from the env's settings, the episode's
    model and the memories retrieved for it. Each env's policies add the method its episode
    loop calls (e.g. ``next_action``); what they share is what the runner and the config
    check need to know about them."""

    needs_llm: ClassVar[bool] = True       # acts through the episode's model
    reads_memories: ClassVar[bool] = True  # the retrieved memories reach its prompt

    def __init__(self, settings: Any, llm: "EpisodeLLM | None",
                 memories: Sequence[RetrievedMemory]) -> None:
        self.s = settings
        self.llm = llm
        self.memories = list(memories) if self.reads_memories else []


class Env(ABC):
    name: ClassVar[str]
    Settings: ClassVar[type[EnvSettings]]
    POLICIES: ClassVar[Mapping[str, type[Policy]]]
    parallel_episodes: int = 1

    def __init__(self, settings: EnvSettings, *, agent: str) -> None:
        if not isinstance(settings, self.Settings):
            raise TypeError(f"{type(self).__name__} takes a {self.Settings.__name__} "
                            f"(got {type(settings).__name__})")
        self.s = settings
        self.agent = agent
        self.policy_cls = self.policy(agent)
        self._task_list: list[Task] | None = None
        self._task_list_lock = threading.Lock()

    @classmethod
    def policy(cls, agent: str) -> type[Policy]:
        """The policy class of `agent`; ValueError naming the env's agents otherwise."""
        try:
            return cls.POLICIES[agent]
        except KeyError:
            raise ValueError(f"env {cls.name!r} has no agent {agent!r} "
                             f"(its agents: {', '.join(sorted(cls.POLICIES))})") from None

    def new_policy(self, llm: "EpisodeLLM | None", memories: Sequence[RetrievedMemory]) -> Policy:
        """The configured agent for one episode."""
        if self.policy_cls.needs_llm and llm is None:
            raise ValueError(f"the {self.name} agent {self.agent!r} needs an LLM")
        return self.policy_cls(self.s, llm, memories)

    @classmethod
    def replay_prompts(cls, settings: EnvSettings, episode: Mapping[str, Any], memory: RetrievedMemory,
                       llm: Any = None) -> list[str]:
        """The prompts a model sees, one per step, when it follows `episode` (a record of this
        env's, e.g. a teacher's) step by step with `memory` injected: the demo's check of the
        embedded model's prefix reuse on real prompts (memrl.demo.bench). An env that has no
        step-by-step episodes does not offer it."""
        raise NotImplementedError(f"env {cls.name!r} does not replay episodes as prompts")

    def tasks(self) -> list[Task]:
        """The tasks of the configured split, in a stable order, identical every epoch
        (listed once, on first use; thread-safe)."""
        with self._task_list_lock:
            if self._task_list is None:
                self._task_list = self._list_tasks()
            return list(self._task_list)

    @abstractmethod
    def _list_tasks(self) -> list[Task]:
        """Read and select the configured tasks (called once)."""

    @abstractmethod
    def solve(self, task: Task, memories: Sequence[RetrievedMemory], llm: "EpisodeLLM | None",
              seed: int) -> EpisodeResult:
        """Play one episode. Benchmark-specific prompting lives here, not in memory modules.

        `llm` is None when neither the agent nor the memory module needs a model. Errors
        inside the episode are returned in `EpisodeResult.errors` (and its `outcome`), not
        raised.
        """

    def sandbox_facts(self) -> dict[str, Any]:
        """What confines this env's episodes (mode, caps enforced and missing, parallelism),
        recorded in each run-card session; default: nothing runs in a sandbox."""
        return {}

    def data_skipped(self) -> list[dict[str, str]]:
        """Task data left out when the tasks were listed (a damaged game folder, a malformed
        row), each as ``{"item": ..., "reason": ...}``; default none."""
        return []

    def model_clients(self) -> Mapping[str, "LLMClient"]:
        """Model clients of the env's own, by the config key that sets them up (e.g.
        ``{"env.judge": client}``); default none."""
        return {}

    def model_probes(self, task: Task, llm: "EpisodeLLM") -> list[ModelProbe]:
        """The calls an episode of `task` makes, one per purpose, with their real prompt shape,
        budget and stop sequences (memrl.control.preflight sends them before the first batch; `llm`
        says what the model takes, e.g. `honors_stop`). Default none: the preflight then asks
        each model a one-word question at its default budget."""
        return []

    def close(self) -> None:
        """Release what the env holds between episodes (servers, caches); default nothing."""
        return None
