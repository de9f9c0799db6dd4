"""Agent Workflow Memory (Wang et al., arXiv 2409.07429; docs/methods.md): reusable workflows
induced online from the trajectories the model judges successful, given to later episodes as
guidance.

Paper -> code (official code: zorazrw/agent-workflow-memory @ its stored snapshot):
- Online AWM (§2.3, the online scenario): queries arrive in a stream; after each
  one the agent's trajectory is judged by an LM evaluator (no ground truth at test time), and
  from a trajectory judged successful workflows are induced, I(e_t) = W_t, and added to memory,
  M_{t+1} = M_t + W_t, which every later query uses (webarena/pipeline.py: run -> autoeval ->
  induce, per task). The judge is memrl_baselines.judge (purpose `awm-judge`, budget
  `memory.judge_max_tokens`); the induction trigger is `induces`: the judged verdict, never the
  env's reward.
- Workflow induction (§2.2, a workflow is a description and its steps; §2.3, LM-based
  induction; webarena/prompt/instruction.txt): the
  model finds the reusable sub-routines of the trajectory, each at least two steps, with the
  parts that change between tasks written as descriptive variables (here `{name}`), no
  near-duplicates, as many as cover the task. The prompt's structure is the official one
  (instruction, then the task and its actions, then "workflows" for the model to write);
  the wording and the abstract format example are the project's (no benchmark-specific
  example: prompting for a benchmark lives in its env). The official WebArena code samples
  at temperature 1.0 (webarena/induce_prompt.py `llm_generate`), its Mind2Web code at 0.0
  (mind2web/online_induction.py); here the model's own (`induce_temperature`, null). Purpose
  `awm-induce`, budget `memory.induce_max_tokens` (320; the official 2,048 holds a whole
  website's workflows). `parse_workflows` keeps workflows of >= `min_steps` (2) steps.
- Utilization (§2.3): the workflows in memory are added to the agent's
  context (webarena/run.py: the whole workflow file in the system prompt). Here every entry
  of workflows is injected, oldest first; `max_workflows` (null = all, the paper) keeps the
  newest N for a small model's window.

Not reproduced (docs/methods.md): offline AWM (§2.3, induction from annotated training
examples: the benchmarks here have none); the official code's re-induction from all
judged-successful trajectories at once (one per task template, webarena/induce_prompt.py),
which the paper's online description (M_t + W_t) replaces; workflows as executable actions
(the paper's AWM_AS variant).

Display: `render_workflows` is the one function that turns workflows into the text an env
shows. Errored episodes teach nothing unless `learn_from_errors`. A judge or induction call
that fails, or an empty induction, is the episode's `writer_error` (it counts against
`runner.max_error_rate`); a reply in which no workflow parses stores nothing and is no error.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from memrl.core.records import EpisodeResult, RetrievedMemory, Task
from memrl.llm.base import LLMError, ModelProbe
from memrl.memory.bank import BankSettings
from memrl.memory.base import LearnItem, NewMemory
from memrl.core.memory_record import memrl_text
from memrl.memory.writer import SAMPLE_ATTEMPT, format_trajectory
from memrl_baselines.judge import Judge
from memrl_baselines.rag import SimilarityMemory

if TYPE_CHECKING:
    from memrl.llm.client import EpisodeLLM
    from memrl.llm.embed import Embedder

PURPOSE_JUDGE = "awm-judge"
PURPOSE_INDUCE = "awm-induce"
JUDGE_KEY = "memory.judge_max_tokens"
INDUCE_KEY = "memory.induce_max_tokens"
KIND = "workflow"
WORKFLOW_START = "Workflow 1:"  # where the prompt ends (a base model continues the format)

INDUCE_PROMPT = """Below is a task an agent completed, with the actions it took. Extract workflows from it: \
reusable routines that would also help with other tasks of the same kind.

