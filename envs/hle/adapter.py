"""The HLE env adapter: one task = one question, answered in one model call and graded by a
separate judge model.

Agents: "react" (the default LLM agent name; on HLE it answers in one call) and "gold" (an
oracle that replies with the reference answer, no solver model: it checks the judge path).

Each episode's `info["outcome"]` is one of:
  correct / incorrect   the judge's verdict (success = correct)
  judge_error           no verdict (judge call failed after retries, or unreadable reply)
  solver_error          the solver call failed after retries; nothing was judged
  unsupported_input     an image question for a text-only solver; no call was made
Every outcome but correct/incorrect also puts a message in `errors`, so the runner marks
the episode errored: it counts as unsolved in SR, and memory modules do not learn from it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from memrl.llm.base import LLMError
from memrl.llm.client import LLMClient
from memrl.records import EpisodeResult, RetrievedMemory, Step, Task

from .data import HLEQuestion, LoadResult, Selection, load, select
from .judge import Judge, JudgeError, Verdict
from .prompts import build_messages, gold_response, parse_answer, parse_confidence
from .settings import JudgeSettings

if TYPE_CHECKING:
    from memrl.llm.client import EpisodeLLM

AGENTS = ("react", "gold")
OUTCOMES = ("correct", "incorrect", "judge_error", "solver_error", "unsupported_input")


def _build_judge(judge: Any) -> Judge:
    if isinstance(judge, Judge):
        return judge
    if isinstance(judge, LLMClient):
        return Judge(judge)
    settings = judge if isinstance(judge, JudgeSettings) else JudgeSettings.model_validate(dict(judge or {}))
    from memrl.llm.factory import build_client

    return Judge(build_client(settings.client_config()), examples=settings.n_examples(),
                 json_mode=settings.json_mode, max_tokens=settings.max_tokens)


class HLEEnv:
    """Humanity's Last Exam behind the project's Env seam (see the module docstring).

    Args:
        data_path: a local parquet / JSONL / JSON file (or a folder of them) in HLE's schema;
            None loads `hf_dataset` (`cais/hle`, gated: $HF_TOKEN) from the Hugging Face hub.
        categories, modality, ratio, subset_size, subset_seed, split, valid_fraction,
        task_ids, max_tasks: which questions to keep (see `data.select`).
        judge: the judge section of the config (a mapping / JudgeSettings), or a ready
            `LLMClient` / `Judge`.
        max_tokens: the solver's tokens per answer (None: the llm config's max_tokens).
        memory_max_chars: each injected memory is clipped to this many characters.
        max_steps: accepted (debug presets set it); an episode is always one answer.
    """

    name = "hle"

    def __init__(
        self,
        data_path: str | os.PathLike[str] | None = None,
        agent: str = "react",
        judge: Any = None,
        hf_dataset: str = "cais/hle",
        hf_split: str = "test",
        hf_revision: str | None = None,
        hf_token_env: str = "HF_TOKEN",
        categories: Sequence[str] | None = None,
        modality: str = "all",
        ratio: float | None = None,
        subset_size: int | None = None,
        subset_seed: int = 0,
        split: str = "all",
        valid_fraction: float = 0.2,
        max_tasks: int | None = None,
        task_ids: Iterable[str] | None = None,
        max_steps: int = 1,
        max_tokens: int | None = None,
        memory_max_chars: int = 4000,
    ) -> None:
        if agent not in AGENTS:
            raise ValueError(f"unknown HLE agent {agent!r}; expected one of {AGENTS}")
        if judge is None:
            raise ValueError("the HLE env needs a judge (env.judge: backend, model, api_key_env, ...)")
        self.agent = agent
        self.data_path = str(data_path) if data_path is not None else None
        self.source = dict(hf_dataset=hf_dataset, hf_split=hf_split, hf_revision=hf_revision,
                           hf_token_env=hf_token_env)
        self.selection = Selection(
            categories=list(categories) if categories else None, modality=modality, ratio=ratio,
            subset_size=subset_size, seed=subset_seed, split=split, valid_fraction=valid_fraction,
            task_ids=list(task_ids) if task_ids is not None else None, max_tasks=max_tasks)
        self.max_steps = int(max_steps)
        self.max_tokens = max_tokens
        self.memory_max_chars = int(memory_max_chars)
        self._owns_judge = not isinstance(judge, (Judge, LLMClient))
        self.judge = _build_judge(judge)
        self.loaded: LoadResult | None = None
        self._tasks: list[Task] | None = None
        self._lock = threading.Lock()

    # -- tasks -----------------------------------------------------------------------
    def tasks(self) -> list[Task]:
        with self._lock:
            if self._tasks is None:
                self.loaded = load(self.data_path, **self.source)
                chosen = select(self.loaded.questions, self.selection)
                if not chosen:
                    raise ValueError(f"no HLE questions left in {self.loaded.source} after the filters "
                                     f"({len(self.loaded.questions)} loaded, "
                                     f"{len(self.loaded.skipped)} malformed rows skipped)")
                self._tasks = [self._task(q) for q in chosen]
            return list(self._tasks)

    @staticmethod
    def _task(q: HLEQuestion) -> Task:
        payload = {"question": q.question, "answer": q.answer, "answer_type": q.answer_type,
                   "category": q.category, "raw_subject": q.raw_subject, "image": q.image,
                   "content_hash": q.content_hash()}
        return Task(task_id=q.id, intent=q.question, payload=payload)

    @staticmethod
    def question_of(task: Task) -> HLEQuestion:
        p = task.payload
        return HLEQuestion(id=task.task_id, question=p["question"], answer=p["answer"],
                           answer_type=p["answer_type"], category=p.get("category", ""),
                           raw_subject=p.get("raw_subject", ""), image=p.get("image", ""))

    # -- episodes --------------------------------------------------------------------
    def solve(
        self,
        task: Task,
        memories: Sequence[RetrievedMemory],
        llm: "EpisodeLLM | None",
        seed: int,
    ) -> EpisodeResult:
        q = self.question_of(task)
        info: dict[str, Any] = {"answer_type": q.answer_type, "category": q.category,
                                "raw_subject": q.raw_subject, "has_image": q.has_image,
                                "agent": self.agent, "memories_injected": 0}
        if self.agent == "gold":
            response = gold_response(q)
            prefix = f"gold/{task.task_id}"
        else:
            if llm is None:
                raise ValueError("the HLE answering agent needs an LLM")
            prefix = llm.sample_prefix
            info["memories_injected"] = len(memories)
            if q.has_image and not llm.supports_images:
                msg = (f"unsupported_input: question {q.id} has an image and the solver model "
                       f"{llm.model_id} takes text only (no call made)")
                return self._result("unsupported_input", info, errors=[msg])
            messages = build_messages(q, memories, memory_max_chars=self.memory_max_chars)
            try:
                response = llm.complete(messages, purpose="answer", max_tokens=self.max_tokens)
            except LLMError as exc:
                return self._result("solver_error", info, errors=[f"solver_error: {exc}"])
        info["parsed_answer"] = parse_answer(response)
        info["confidence"] = parse_confidence(response)
        if not response.strip():  # nothing to grade: certainly not the reference answer
            info["judge"] = None
            return self._result("incorrect", info, response=response,
                                feedback="Graded incorrect: the response was empty.")
        judge_llm = self.judge.episode(prefix, seed)
        try:
            verdict: Verdict | None = self.judge.grade(judge_llm, q.question, response, q.answer)
            error = None
        except JudgeError as exc:
            verdict, error = None, exc
        info["judge"] = self._judge_usage(judge_llm)
        if verdict is None:
            info["judge"]["raw"] = (error.raw or "")[:500]
            return self._result("judge_error", info, errors=[f"judge_error: {error}"],
                                response=response,
                                feedback="The answer could not be graded (the judge gave no verdict).")
        info["judge"].update(extracted_final_answer=verdict.extracted_final_answer,
                             reasoning=verdict.reasoning[:500])
        outcome = "correct" if verdict.correct else "incorrect"
        feedback = "Graded correct." if verdict.correct else "Graded incorrect."
        return self._result(outcome, info, response=response, feedback=feedback)

    def _judge_usage(self, judge_llm: "EpisodeLLM") -> dict[str, Any]:
        m = judge_llm.meter
        return {"model": self.judge.client.model_id, "calls": m.calls, "cache_hits": m.cache_hits,
                "prompt_tokens": m.prompt_tokens, "completion_tokens": m.completion_tokens,
                "cost_usd": m.cost_usd}

    @staticmethod
    def _result(outcome: str, info: dict[str, Any], errors: list[str] | None = None,
                response: str | None = None, feedback: str = "") -> EpisodeResult:
        info["outcome"] = outcome
        transcript = [Step(action=response, observation=feedback)] if response is not None else []
        success = outcome == "correct"
        return EpisodeResult(success=success, reward=1.0 if success else 0.0,
                             steps=len(transcript), transcript=transcript,
                             errors=list(errors or []), info=info)

    def close(self) -> None:
        cache = getattr(self.judge.client, "cache", None)
        if self._owns_judge and cache is not None:
            cache.close()


def judge_from_settings(settings: JudgeSettings | Mapping[str, Any]) -> Judge:
    """A `Judge` built the way the env builds it from its config section."""
    return _build_judge(settings)
