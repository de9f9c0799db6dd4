"""ExpeL (Zhao et al., "ExpeL: LLM Agents Are Experiential Learners", arXiv 2308.10144, AAAI
2024; docs/methods.md): insights extracted from success/failure pairs and from groups of
successes, kept as a list edited by the model, recalled together with the most similar
successful trajectories.

Paper -> code (official code: LeapLabTHU/ExpeL @ its stored snapshot):
- Experience pool (§4.1): every episode's trajectory is stored with its outcome (the env's
  success, as ExpeL's training tasks have ground truth); one bank entry per episode, as RAG
  stores it (`trajectory_entry`, task / outcome / trajectory). Entries a `bank.init_from`
  copy brings (a teacher's trajectories) join the pool (`is_episode`).
- Insight extraction (§4.2; agent/expel.py `create_rules`): (a) success/failure pairs of one
  task are compared (`task_critique`, the "compare" prompt), (b) groups of successes of
  different tasks are examined together (`success_critique`, groups of
  `success_critique_num` = 8); each answer is a set of ADD / EDIT / UPVOTE / DOWNVOTE
  operations on the insight list (memrl_baselines/expel_insights.py; max_num_rules = 20,
  configs/agent/expel.yaml). Purposes `expel-compare` and `expel-success`, budget
  `memory.insight_max_tokens`.
- Task inference (§4.3; `insert_before_task_prompt`, `update_dynamic_prompt_components` with
  fewshot_strategy task_similarity): the insights are given with the k most similar
  successful trajectories (k = 2, configs/benchmark/alfworld.yaml num_fewshots), one per
  task (the shortest of a task's successes), ranked by the similarity of the task to theirs.
  The trajectories come first, the insights after them, as ExpeL puts its rules after the
  few-shot examples and before the task.

Online, not offline: ExpeL gathers experience on training tasks first (with Reflexion
retries, max_reflection_depth 3) and extracts insights once before evaluation. The harness
learns while it plays (docs/design.md §1), so extraction runs after every episode, in its
`digest` (the model work of one episode):
- a finished episode is paired with the newest stored episode of the same task with the
  other outcome, if there is one (one compare call: the newest pair, not every pair);
- a success completes a group when, with it, `success_group` (8) successes of distinct tasks
  are waiting that no success call has seen (one success call; the group's members are then
  marked `extra.critiqued`). In a batch of several episodes two groups may share members
  (each episode sees the bank of batch start); with batch size 1 they never do.
The operations of the episode's calls are applied in task order when the batch commits.
The insight list is one bank entry (`expel:insights`: the list in `extra.insights`, its text
from `render_insights`).

Not reproduced (docs/methods.md): the Reflexion retries of the gathering phase (the epochs
are the retries here; memory=reflection is that baseline), the other few-shot strategies
(thought / step similarity, rerankers), and the token-count truncation of few-shots (here
every trajectory is cut to `max_trajectory_chars`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from memrl.core.records import EpisodeResult, RetrievedMemory, Task
from memrl.llm.base import LLMError, ModelProbe
from memrl.memory.bank import BankSettings
from memrl.memory.base import BankedMemory, LearnItem, NewMemory
from memrl.memory.entry import BankUpdate, MemoryEntry
from memrl.memory.writer import SAMPLE_ATTEMPT
from memrl_baselines import expel_insights as ins
from memrl_baselines.rag import trajectory_entry

if TYPE_CHECKING:
    from memrl.llm.client import EpisodeLLM
    from memrl.llm.embed import Embedder

PURPOSE_COMPARE = "expel-compare"
PURPOSE_SUCCESS = "expel-success"
BUDGET_KEY = "memory.insight_max_tokens"
INSIGHTS_ID = "expel:insights"
INSIGHTS_INTENT = "insights learned from earlier tasks"
KIND_TRAJECTORY = "trajectory"
KIND_INSIGHTS = "insights"


def is_episode(entry: MemoryEntry) -> bool:
    """An entry of the experience pool: every entry but the insight list (its own episodes,
    and the entries a `bank.init_from` copy brought, such as a teacher's trajectories)."""
    return entry.kind != KIND_INSIGHTS


class ExpeLSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "expel"
    k: int = Field(2, ge=0, description="successful trajectories recalled (ALFWorld's num_fewshots, 2)")
    max_insights: int = Field(20, ge=1, description="the list counts as full from here (max_num_rules)")
    success_group: int = Field(8, ge=1, description="successes examined together (success_critique_num)")
    max_ops: int = Field(4, ge=1, description="operations the prompt allows per answer (the official 4)")
    insight_max_tokens: int = Field(200, ge=1, description="at most four one-sentence operations")
    max_trajectory_chars: int = Field(3000, ge=0, description="a stored trajectory's bound (as RAG's)")
    learn_from_errors: bool = False  # an episode whose model call failed teaches nothing
    bank: BankSettings = BankSettings()


class ExpeLMemory(BankedMemory):
    name = "expel"
    needs_llm = True  # the insight calls
    Settings = ExpeLSettings

    def __init__(self, settings: ExpeLSettings, *, bank_dir: str | Path, embedder: "Embedder"):
        super().__init__(settings, bank_dir=bank_dir, embedder=embedder)

    def prepare(self, tasks: list[Task], seed: int) -> dict[str, Any]:
        return {"k": self.s.k, "max_insights": self.s.max_insights, "success_group": self.s.success_group}

    # ------------------------------------------------------------------ state
    def insights_entry(self) -> MemoryEntry | None:
        return self.bank.get([INSIGHTS_ID]).get(INSIGHTS_ID)

    def insights(self) -> list[ins.Insight]:
        entry = self.insights_entry()
        return ins.insights_of(entry.extra.get("insights", [])) if entry else []

    def _full(self, shown: list[ins.Insight]) -> bool:
        return len(shown) >= self.s.max_insights

    # --------------------------------------------------------------- retrieve
    def successes_for(self, vec: np.ndarray, seed: int = 0) -> list[tuple[MemoryEntry, float]]:
        """The k most similar tasks with a success, each by its shortest successful trajectory
        (ties of similarity: the bank's tie rule, `memory.bank.ties`)."""
        if self.s.k == 0:
            return []
        want = max(4 * self.s.k, 8)
        while True:
            hits = self.bank.neighbours(vec, want, seed=seed)
            best: dict[str, tuple[MemoryEntry, float]] = {}
            for e, sim in hits:
                if not is_episode(e) or not e.success:
                    continue
                if e.task_id not in best or len(e.experience) < len(best[e.task_id][0].experience):
                    best[e.task_id] = (e, best.get(e.task_id, (e, sim))[1])
            if len(best) >= self.s.k or len(hits) < want:
                return list(best.values())[: self.s.k]  # in the order first seen: most similar first
            want *= 2

    def retrieve(self, task: Task, *, seed: int = 0) -> list[RetrievedMemory]:
        vec = np.asarray(self.embedder.embed([task.intent])[0], dtype=np.float32)
        out = [e.retrieved(sim, sim, success=True) for e, sim in self.successes_for(vec, seed)]
        entry = self.insights_entry()
        if entry is not None and entry.extra.get("insights"):
            out.append(entry.retrieved(0.0, 0.0, success=None))
        return out

    # ------------------------------------------------------------------ learn
    def model_probes(self, task: Task) -> list[Any]:
        shown = [ins.Insight(1, "Look around before acting.", 2)]
        return [ModelProbe(role="llm", purpose=PURPOSE_COMPARE, budget_key=BUDGET_KEY,
                           answer_tokens=self.s.insight_max_tokens,
                           prompt=ins.compare_prompt(task.intent, SAMPLE_ATTEMPT, SAMPLE_ATTEMPT, shown, False,
                                                     self.s.max_ops)),
                ModelProbe(role="llm", purpose=PURPOSE_SUCCESS, budget_key=BUDGET_KEY,
                           answer_tokens=self.s.insight_max_tokens,
                           prompt=ins.success_prompt([SAMPLE_ATTEMPT], shown, False, self.s.max_ops))]

    def _ask(self, llm: "EpisodeLLM", prompt: str, purpose: str) -> tuple[str, str | None]:
        try:
            reply = llm.complete(prompt, purpose=purpose, max_tokens=self.s.insight_max_tokens,
                                 budget_key=BUDGET_KEY)
        except LLMError as exc:
            return "", f"{purpose}: {exc}"
        return reply, None if reply.strip() else f"{purpose}: the model's answer was empty"

    @staticmethod
    def _opposite(episodes: list[MemoryEntry], task: Task, success: bool) -> MemoryEntry | None:
        """The newest stored episode of the task with the other outcome."""
        found = [e for e in episodes if e.task_id == task.task_id and e.success != success]
        return max(found, key=lambda e: e.order) if found else None

    @staticmethod
    def _waiting_successes(episodes: list[MemoryEntry], task: Task) -> list[MemoryEntry]:
        """Successes no success call has seen, one per task (the oldest), other tasks only."""
        out: dict[str, MemoryEntry] = {}
        for e in episodes:
            if e.success and not e.extra.get("critiqued") and e.task_id != task.task_id and e.task_id not in out:
                out[e.task_id] = e
        return list(out.values())

    def digest(self, task: Task, result: EpisodeResult, *, epoch: int,
               llm: "EpisodeLLM | None") -> dict[str, Any] | None:
        if self.skips(bool(result.errors), result.crashed):
            return None
        own, record = trajectory_entry(task.intent, result, self.s.max_trajectory_chars)
        out: dict[str, Any] = {"experience": own, "calls": [], "critiqued": [], "grouped": False, "error": None,
                               "record": record}
        if llm is None:
            return out
        shown = self.insights()
        rows = ins.rows_of(shown)
        errors: list[str] = []
        episodes = [e for e in self.bank.iter_entries() if is_episode(e)]  # insertion order
        other = self._opposite(episodes, task, bool(result.success))
        if other is not None:
            success, failure = (own, other.experience) if result.success else (other.experience, own)
            prompt = ins.compare_prompt(task.intent, success, failure, shown, self._full(shown), self.s.max_ops)
            reply, err = self._ask(llm, prompt, PURPOSE_COMPARE)
            out["calls"].append({"purpose": PURPOSE_COMPARE, "shown": rows, "reply": reply})
            errors += [err] if err else []
        if result.success:
            waiting = self._waiting_successes(episodes, task)
            if len(waiting) + 1 >= self.s.success_group:
                group = waiting[: self.s.success_group - 1]
                prompt = ins.success_prompt([e.experience for e in group] + [own], shown, self._full(shown),
                                            self.s.max_ops)
                reply, err = self._ask(llm, prompt, PURPOSE_SUCCESS)
                out["calls"].append({"purpose": PURPOSE_SUCCESS, "shown": rows, "reply": reply})
                out["critiqued"] = [e.memory_id for e in group]
                out["grouped"] = True
                errors += [err] if err else []
        out["error"] = "; ".join(errors) or None
        return out

    def plan_update(self, items: list[LearnItem]) -> BankUpdate:
        update = BankUpdate()
        entry = self.insights_entry()
        current = ins.insights_of(entry.extra.get("insights", [])) if entry else []
        next_id = int(entry.extra.get("next_id", 1)) if entry else 1
        before = (ins.rows_of(current), next_id)
        critiqued: set[str] = set()
        for it in items:
            if self.skips(it.errored, it.result.crashed) or it.digest is None:
                continue
            for call in it.digest.get("calls", []):
                ops = ins.resolve(ins.parse_operations(call["reply"]), ins.insights_of(call["shown"]))
                current, next_id = ins.apply_operations(current, ops, next_id, self.s.max_insights)
            critiqued.update(it.digest.get("critiqued", []))
        update.add = self.new_entries(items)
        marked = self.bank.get(sorted(critiqued))
        for mid, e in marked.items():
            if not e.extra.get("critiqued"):
                update.set_fields[mid] = {"extra": dict(e.extra, critiqued=True)}
        if (ins.rows_of(current), next_id) != before:
            extra = {"insights": ins.rows_of(current), "next_id": next_id}
            if entry is not None:
                update.set_fields[INSIGHTS_ID] = {"experience": ins.render_insights(current), "extra": extra}
            else:
                order = max([e.order for e in update.add], default=self.bank.next_order - 1) + 1
                update.add.append(MemoryEntry(
                    memory_id=INSIGHTS_ID, intent=INSIGHTS_INTENT, experience=ins.render_insights(current),
                    embedding=[float(v) for v in self.embedder.embed([INSIGHTS_INTENT])[0]], kind=KIND_INSIGHTS,
                    order=order, extra=extra))
        return update

    def _new_memory(self, it: LearnItem) -> NewMemory | None:
        d = it.digest
        if d is None:
            return None
        return NewMemory(d["experience"], kind=KIND_TRAJECTORY, extra={"critiqued": bool(d.get("grouped"))},
                         record=d.get("record"))