A workflow is a sequence of at least two steps that tasks of this kind share. Write the parts that change \
from one task to another (objects, places, names, values) as descriptive variables in braces, such as \
{{object}} or {{place}}, and keep the parts that stay the same. Do not write workflows that repeat or \
overlap each other; write as many as are needed to cover the task.

Write each workflow in this format:
Workflow <number>: <what the workflow achieves>
1. <a step: what to do, and the action that does it>
2. <the next step>

Task: {intent}
Actions:
{trajectory}

Workflows:
{start}"""

_WORKFLOW = re.compile(r"^\s*\**\s*workflow\s*\d*\s*\**\s*[:.]\s*(.*)$", re.I | re.M)
_STEP = re.compile(r"^\s*(?:\d+\s*[.)]|[-*])\s+(.+)$")


# ---------------------------------------------------------------------------- settings
class AWMSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "awm"
    max_workflows: int | None = Field(None, ge=1, description="inject the newest N workflow entries; "
                                      "null = all (the paper)")
    min_steps: int = Field(2, ge=1, description="a workflow has at least this many steps (the paper's 2)")
    judge_max_tokens: int = Field(64, ge=1, description="the verdict and a one-sentence reason")
    induce_max_tokens: int = Field(320, ge=1, description="a few workflows of a few steps")
    induce_temperature: float | None = Field(None, ge=0.0, le=2.0, description="null: the model's "
                                             "temperature (the official WebArena code samples at 1.0)")
    max_trajectory_chars: int = Field(3000, ge=0, description="the attempt shown to the judge and inducer")
    default_verdict: Literal["success", "failure"] = "failure"  # an unreadable or failed judgment
    count_visits: bool = True  # visits count injections (analysis only)
    learn_from_errors: bool = False  # an episode whose model call failed teaches nothing
    bank: BankSettings = BankSettings()


# ------------------------------------------------------------------------- pure parts
def induces(judged_success: bool, errored: bool, learn_from_errors: bool = False) -> bool:
    """The induction trigger (§2.3): an episode the model judged successful, unless it errored."""
    return judged_success and (not errored or learn_from_errors)


def parse_workflows(text: str, min_steps: int) -> list[dict[str, Any]]:
    """Workflows of a reply ('Workflow n: title' then numbered or bulleted steps); those with
    fewer than `min_steps` steps or a title seen before are dropped."""
    heads = list(_WORKFLOW.finditer(text))
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, m in enumerate(heads):
        body = text[m.end(): heads[i + 1].start() if i + 1 < len(heads) else len(text)]
        steps = [s.group(1).strip() for s in map(_STEP.match, body.splitlines()) if s]
        title = m.group(1).strip().strip("*").strip()
        if not title or len(steps) < min_steps or title.lower() in seen:
            continue
        seen.add(title.lower())
        out.append({"title": title, "steps": steps})
    return out


def induce_prompt(intent: str, trajectory: str) -> str:
    return INDUCE_PROMPT.format(intent=intent.strip(), trajectory=trajectory or "(no actions)", start=WORKFLOW_START)


def continued(reply: str) -> str:
    """The reply read as the continuation of the prompt's last line ("Workflow 1:"); a chat
    model that restarts the format from its heading is read as it is."""
    return reply if _WORKFLOW.match(reply.lstrip()) else WORKFLOW_START + reply


def workflows_entry(intent: str, workflows: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The text an env shows for one episode's workflows (the one display function) and its
    record (memrl.core.memory_record)."""
    lines = ["Workflows:"]
    for w in workflows:
        lines.append(f"Workflow: {w['title']}")
        lines += [f"  {j}. {step}" for j, step in enumerate(w["steps"], 1)]
    text, record = memrl_text(intent.strip(), notes="\n".join(lines), note_kind="workflows")
    return text, record.to_dict()


def render_workflows(intent: str, workflows: list[dict[str, Any]]) -> str:
    """The text of `workflows_entry`."""
    return workflows_entry(intent, workflows)[0]


