"""Self-RAG-style baseline (docs/design.md §6): the frozen model itself decides whether to retrieve
and which retrieved memories are relevant.

- Bank: written like MemRL's (the project's experience writer: a short plan after a success,
  a reflection after a failure, each with its trajectory), one entry per episode; Q is never
  learned (stays 0); `visits` counts injections (analysis only).
- Candidates: the top-k memories by intent similarity (`retrieve`, main thread), optional
  `min_similarity` gate, no δ gate by default.
- `select` (episode thread, before the episode): first one yes/no question about the task
  ("would notes from earlier, similar tasks help?"); on "no" nothing is injected and no
  memory is looked at. On "yes", one yes/no question per candidate ("is this note relevant
  to the task?"); only the memories judged relevant are injected, in similarity order.
  With an empty candidate list no question is asked (there is nothing to retrieve).
- Answers are parsed by their first word, case-insensitively ("Yes.", " no," ...). An answer
  that is neither yes nor no, or a failed model call, takes the default: retrieve = yes
  (`default_retrieve`), relevant = no (`default_relevant`). Without a model (an oracle
  agent) every decision takes its default.
- The decisions of an episode (each answer and whether it was parsed or defaulted) are kept
  in the `extra["self_rag"]` field of the memory that episode writes, so a run's bank shows
  what the model chose.

The prompts are plain text ending with "Answer (yes or no):", so base models continue them
with the answer and chat models answer them as a user message.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from memrl.core.records import EpisodeResult, RetrievedMemory, Task
from memrl.llm.base import LLMError, ModelProbe
from memrl.memory.bank import BankSettings
from memrl.memory.base import LearnItem, NewMemory
from memrl.memory.memrl import WriterSettings
from memrl.memory.writer import ExperienceWriter
from memrl_baselines.rag import SimilarityMemory

if TYPE_CHECKING:
    from memrl.llm.client import EpisodeLLM
    from memrl.llm.embed import Embedder

RETRIEVE_PROMPT = """An agent is about to attempt a task. \
It keeps notes on tasks it attempted before: plans that worked and reflections on attempts that failed. \
It looks its notes up only when they are likely to help with the task at hand.

Task: {intent}

Question: would notes from earlier, similar tasks help with this task?
Answer (yes or no):"""

RELEVANCE_PROMPT = """An agent is about to attempt a task and has looked up a note it wrote after an earlier task. \
A note is relevant when it concerns the same kind of task and following it would help here.

Task: {intent}

Note (written after the task "{note_intent}"):
{note}

Question: is this note relevant to the task?
Answer (yes or no):"""

_WORD = re.compile(r"[a-z]+")


def parse_yes_no(text: str | None) -> bool | None:
    """True for yes, False for no (judged by the first word, any case); None otherwise."""
    m = _WORD.search((text or "").lower())
    if m is None:
        return None
    return {"yes": True, "no": False}.get(m.group(0))


class SelfRAGSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "self_rag"
    k: int = Field(ge=1, description="candidates judged per episode (the benchmark's k2: "
                   "configs/memory/self_rag.yaml reads env.retrieval.k2)")
    min_similarity: float | None = Field(None, ge=-1.0, le=1.0)
    judge_max_tokens: int = Field(4, ge=1, description="tokens of a yes/no answer")
    max_note_chars: int = Field(1500, ge=1, description="memory text shown to the relevance judge")
    default_retrieve: bool = True   # an unparseable answer to "retrieve?"
    default_relevant: bool = False  # an unparseable answer to "relevant?"
    count_visits: bool = True
    learn_from_errors: bool = False  # an episode whose model call failed is not stored
    writer: WriterSettings = WriterSettings()
    bank: BankSettings = BankSettings()


def _shorten(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit].rstrip() + " [...]"


class SelfRAGMemory(SimilarityMemory):
    name = "self_rag"
    needs_llm = True  # select asks the model; digest writes experiences with it
    Settings = SelfRAGSettings

    def __init__(self, settings: SelfRAGSettings, *, bank_dir: str | Path, embedder: "Embedder"):
        super().__init__(settings, bank_dir=bank_dir, embedder=embedder)
        self.writer = ExperienceWriter(**settings.writer.model_dump())
        self._decisions: dict[str, dict[str, Any]] = {}  # task id -> this episode's decisions
        self._lock = threading.Lock()

    def _ask(self, llm: "EpisodeLLM | None", prompt: str, purpose: str,
             default: bool) -> tuple[bool, str]:
        """(decision, how): how is "yes"/"no", "default:<answer>" or "default:error"."""
        if llm is None:
            return default, "default:no-model"
        try:
            reply = llm.complete(prompt, purpose=purpose, max_tokens=self.s.judge_max_tokens,
                                 budget_key="memory.judge_max_tokens")
        except LLMError:
            return default, "default:error"
        verdict = parse_yes_no(reply)
        if verdict is None:
            return default, "default:" + reply.strip()[:40]
        return verdict, "yes" if verdict else "no"

    def model_probes(self, task: Task) -> list[Any]:
        """The yes/no verdict (at its 4 tokens) and the writer's call (memrl.control.preflight)."""
        return [ModelProbe(role="llm", purpose="self-rag-retrieve",
                           prompt=RETRIEVE_PROMPT.format(intent=task.intent.strip()),
                           answer_tokens=self.s.judge_max_tokens, budget_key="memory.judge_max_tokens"),
                self.writer.probe(task.intent)]

    def select(self, task: Task, candidates: list[RetrievedMemory], *,
               llm: "EpisodeLLM | None") -> list[RetrievedMemory]:
        trace: dict[str, Any] = {"candidates": [m.memory_id for m in candidates]}
        chosen: list[RetrievedMemory] = []
        if candidates:
            want, how = self._ask(llm, RETRIEVE_PROMPT.format(intent=task.intent.strip()),
                                  "self-rag-retrieve", self.s.default_retrieve)
            trace["retrieve"] = how
            if want:
                trace["relevant"] = {}
                for m in candidates:
                    prompt = RELEVANCE_PROMPT.format(intent=task.intent.strip(),
                                                     note_intent=m.intent.strip(),
                                                     note=_shorten(m.experience, self.s.max_note_chars))
                    keep, how = self._ask(llm, prompt, "self-rag-relevance", self.s.default_relevant)
                    trace["relevant"][m.memory_id] = how
                    if keep:
                        chosen.append(m)
        with self._lock:
            self._decisions[task.task_id] = trace
        return chosen

    def digest(self, task: Task, result: EpisodeResult, *, epoch: int,
               llm: "EpisodeLLM | None") -> dict[str, Any] | None:
        with self._lock:
            trace = self._decisions.pop(task.task_id, {})
        if self.skips(bool(result.errors)):
            return None  # nothing will be stored: do not pay for writing it
        out = self.writer.write(task.intent, result, llm)
        out["self_rag"] = trace
        return out

    def _new_memory(self, it: LearnItem) -> NewMemory | None:
        if it.digest is None:
            return None
        return NewMemory(it.digest["experience"], kind=it.digest.get("kind", ""),
                         extra={"self_rag": it.digest.get("self_rag", {})}, record=it.digest.get("record"))
