"""The judge: a separate model that decides whether a response's final answer matches the
reference answer.

The judge sees the question text, the response and the reference answer (never the image:
matching two answers needs none, and a text-only judge then serves image questions too).
Its calls go through an ordinary `LLMClient`, so they are cached, retried on timeouts and
rate limits, and counted.

Two verdict rules (`env.judge.verdict_rule`):
- "memrl" (default): the judge answers with a JSON verdict. A verdict that cannot be read, or
  a judge call that still fails after its retries, raises `JudgeError`: the episode is then
  recorded as `judge_error`, never as a wrong answer.
- "official" (MemTensor/MemRL memrl/run/hle_runner.py `_hle_judge`): the judge is asked for
  `field: value` lines (extracted_final_answer, reasoning, correct: yes/no, confidence) and
  read as the official runner reads it: a JSON object if the reply holds one (first "{" to
  last "}"), else the first case-insensitive `correct: yes|no` (so a markdown-bolded
  `**correct:** yes` is not read). Only "yes" is correct; an unreadable verdict or a failed
  judge call is a wrong answer (`Verdict.unread` says why), one the memory learns from.
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

RULES = ("memrl", "official")  # the verdict rules (module doc)

GRADING = (
    "You check answers to exam questions against a reference answer. Decide only whether the "
    "final answer given in the response is the same as the reference answer. Do not solve the "
    "question yourself and do not grade the reasoning. Numbers may differ by rounding only; for "
    "a multiple-choice question the chosen option must be the reference option. A response that "
    "gives no final answer, or hedges between several, is not correct."
)

INSTRUCTIONS = GRADING + (  # verdict_rule=memrl: a JSON verdict
    "\nGive your verdict as one JSON object on one line, with exactly these keys: "
    '"extracted_final_answer" (the final answer as the response states it, or null if it states '
    'none), "reasoning" (one short sentence on whether it matches), "correct" (true or false).'
)

# verdict_rule=official: the fields the official runner's parser reads, one "name: value" line
# each (plain text: its parser does not read a bolded field name)
OFFICIAL_INSTRUCTIONS = GRADING + (
    "\nGive your verdict as four plain-text lines, in this order, each the field's name, a colon "
    "and its value (no bold, no bullets, no JSON):\n"
    "extracted_final_answer: <the final answer as the response states it, or None if it states none>\n"
    "reasoning: <one short sentence on whether it matches the reference answer>\n"
    "correct: <yes if the final answer matches the reference answer, no otherwise>\n"
    "confidence: <the confidence the response states, from 0 to 100; 100 if it states none>"
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
# the official runner's patterns (memrl/run/hle_runner.py `_hle_judge`), first match each
_OFFICIAL_OBJECT = re.compile(r"\{[\s\S]*\}")
_OFFICIAL_CORRECT = re.compile(r"correct\s*:\s*(yes|no)", re.I)
_OFFICIAL_EXTRACTED = re.compile(r"extracted_final_answer\s*:\s*(.+)", re.I)
_OFFICIAL_CONFIDENCE = re.compile(r"confidence\s*:\s*(\d+)", re.I)
_REASONING_LINE = re.compile(r"^\s*reasoning\s*:\s*(.+)$", re.I | re.M)
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
    # verdict_rule=official only: the confidence the judge read off the response, and why no
    # verdict was read (unreadable reply, failed call; counted incorrect), None if one was
    confidence: int | None = None
    unread: str | None = None


def _example_lines(response: str, verdict: dict[str, Any]) -> str:
    """A worked verdict as the official rule asks for it: `field: value` lines."""
    conf = _OFFICIAL_CONFIDENCE.search(response)
    return (f"extracted_final_answer: {verdict['extracted_final_answer']}\n"
            f"reasoning: {verdict['reasoning']}\n"
            f"correct: {'yes' if verdict['correct'] else 'no'}\n"
            f"confidence: {conf.group(1) if conf else 100}")


def build_prompt(question: str, response: str, reference: str, examples: int = 0,
                 rule: str = "memrl") -> str:
    """The judge's one user message: the instructions of `rule`, optional worked verdicts,
    then the case, ending at "Verdict:"."""
    official = _check_rule(rule) == "official"
    parts = [OFFICIAL_INSTRUCTIONS if official else INSTRUCTIONS]
    if examples:
        shown = []
        for q, r, a, v in EXAMPLES[:examples]:
            case = CASE.format(question=q, response=r, reference=a)
            shown.append(case + "\n" + _example_lines(r, v) if official else case + " " + json.dumps(v))
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


def _check_rule(rule: str) -> str:
    if rule not in RULES:
        raise ValueError(f"env.judge.verdict_rule: {' | '.join(RULES)} (got {rule!r})")
    return rule


def parse_official_verdict(raw: str) -> Verdict:
    """Read a verdict as the official runner does (module doc); never raises: a reply with no
    verdict in it is incorrect, with `unread` saying so.

    JSON first: the text from the first "{" to the last "}" (or, with no braces, the whole
    reply) as one JSON object; its "correct" is correct when it contains "yes" (or is true).
    Otherwise the first `correct: yes|no`, `extracted_final_answer: ...` and `confidence: N`
    anywhere in the reply, case-insensitive; correct only when that value is "yes"."""
    text = raw or ""
    m = _OFFICIAL_OBJECT.search(text)
    try:
        obj = json.loads(m.group(0) if m else text)
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        value = obj.get("correct", "no")
        correct = value is True or "yes" in str(value).strip().lower()
        extracted = obj.get("extracted_final_answer") or obj.get("extracted_answer")
        try:
            confidence: int | None = int(obj.get("confidence", 0))
        except (TypeError, ValueError):
            confidence = 0
        return Verdict(correct=correct, extracted_final_answer=None if extracted is None else str(extracted),
                       reasoning=str(obj.get("reasoning") or ""), raw=raw, confidence=confidence,
                       unread=None if "correct" in obj else 'the verdict\'s JSON has no "correct"')
    found = _OFFICIAL_CORRECT.search(text)
    extracted_m = _OFFICIAL_EXTRACTED.search(text)
    conf_m = _OFFICIAL_CONFIDENCE.search(text)
    reasoning_m = _REASONING_LINE.search(text)
    shown = text.strip().replace("\n", " ")[:160]
    return Verdict(correct=found is not None and found.group(1).lower() == "yes",
                   extracted_final_answer=extracted_m.group(1).strip() if extracted_m else None,
                   reasoning=reasoning_m.group(1).strip() if reasoning_m else "", raw=raw,
                   confidence=int(conf_m.group(1)) if conf_m else 0,
                   unread=None if found else (f"no `correct: yes|no` in the verdict: {shown!r}"
                                              if shown else "empty verdict"))


def parse_verdict(raw: str, rule: str = "memrl") -> Verdict:
    """Read a verdict under `rule`. memrl: the first JSON object holding "correct", else a
    bare `correct: yes/no` field; anything else raises JudgeError. official:
    `parse_official_verdict` (never raises)."""
    if _check_rule(rule) == "official":
        return parse_official_verdict(raw)
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
    """Grades one response with the judge model (`grade`), through a per-episode handle,
    under one verdict rule (module doc)."""

    def __init__(self, client: "LLMClient", examples: int = 0, json_mode: bool = True,
                 max_tokens: int | None = None, verdict_rule: str = "memrl") -> None:
        self.client = client
        self.examples = int(examples)
        self.json_mode = bool(json_mode)
        self.max_tokens = max_tokens
        self.verdict_rule = _check_rule(verdict_rule)

    @property
    def official(self) -> bool:
        return self.verdict_rule == "official"

    def episode(self, sample_prefix: str, seed: int | None) -> "EpisodeLLM":
        return self.client.episode(f"{sample_prefix}/judge", seed)

    def _call(self, question: str, response: str, reference: str) -> dict:
        """The verdict call's arguments (one home for the judge's and the preflight's)."""
        if self.official:  # "field: value" lines: no JSON mode; a worked verdict ends at a blank line
            return {"prompt": build_prompt(question, response, reference, self.examples, "official"),
                    "stop": ("\n\n",) if self.examples else (), "response_format": None}
        return {"prompt": build_prompt(question, response, reference, self.examples),
                # worked examples put each verdict on one line; a bare model stops there
                "stop": ("\n",) if self.examples else (),
                "response_format": "json" if self.json_mode else None}

    def probe(self, question: str, response: str, reference: str) -> ModelProbe:
        """The verdict call as `grade` makes it (memrl.control.preflight)."""
        return ModelProbe(role="env.judge", purpose="judge", answer_tokens=self.max_tokens,
                          budget_key=BUDGET_KEY, **self._call(question, response, reference))

    def grade(self, llm: "EpisodeLLM", question: str, response: str, reference: str) -> Verdict:
        """The verdict on `response`. memrl's rule raises JudgeError when there is none; the
        official rule returns an incorrect verdict with `unread` set instead."""
        call = self._call(question, response, reference)
        try:
            raw = llm.complete(call.pop("prompt"), purpose="judge", max_tokens=self.max_tokens,
                               budget_key=BUDGET_KEY, **call)
        except LLMError as exc:
            if self.official:
                return Verdict(correct=False, extracted_final_answer=None, reasoning="", raw="",
                               confidence=0, unread=f"judge call failed: {exc}")
            raise JudgeError(f"judge call failed: {exc}") from exc
        return parse_verdict(raw, self.verdict_rule)
