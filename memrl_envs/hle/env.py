"""The HLE env adapter: one task = one question, answered in one model call and graded by a
separate judge model.

Agents: "react" (the default LLM agent name; on HLE it answers in one call) and "gold" (an
oracle that replies with the reference answer, no solver model: it checks the judge path).

Each episode's `outcome_detail` is one of (the shared `outcome` in brackets):
  correct / incorrect   the judge's verdict (success / failure)
  judge_error           no verdict: judge call failed after retries, or unreadable reply (judge_error)
  solver_error          the solver call failed after retries; nothing was judged (llm_error)
  unsupported_input     an image question for a text-only solver; no call was made (env_error)
Every outcome but correct/incorrect also puts a message in `errors`, so the runner marks
the episode errored: it counts as unsolved in SR, and memory modules do not learn from it.
Under `env.judge.verdict_rule=official` there is no judge_error: a judge that gives no
verdict grades the answer incorrect (as the official runner does), with the reason in
`info["judge"]["unread"]`.

Every result carries `memory_trajectory`, the episode as the official code hands it to its
memory writer: "QUESTION\n{question}\n\nSOLUTION\n{reply, stripped}\n" (an empty
solution when no reply came).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from memrl.core.records import EpisodeResult, RetrievedMemory, Step, Task
from memrl.env.base import Env, Policy
from memrl.llm.base import LLMError, ModelProbe
from memrl.llm.client import LLMClient
from memrl_envs.hle.data import HLEQuestion, LoadResult, Selection, load, select
from memrl_envs.hle.judge import Judge, JudgeError, Verdict
from memrl_envs.hle.prompts import build_messages, gold_response, parse_answer, parse_confidence
from memrl_envs.hle.settings import HLESettings, JudgeSettings

if TYPE_CHECKING:
    from memrl.llm.client import EpisodeLLM

ANSWER_BUDGET_KEY = "env.max_tokens"  # the solver's answer budget (null: llm.max_tokens)

# outcome_detail -> the shared outcome
OUTCOMES = {"correct": "success", "incorrect": "failure", "judge_error": "judge_error",
            "solver_error": "llm_error", "unsupported_input": "env_error"}


class UnsupportedInput(Exception):
    """The question cannot be put to this solver (an image for a text-only model)."""


class AnswerPolicy(Policy):
    """An HLE agent: one response to the question."""

    def judge_prefix(self, task_id: str) -> str:
        """Names the judge's calls for this episode (the response cache's sample identity)."""
        return self.llm.sample_prefix

    def respond(self, q: HLEQuestion) -> str:
        raise NotImplementedError


class ReactPolicy(AnswerPolicy):
    """The solver model answers in one call (memories in the prompt, clipped)."""

    def respond(self, q: HLEQuestion) -> str:
        if q.has_image and not self.llm.supports_images:
            raise UnsupportedInput(f"question {q.id} has an image and the solver model "
                                   f"{self.llm.model_id} takes text only (no call made)")
        return self.llm.complete(self.messages(q), purpose="answer", max_tokens=self.s.max_tokens,
                                 budget_key=ANSWER_BUDGET_KEY if self.s.max_tokens else "llm.max_tokens")

    def messages(self, q: HLEQuestion) -> list:
        return build_messages(q, self.memories, memory_max_chars=self.s.memory_max_chars,
                              memory_format=self.s.memory_format)


class GoldPolicy(AnswerPolicy):
    """The reference answer in the answer format, no solver model: checks the judge path."""

    needs_llm = False
    reads_memories = False

    def judge_prefix(self, task_id: str) -> str:
        return f"gold/{task_id}"

    def respond(self, q: HLEQuestion) -> str:
        return gold_response(q)


def _build_judge(judge: Any) -> Judge:
    if isinstance(judge, Judge):
        return judge
    if isinstance(judge, LLMClient):
        return Judge(judge)
    settings = judge if isinstance(judge, JudgeSettings) else JudgeSettings.model_validate(dict(judge or {}))
    from memrl.control.wiring import build_client

    return Judge(build_client(settings, section="env.judge"), examples=settings.n_examples(),
                 json_mode=settings.json_mode, max_tokens=settings.max_tokens,
                 verdict_rule=settings.verdict_rule)


class HLEEnv(Env):
    """Humanity's Last Exam behind the project's Env seam (see the module docstring).

    Settings (``HLESettings``, the `env=hle` group): data_path (a local parquet / JSONL / JSON
    file, or a folder of them, in HLE's schema; null loads `hf_dataset`, `cais/hle`, gated:
    $HF_TOKEN, from the Hugging Face hub); categories, modality, ratio, subset_size,
    subset_seed, split, valid_fraction, task_ids, max_tasks: which questions to keep (see
    `data.select`); judge (the judge model's section); max_tokens (the solver's tokens per
    answer; null: the llm config's); memory_max_chars (each injected memory is clipped);
    order / order_seed (the task order); memory_format (where the memories go).
    Agents: "react" (the solver model) or "gold" (the reference answer).
    `judge`: a ready `LLMClient` / `Judge` instead of the one the settings describe (tests).
    """

    name = "hle"
    Settings = HLESettings
    POLICIES = {"react": ReactPolicy, "gold": GoldPolicy}

    def __init__(self, settings: HLESettings, *, agent: str, judge: Judge | LLMClient | None = None) -> None:
        super().__init__(settings, agent=agent)
        s = settings
        self.source = dict(hf_dataset=s.hf_dataset, hf_split=s.hf_split, hf_revision=s.hf_revision,
                           hf_token_env=s.hf_token_env)
        self.selection = Selection(
            categories=list(s.categories) if s.categories else None, modality=s.modality, ratio=s.ratio,
            subset_size=s.subset_size, seed=s.subset_seed, split=s.split, valid_fraction=s.valid_fraction,
            task_ids=list(s.task_ids) if s.task_ids is not None else None, max_tasks=s.max_tasks,
            order=s.order, order_seed=s.order_seed)
        self._owns_judge = judge is None
        self.judge = _build_judge(judge if judge is not None else s.judge)
        self.loaded: LoadResult | None = None

    # -- tasks -----------------------------------------------------------------------
    def _list_tasks(self) -> list[Task]:
        self.loaded = load(self.s.data_path, **self.source)
        chosen = select(self.loaded.questions, self.selection)
        if not chosen:
            raise ValueError(f"no HLE questions left in {self.loaded.source} after the filters "
                             f"({len(self.loaded.questions)} loaded, "
                             f"{len(self.loaded.skipped)} malformed rows skipped)")
        return [self._task(q) for q in chosen]

    def data_skipped(self) -> list[dict[str, str]]:
        if self.loaded is None:
            return []
        return [{"item": f"row {k.row}" + (f" (id {k.id})" if k.id else ""), "reason": k.reason}
                for k in self.loaded.skipped]

    def model_clients(self) -> Mapping[str, LLMClient]:
        return {"env.judge": self.judge.client}

    def model_probes(self, task: Task, llm: "EpisodeLLM") -> list[ModelProbe]:
        """The solver's answer (a model agent) and the judge's verdict on a reply in the
        answer format, as the episode makes them (memrl.control.preflight)."""
        q = self.question_of(task)
        out = []
        if self.policy_cls.needs_llm:
            solver = ReactPolicy(self.s, llm, [])
            if not (q.has_image and not llm.supports_images):
                out.append(ModelProbe(role="llm", purpose="answer", prompt=solver.messages(q),
                                      answer_tokens=self.s.max_tokens,
                                      budget_key=ANSWER_BUDGET_KEY if self.s.max_tokens else "llm.max_tokens"))
        out.append(self.judge.probe(q.question, gold_response(q), q.answer))
        return out

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
    def solve(self, task: Task, memories: Sequence[RetrievedMemory], llm: "EpisodeLLM | None",
              seed: int) -> EpisodeResult:
        q = self.question_of(task)
        policy = self.new_policy(llm, memories)
        info: dict[str, Any] = {"answer_type": q.answer_type, "category": q.category,
                                "raw_subject": q.raw_subject, "has_image": q.has_image,
                                "agent": self.agent, "memories_injected": len(policy.memories)}
        prefix = policy.judge_prefix(task.task_id)
        try:
            response = policy.respond(q)
        except UnsupportedInput as exc:
            return self._result("unsupported_input", q, info, errors=[f"unsupported_input: {exc}"])
        except LLMError as exc:
            return self._result("solver_error", q, info, errors=[f"solver_error: {exc}"])
        info["parsed_answer"] = parse_answer(response)
        info["confidence"] = parse_confidence(response)
        if not response.strip():  # nothing to grade: certainly not the reference answer
            info["judge"] = None
            return self._result("incorrect", q, info, response=response,
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
            return self._result("judge_error", q, info, errors=[f"judge_error: {error}"],
                                response=response,
                                feedback="The answer could not be graded (the judge gave no verdict).")
        info["judge"].update(extracted_final_answer=verdict.extracted_final_answer,
                             reasoning=verdict.reasoning[:500])
        if verdict.confidence is not None:
            info["judge"]["confidence"] = verdict.confidence
        if verdict.unread is not None:  # verdict_rule=official: no verdict read, graded incorrect
            info["judge"].update(unread=verdict.unread, raw=verdict.raw[:500])
        outcome = "correct" if verdict.correct else "incorrect"
        feedback = "Graded correct." if verdict.correct else "Graded incorrect."
        return self._result(outcome, q, info, response=response, feedback=feedback)

    def _judge_usage(self, judge_llm: "EpisodeLLM") -> dict[str, Any]:
        m = judge_llm.meter
        return {"model": self.judge.client.model_id, "calls": m.calls, "cache_hits": m.cache_hits,
                "prompt_tokens": m.prompt_tokens, "completion_tokens": m.completion_tokens,
                "cost_usd": m.cost_usd}

    @staticmethod
    def _result(detail: str, q: HLEQuestion, info: dict[str, Any], errors: list[str] | None = None,
                response: str | None = None, feedback: str = "") -> EpisodeResult:
        transcript = [Step(action=response, observation=feedback)] if response is not None else []
        success = detail == "correct"
        return EpisodeResult(success=success, reward=1.0 if success else 0.0,
                             steps=len(transcript), transcript=transcript,
                             errors=list(errors or []), info=info,
                             outcome=OUTCOMES[detail], outcome_detail=detail,
                             memory_trajectory=memory_trajectory(q.question, response or ""))

    def close(self) -> None:
        cache = getattr(self.judge.client, "cache", None)
        if self._owns_judge and cache is not None:
            cache.close()


def memory_trajectory(question: str, reply: str) -> str:
    """The episode as the official code gives it to its memory writer (memrl/run/hle_runner.py
    `_evaluate_row`): the question, then the solver's whole reply."""
    return f"QUESTION\n{question}\n\nSOLUTION\n{reply.strip()}\n"