# ------------------------------------------------------------------------------ module
class AWMMemory(SimilarityMemory):
    name = "awm"
    needs_llm = True  # the judge and the induction
    Settings = AWMSettings

    def __init__(self, settings: AWMSettings, *, bank_dir: str | Path, embedder: "Embedder"):
        super().__init__(settings, bank_dir=bank_dir, embedder=embedder)
        self.judge = Judge(PURPOSE_JUDGE, settings.judge_max_tokens, JUDGE_KEY,
                           default_success=settings.default_verdict == "success")

    def prepare(self, tasks: list[Task], seed: int) -> dict[str, Any]:
        return {"max_workflows": self.s.max_workflows}

    def model_probes(self, task: Task) -> list[Any]:
        return [self.judge.probe(task.intent),
                ModelProbe(role="llm", purpose=PURPOSE_INDUCE,
                           prompt=induce_prompt(task.intent, SAMPLE_ATTEMPT),
                           answer_tokens=self.s.induce_max_tokens, budget_key=INDUCE_KEY,
                           temperature=self.s.induce_temperature)]

    # --------------------------------------------------------------- retrieve
    def retrieve(self, task: Task, *, seed: int = 0) -> list[RetrievedMemory]:
        """Every workflow entry (oldest first; the newest `max_workflows` when set)."""
        entries = [e for e in self.bank.iter_entries() if e.kind == KIND]
        if self.s.max_workflows is not None:
            entries = entries[-self.s.max_workflows:]
        if not entries:
            return []
        keyed = self.bank.get([e.memory_id for e in entries], with_embeddings=True)
        q = np.asarray(self._embed(task.intent), dtype=np.float32)
        return [e.retrieved(sim := float(np.dot(q, np.asarray(keyed[e.memory_id].embedding, dtype=np.float32))),
                            sim) for e in entries]

    # ------------------------------------------------------------------ learn
    def induce(self, llm: "EpisodeLLM | None", intent: str, trajectory: str) -> tuple[list[dict[str, Any]], str | None]:
        if llm is None:
            return [], None
        try:
            reply = llm.complete(induce_prompt(intent, trajectory),
                                 purpose=PURPOSE_INDUCE, max_tokens=self.s.induce_max_tokens,
                                 temperature=self.s.induce_temperature, budget_key=INDUCE_KEY)
        except LLMError as exc:
            return [], f"induce: {exc}"
        if not reply.strip():
            return [], "induce: the model's reply was empty"
        return parse_workflows(continued(reply), self.s.min_steps), None  # none parsed: nothing to keep

    def digest(self, task: Task, result: EpisodeResult, *, epoch: int,
               llm: "EpisodeLLM | None") -> dict[str, Any] | None:
        if self.skips(bool(result.errors), result.crashed):
            return None
        trajectory = format_trajectory(result, self.s.max_trajectory_chars)
        verdict = self.judge.ask(llm, task.intent, trajectory)
        out: dict[str, Any] = {"judged_success": verdict.success, "verdict_parsed": verdict.parsed,
                               "workflows": [], "experience": None, "error": verdict.error}
        if induces(verdict.success, bool(result.errors), self.s.learn_from_errors):
            workflows, error = self.induce(llm, task.intent, trajectory)
            out["workflows"] = workflows
            out["experience"], out["record"] = workflows_entry(task.intent, workflows) if workflows else (None, None)
            out["error"] = "; ".join(e for e in (verdict.error, error) if e) or None
        return out

    def _new_memory(self, it: LearnItem) -> NewMemory | None:
        d = it.digest
        if d is None or not d.get("workflows"):
            return None
        return NewMemory(d["experience"], kind=KIND,
                         extra={"workflows": d["workflows"], "judged_success": True,
                                "verdict_parsed": d["verdict_parsed"]}, record=d.get("record"))
