"""ReasoningBank (Ouyang et al., arXiv 2509.25140, ICLR 2026; docs/methods.md): memory items
distilled from the agent's own judged successes and failures, recalled by similarity.

Paper -> code (official code: google-research/reasoning-bank @ ed80611, WebArena/):
- Memory schema (§3.2 "memory schema"): each item has a title, a one-sentence description and
  a short content; at most 3 items per trajectory (prompts/memory_instruction.py,
  SUCCESSFUL_SI / FAILED_SI: "at most 3"). `parse_items` reads them from the model's
  Markdown (`# Memory Item i / ## Title / ## Description / ## Content`), drops items without
  a title or content and repeated titles, and keeps the first `max_items` (3).
- Judging (§3.2 "memory construction"; WebArena/autoeval): after the episode the model judges
  its own attempt from the task and the trajectory; the env's reward is never shown
  (memrl_baselines.judge: the verdict first, then a one-sentence reason). Purpose
  `reasoningbank-judge`, budget `memory.judge_max_tokens` (64).
- Extraction (§3.2; induce_memory.py): a judged success is distilled into strategies that
  worked, a judged failure into lessons that prevent the failure (two prompts with the same
  structure: at most 3 items, no overlap, no task-specific strings, the fixed output format).
  The judge's reason is appended to the trajectory as the official code appends its
  evaluator's thoughts ("The task succeeded/failed because: ..."); it stands for the official
  prompt's "first think why", and the prompt ends at the first item's title (`ITEM_START`),
  so a base model writes the format (a chat model restarting it is read as well:
  `continued`). The official code samples the extraction at temperature 1.0
  (induce_memory.py `one_step_chat(..., temperature=1.0)`); here it is the model's own
  (`extract_temperature`, null) so that a greedy run replays from its cache and a preflight
  probe is deterministic; set 1.0 for the official value. Purposes
  `reasoningbank-extract-success` and `reasoningbank-extract-failure`, budget
  `memory.extract_max_tokens` (320: three items).
- Consolidation (§3.2): items are simply added; nothing is merged or pruned. One bank entry
  per episode holds that episode's items (`extra.items`), keyed by the task intent.
- Retrieval (§3.2 "memory retrieval"; run.py `select_memory(n=1, ...)`): the k most similar
  earlier tasks by embedding similarity of the task query (k = 1, the paper's default and
  its best setting in its ablation on the number of retrieved experiences), all their items
  injected.

Not reproduced (docs/methods.md): MaTTS (§3.3, memory-aware test-time scaling) needs several
trajectories of one task within one step (parallel scaling) or the agent re-examining its own
trajectory inside the episode (sequential scaling); the harness plays one episode per task per
epoch through the env's own loop, so neither fits the seam (a later change could add
`memory.parallel_k` as k episodes per task). The official code's instruction-aware query
embedding (memory_management.py `get_detailed_instruct`) is the embedder's business here: the
query is the task intent, embedded by the run's embedder. The official judge also sees the
agent's final answer and page captions; here it sees the transcript the env returned.

Display: `render_items` is the one function that turns items into the text an env shows.
Errored episodes (a model call failed) teach nothing unless `learn_from_errors`. A judge or
extraction call that fails, or an empty extraction, is the episode's `writer_error` (it
counts against `runner.max_error_rate`, as MemRL's writer's does); a reply in which no item
parses stores nothing and is no error (the model answered; its answer held no memory).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from memrl.core.records import EpisodeResult, Task
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

PURPOSE_JUDGE = "reasoningbank-judge"
PURPOSE_SUCCESS = "reasoningbank-extract-success"
PURPOSE_FAILURE = "reasoningbank-extract-failure"
JUDGE_KEY = "memory.judge_max_tokens"
EXTRACT_KEY = "memory.extract_max_tokens"
ITEM_START = "# Memory Item 1\n## Title"  # where the prompt ends (a base model continues the format)

_GUIDE = """Below is an agent's attempt at a task{verdict}. Turn it into memory items: short, reusable \
insights that will help with similar tasks later.

