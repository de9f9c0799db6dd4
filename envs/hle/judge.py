"""The judge: a separate model that decides whether a response's final answer matches the
reference answer, and answers with a JSON verdict.

The judge sees the question text, the response and the reference answer (never the image:
matching two answers needs none, and a text-only judge then serves image questions too).
Its calls go through an ordinary `LLMClient`, so they are cached, retried on timeouts and
rate limits, and counted. A verdict that cannot be read, or a judge call that still fails
after its retries, raises `JudgeError`: the episode is then recorded as `judge_error`, never
as a wrong answer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memrl.llm.base import LLMError, ModelProbe

BUDGET_KEY = "env.judge.max_tokens"  # the verdict's answer budget

if TYPE_CHECKING:
    from memrl.llm.client import EpisodeLLM, LLMClient

INSTRUCTIONS = (
    "You check answers to exam questions against a reference answer. Decide only whether the "
    "final answer given in the response is the same as the reference answer. Do not solve the "
    "question yourself and do not grade the reasoning. Numbers may differ by rounding only; for "
    "a multiple-choice question the chosen option must be the reference option. A response that "
    "gives no final answer, or hedges between several, is not correct.\n"
    "Give your verdict as one JSON object on one line, with exactly these keys: "
    '"extracted_final_answer" (the final answer as the response states it, or null if it states '
    'none), "reasoning" (one short sentence on whether it matches), "correct" (true or false).'
)

CASE = "Question:\n{question}\n\nResponse:\n{response}\n\nReference answer:\n{reference}\n\nVerdict:"

# Worked verdicts, shown to models that need them to keep the format (a base model).
EXAMPLES = (
    ("How many edges does a cube have?",
     "Explanation: 4 on the top face, 4 on the bottom, 4 vertical.\nExact Answer: 12\nConfidence: 90%",
     "12",
     {"extracted_final_answer": "12", "reasoning": "The response answers 12, which is the reference.",
      "correct": True}),
    ("Which metal is liquid at room temperature? A. Iron B. Mercury C. Copper D. Zinc",
     "Explanation: Copper melts easily.\nAnswer: C\nConfidence: 60%",
     "B",
     {"extracted_final_answer": "C", "reasoning": "The response chose C, the reference is B.",
      "correct": False}),
)

_CORRECT_FIELD = re.compile(r'"?correct"?\s*[:=]\s*"?(true|false|yes|no)\b', re.I)
_TRUE = {"true", "yes", "correct", "1"}
_FALSE = {"false", "no", "incorrect", "wrong", "0"}


class JudgeError(RuntimeError):
    """No verdict: the judge call failed after its retries, or its reply could not be read."""

    def __init__(self, message: str, raw: str = "") -> None:
        super().__init__(message)
        self.raw = raw


@dataclass
class Verdict:
    correct: bool
    extracted_final_answer: str | None
    reasoning: str
    raw: str


def build_prompt(question: str, response: str, reference: str, examples: int = 0) -> str:
    parts = [INSTRUCTIONS]
    if examples:
        shown = []
        for q, r, a, v in EXAMPLES[:examples]:
            shown.append(CASE.format(question=q, response=r, reference=a) + " " + json.dumps(v))
        parts.append("Examples:\n\n" + "\n\n".join(shown))
        parts.append("Now the response to check.")
    parts.append(CASE.format(question=question.strip(), response=response.strip() or "(empty)",
                             reference=reference.strip()))
    return "\n\n".join(parts)


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().strip(".").lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
    return None


def _first_object(text: str) -> dict[str, Any] | None:
    decoder = json.JSONDecoder()
    for m in re.finditer(r"\{", text):
        try:
            obj, _ = decoder.raw_decode(text, m.start())
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and "correct" in obj:
            return obj
    return None


def parse_verdict(raw: str) -> Verdict:
    """Read a verdict: the first JSON object holding "correct", else a bare `correct: yes/no`
    field. Anything else raises JudgeError."""
    text = raw or ""
    obj = _first_object(text)
    if obj is not None:
        correct = _as_bool(obj.get("correct"))
        if correct is None:
            raise JudgeError(f"the verdict's \"correct\" is {obj.get('correct')!r}, not true/false", raw)
        extracted = obj.get("extracted_final_answer")
        return Verdict(correct=correct,
                       extracted_final_answer=None if extracted in (None, "None", "null") else str(extracted),
                       reasoning=str(obj.get("reasoning") or ""), raw=raw)
    fields = _CORRECT_FIELD.findall(text)
    if len({f.lower() in _TRUE for f in fields}) == 1:
        return Verdict(correct=fields[0].lower() in _TRUE, extracted_final_answer=None,
                       reasoning="", raw=raw)
    shown = text.strip().replace("\n", " ")[:160]
    raise JudgeError(f"unreadable verdict: {shown!r}" if shown else "empty verdict", raw)


class Judge:
    """Grades one response with the judge model (`grade`), through a per-episode handle."""

    def __init__(self, client: "LLMClient", examples: int = 0, json_mode: bool = True,
                 max_tokens: int | None = None) -> None:
        self.client = client
        self.examples = int(examples)
        self.json_mode = bool(json_mode)
        self.max_tokens = max_tokens

    def episode(self, sample_prefix: str, seed: int | None) -> "EpisodeLLM":
        return self.client.episode(f"{sample_prefix}/judge", seed)

    def _call(self, question: str, response: str, reference: str) -> dict:
        """The verdict call's arguments (one home for the judge's and the preflight's)."""
        return {"prompt": build_prompt(question, response, reference, self.examples),
                # worked examples put each verdict on one line; a bare model stops there
                "stop": ("\n",) if self.examples else (),
                "response_format": "json" if self.json_mode else None}

    def probe(self, question: str, response: str, reference: str) -> ModelProbe:
        """The verdict call as `grade` makes it (memrl.preflight)."""
        return ModelProbe(role="env.judge", purpose="judge", answer_tokens=self.max_tokens,
                          budget_key=BUDGET_KEY, **self._call(question, response, reference))

    def grade(self, llm: "EpisodeLLM", question: str, response: str, reference: str) -> Verdict:
        call = self._call(question, response, reference)
        try:
            raw = llm.complete(call.pop("prompt"), purpose="judge", max_tokens=self.max_tokens,
                               budget_key=BUDGET_KEY, **call)
        except LLMError as exc:
            raise JudgeError(f"judge call failed: {exc}") from exc
        return parse_verdict(raw)
