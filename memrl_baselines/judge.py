"""The model judging its own episode (docs/methods.md): the success signal of ReasoningBank
(arXiv 2509.25140, §3.2 "memory construction": an LLM-as-a-judge labels each trajectory,
no ground truth) and of Agent Workflow Memory's online setting (arXiv 2409.07429, §2.3: an
LM-based evaluator decides which test trajectories workflows are induced from).

The judge sees the task and the attempt (the '> action / observation' lines the env
returned), never the env's reward. The official evaluators (google-research/reasoning-bank,
WebArena/autoeval/prompts.py; AWM, webarena/autoeval) ask for the reasoning first and the
status after it. Here the status comes first and one sentence of reason follows it on the
same line, the prompt ending at "Status:" with a stop at the line's end: a base model writes
the verdict as its first word, no model can bury it past its budget, and the preflight's
probe is never cut (the wording is the project's own). The reason is kept as the judge's
note (ReasoningBank passes it to the extraction, as the official code passes the
evaluator's thoughts).

A verdict is the reply's first word, read as the continuation of "Status:" (a chat model
that repeats the label is read as well); a reply whose first word is no verdict, or whose
verdict field names both (a small model repeating the instruction), or a failed call, takes the
module's `default_verdict` (failure by default: no evidence of success is not a success);
the `Verdict` says which happened, and the module keeps it in the entry it writes, so a
run's bank shows how often the judge agreed with the env.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memrl.llm.base import LLMError, ModelProbe
from memrl.memory.writer import SAMPLE_ATTEMPT

if TYPE_CHECKING:
    from memrl.llm.client import EpisodeLLM

JUDGE_PROMPT = """You are checking an agent's attempt at a task. You see the task and everything the agent did \
and observed, but nobody has told you whether the attempt worked: decide that from the evidence alone.

Task: {intent}
Attempt:
{trajectory}

Answer on one line: the status, "success" if the attempt completed the task or "failure" if it did not, \
then a dash and one sentence on what the attempt achieved.
Status:"""

STOP = ("\n",)  # the verdict and its reason are one line
_LABEL = re.compile(r"^[\W_]*(?:status[\W_]*)?", re.I)  # a repeated "Status:" label, quotes, emphasis
_FIELD_END = re.compile(r"\s[-\u2013\u2014]|[-\u2013\u2014]\s|[.,;:!?\n]")  # where the verdict's field ends
_VERDICT = re.compile(r"\b(success|successful|succeeded|failure|failed|fail)\b", re.I)


def _split(reply: str) -> tuple[str, str]:
    """(the verdict's field, the reason after it) of a reply continuing "Status:"."""
    text = _LABEL.sub("", reply.strip(), count=1)
    m = _FIELD_END.search(text)
    return (text, "") if m is None else (text[: m.start()], text[m.end():])


def parse_verdict(reply: str | None) -> bool | None:
    """True for success, False for failure: the reply's first word, read as the continuation
    of "Status:" (a repeated label is skipped). None when the first word is no verdict, or
    when the verdict's field (up to the dash or the first punctuation) names both, as a model
    repeating the instruction does."""
    field, _ = _split(reply or "")
    words = [w.lower().startswith("succ") for w in _VERDICT.findall(field)]
    if not words or len(set(words)) > 1 or not _VERDICT.match(field.strip(" *\"'`")):
        return None
    return words[0]


def thoughts_of(reply: str) -> str:
    """The judge's reason: what follows the verdict, on one line, at most 600 characters."""
    _, rest = _split(reply)
    return " ".join(rest.replace("**", "").split()).lstrip(" -\u2013\u2014:.,")[:600]


@dataclass(frozen=True)
class Verdict:
    success: bool       # what the module learns from
    parsed: bool        # False: the default was taken (no status line, or the call failed)
    thoughts: str       # the judge's reasoning (for the extraction prompt, ReasoningBank)
    error: str | None   # the failed call's error


@dataclass(frozen=True)
class Judge:
    """One purpose's judge: its name, answer budget and the key that sets it."""

    purpose: str
    max_tokens: int
    budget_key: str
    default_success: bool = False

    def prompt(self, intent: str, trajectory: str) -> str:
        return JUDGE_PROMPT.format(intent=intent.strip(), trajectory=trajectory or "(no actions)")

    def ask(self, llm: "EpisodeLLM | None", intent: str, trajectory: str) -> Verdict:
        if llm is None:
            return Verdict(self.default_success, False, "", None)
        try:
            reply = llm.complete(self.prompt(intent, trajectory), purpose=self.purpose, stop=STOP,
                                 max_tokens=self.max_tokens, budget_key=self.budget_key)
        except LLMError as exc:
            return Verdict(self.default_success, False, "", f"{self.purpose}: {exc}")
        verdict = parse_verdict(reply)
        if verdict is None:
            return Verdict(self.default_success, False, thoughts_of(reply), None)
        return Verdict(verdict, True, thoughts_of(reply), None)

    def probe(self, intent: str) -> ModelProbe:
        """The judge's call as the run makes it (memrl.control.preflight)."""
        return ModelProbe(role="llm", purpose=self.purpose, prompt=self.prompt(intent, SAMPLE_ATTEMPT),
                          answer_tokens=self.max_tokens, budget_key=self.budget_key, stop=STOP)