Base them on {question} (a reviewer's note after the attempt says what it found). Write at most {n} memory \
items. Items must not repeat or overlap one another. Describe kinds of objects, places and commands rather than \
the particular names, numbers or strings of this task, and prefer concrete, actionable steps over general \
principles.

Write every item in exactly this format:
# Memory Item <number>
## Title <a short name for the insight>
## Description <one sentence: when to use it, or when not to>
## Content <one to three sentences: {content}>

Task: {intent}
Attempt:
{trajectory}{because}

""" + ITEM_START

EXTRACT_SUCCESS = dict(
    verdict=", which was judged a success",
    question="why the attempt worked",
    content="what to do to succeed at tasks like this one")
EXTRACT_FAILURE = dict(
    verdict=", which was judged a failure",
    question="why the attempt failed and what would have prevented it",
    content="what went wrong and how to avoid it on tasks like this one")

_HEADING = re.compile(r"^\s*#{1,3}\s*memory\s+item\b[^\n]*$", re.I | re.M)
_FIELD = re.compile(r"^\s*#{1,3}\s*(title|description|content)\b\s*:?[ \t]*(.*)$", re.I)


# ---------------------------------------------------------------------------- settings
class ReasoningBankSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "reasoningbank"
    k: int = Field(1, ge=1, description="earlier tasks whose items are injected (the paper's 1)")
    min_similarity: float | None = Field(None, ge=-1.0, le=1.0, description="optional gate: sim >= this")
    max_items: int = Field(3, ge=1, description="items kept per trajectory (the paper's at most 3)")
    judge_max_tokens: int = Field(64, ge=1, description="the verdict and a one-sentence reason")
    extract_max_tokens: int = Field(320, ge=1, description="three items of a few sentences")
    extract_temperature: float | None = Field(None, ge=0.0, le=2.0, description="null: the model's "
                                              "temperature (the official code samples at 1.0)")
    max_trajectory_chars: int = Field(3000, ge=0, description="the attempt shown to the judge and extractor")
    default_verdict: Literal["success", "failure"] = "failure"  # an unreadable or failed judgment
    count_visits: bool = True  # visits count injections (analysis only)
    learn_from_errors: bool = False  # an episode whose model call failed teaches nothing
    bank: BankSettings = BankSettings()


# ------------------------------------------------------------------------- pure parts
def parse_items(reply: str, max_items: int) -> list[dict[str, str]]:
    """The memory items of a reply in the Markdown format (module doc): each block from one
    `# Memory Item` heading to the next; a field's text runs to the next field heading."""
    text = reply.replace("```markdown", "").replace("```", "")
    heads = list(_HEADING.finditer(text))
    blocks = [text[m.end(): (heads[i + 1].start() if i + 1 < len(heads) else len(text))]
              for i, m in enumerate(heads)]
    items: list[dict[str, str]] = []
    seen: set[str] = set()
    for block in blocks:
        fields: dict[str, list[str]] = {}
        current = None
        for line in block.splitlines():
            m = _FIELD.match(line)
            if m:
                current = m.group(1).lower()
                fields[current] = [m.group(2).strip()]
            elif current is not None and line.strip():
                fields[current].append(line.strip())
        item = {k: " ".join(p for p in fields.get(k, []) if p).strip() for k in ("title", "description", "content")}
        if not item["title"] or not item["content"] or item["title"].lower() in seen:
            continue
        seen.add(item["title"].lower())
        items.append(item)
        if len(items) >= max_items:
            break
    return items


def continued(reply: str) -> str:
    """The reply read as the continuation of the prompt's last line (`ITEM_START`); a chat
    model that restarts the format from its heading is read as it is."""
    text = reply.replace("```markdown", "").replace("```", "")
    return text if text.lstrip().startswith("#") else ITEM_START + " " + text.lstrip(" ")


def items_entry(intent: str, items: list[dict[str, str]]) -> tuple[str, dict[str, Any]]:
    """The text an env shows for one episode's memory items (the one display function) and
    its record (memrl.core.memory_record)."""
    lines = ["Memory items:"]
    for i, item in enumerate(items, 1):
        lines.append(f"{i}. {item['title']}")
        if item.get("description"):
            lines.append(f"   When: {item['description']}")
        lines.append(f"   {item['content']}")
    text, record = memrl_text(intent.strip(), notes="\n".join(lines), note_kind="items")
    return text, record.to_dict()


def render_items(intent: str, items: list[dict[str, str]]) -> str:
    """The text of `items_entry`."""
    return items_entry(intent, items)[0]


def extraction_prompt(intent: str, trajectory: str, success: bool, because: str, max_items: int) -> str:
    """The extraction prompt for a judged success or failure; ends where the model thinks."""
    parts = EXTRACT_SUCCESS if success else EXTRACT_FAILURE
    tail = f"\nReviewer's note: the attempt {'succeeded' if success else 'failed'} because: {because}" \
        if because else ""
    return _GUIDE.format(**parts, n=max_items, intent=intent.strip(), trajectory=trajectory or "(no actions)",
                         because=tail)


# ------------------------------------------------------------------------------ module
class ReasoningBankMemory(SimilarityMemory):
    name = "reasoningbank"
    needs_llm = True  # the judge and the extraction
    Settings = ReasoningBankSettings

    def __init__(self, settings: ReasoningBankSettings, *, bank_dir: str | Path, embedder: "Embedder"):
        super().__init__(settings, bank_dir=bank_dir, embedder=embedder)
        self.judge = Judge(PURPOSE_JUDGE, settings.judge_max_tokens, JUDGE_KEY,
                           default_success=settings.default_verdict == "success")

    def prepare(self, tasks: list[Task], seed: int) -> dict[str, Any]:
        return {"k": self.s.k, "max_items": self.s.max_items}

    def model_probes(self, task: Task) -> list[Any]:
        """The judge and both extraction prompts, as the run sends them (memrl.control.preflight)."""
        return [self.judge.probe(task.intent)] + [
            ModelProbe(role="llm", purpose=PURPOSE_SUCCESS if ok else PURPOSE_FAILURE,
                       prompt=extraction_prompt(task.intent, SAMPLE_ATTEMPT, ok, "", self.s.max_items),
                       answer_tokens=self.s.extract_max_tokens, budget_key=EXTRACT_KEY,
                       temperature=self.s.extract_temperature) for ok in (True, False)]

    def extract(self, llm: "EpisodeLLM | None", intent: str, trajectory: str, success: bool,
                because: str) -> tuple[list[dict[str, str]], str | None]:
        """(items, error) of one extraction call."""
        if llm is None:
            return [], None
        try:
            reply = llm.complete(extraction_prompt(intent, trajectory, success, because, self.s.max_items),
                                 purpose=PURPOSE_SUCCESS if success else PURPOSE_FAILURE,
                                 max_tokens=self.s.extract_max_tokens, temperature=self.s.extract_temperature,
                                 budget_key=EXTRACT_KEY)
        except LLMError as exc:
            return [], f"extract: {exc}"
        if not reply.strip():
            return [], "extract: the model's reply was empty"
        return parse_items(continued(reply), self.s.max_items), None  # none parsed: nothing to keep

    def digest(self, task: Task, result: EpisodeResult, *, epoch: int,
               llm: "EpisodeLLM | None") -> dict[str, Any] | None:
        if self.skips(bool(result.errors), result.crashed):
            return None  # nothing will be stored: no judge, no extraction
        trajectory = format_trajectory(result, self.s.max_trajectory_chars)
        verdict = self.judge.ask(llm, task.intent, trajectory)
        items, error = self.extract(llm, task.intent, trajectory, verdict.success, verdict.thoughts)
        errors = [e for e in (verdict.error, error) if e]
        text, record = items_entry(task.intent, items) if items else (None, None)
        return {"items": items, "judged_success": verdict.success, "verdict_parsed": verdict.parsed,
                "experience": text, "record": record, "error": "; ".join(errors) or None}

    def _new_memory(self, it: LearnItem) -> NewMemory | None:
        d = it.digest
        if d is None or not d.get("items"):
            return None
        kind = "reasoning-success" if d["judged_success"] else "reasoning-failure"
        return NewMemory(d["experience"], kind=kind,
                         extra={"items": d["items"], "judged_success": d["judged_success"],
                                "verdict_parsed": d["verdict_parsed"]}, record=d.get("record"))
