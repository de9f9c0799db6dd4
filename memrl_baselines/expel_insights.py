"""ExpeL's insight list (Zhao et al., arXiv 2308.10144, §4.2 "insight extraction"): the pure
parts, testable without a model. The module that drives them is memrl_baselines/expel.py.

The model is shown the current insights (numbered) and either a success/failure pair of one
task or a group of successes, and answers with operations on the list (§4.2):

- ADD <n>: <new insight>       a new insight, importance 2;
- EDIT <n>: <rewritten insight> insight n rewritten, importance +1;
- UPVOTE <n>: <insight n>       agree with insight n, importance +1;
- DOWNVOTE <n>: <insight n>     disagree (contradicted or duplicated), importance -1, or -3
                                when the list is over `max_insights` + 5 (official code,
                                agent/expel.py `update_rules(list_full=max_num_rules+5 <= len)`);

an insight whose importance reaches 0 is removed, and the list is kept in decreasing
importance (agent/expel.py `update_rules`: rules sorted by count). The official prompt names
upvote/downvote AGREE/REMOVE; both spellings are read.

How an answer becomes changes follows the official code's checks (agent/expel.py
`parse_rules`, `update_rules`): an operation's text must end with a period and must not
hold another operation's keyword; an ADD whose text contains an existing insight is dropped;
an EDIT whose text contains an existing insight is an UPVOTE of it, and an EDIT of a number
not in the list is dropped; an UPVOTE or DOWNVOTE names its insight by text (the first
insight its text contains), and is dropped when none matches. Operations apply by kind in
the official order: downvotes, upvotes, edits, adds.

Each operation is resolved to an insight's stable id against the list the model was shown
(`resolve`), then applied to the list as it is when the batch commits (`apply_operations`),
so an operation on an insight another episode of the batch removed is skipped.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Sequence

OPS = ("ADD", "EDIT", "UPVOTE", "DOWNVOTE")
_SYNONYMS = {"AGREE": "UPVOTE", "REMOVE": "DOWNVOTE"}
_LINE = re.compile(r"^[\s*\-]*(ADD|EDIT|UPVOTE|DOWNVOTE|AGREE|REMOVE)\b\s*(\d+)?\s*:\s*(.*)$", re.I)
_BANNED = ("ADD", "EDIT", "UPVOTE", "DOWNVOTE", "AGREE", "REMOVE")
ADD_WEIGHT = 2
FULL_MARGIN = 5  # the list counts as full past max_insights + 5 (official `update_rules`)


@dataclass(frozen=True)
class Insight:
    id: int
    text: str
    count: int  # importance


@dataclass(frozen=True)
class Operation:
    op: str          # ADD | EDIT | UPVOTE | DOWNVOTE
    number: int | None
    text: str


@dataclass(frozen=True)
class Resolved:
    op: str
    target: int | None  # the insight id (None for ADD)
    text: str


def insights_of(rows: Iterable[dict[str, Any]]) -> list[Insight]:
    return [Insight(int(r["id"]), str(r["text"]), int(r["count"])) for r in rows]


def rows_of(insights: Sequence[Insight]) -> list[dict[str, Any]]:
    return [asdict(i) for i in insights]


def parse_operations(reply: str) -> list[Operation]:
    """The operations of a reply, one a line (the official `parse_rules` filter)."""
    out: list[Operation] = []
    for line in reply.splitlines():
        m = _LINE.match(line)
        if m is None:
            continue
        op = m.group(1).upper()
        text = m.group(3).strip().strip("*").strip()
        if not text or not text.endswith(".") or any(re.search(rf"\b{w}\b", text) for w in _BANNED):
            continue
        out.append(Operation(_SYNONYMS.get(op, op), int(m.group(2)) if m.group(2) else None, text))
    return out


def _matching(shown: Sequence[Insight], text: str) -> Insight | None:
    """The first shown insight whose text the operation's text contains."""
    return next((i for i in shown if i.text and i.text in text), None)


def resolve(ops: Sequence[Operation], shown: Sequence[Insight]) -> list[Resolved]:
    """Operations against the list the model saw, as stable insight ids (module doc)."""
    out: list[Resolved] = []
    for o in ops:
        match = _matching(shown, o.text)
        if o.op == "ADD":
            if match is None:
                out.append(Resolved("ADD", None, o.text))
        elif o.op == "EDIT":
            if match is not None:
                out.append(Resolved("UPVOTE", match.id, match.text))
            elif o.number is not None and 1 <= o.number <= len(shown):
                out.append(Resolved("EDIT", shown[o.number - 1].id, o.text))
        elif match is not None:  # UPVOTE / DOWNVOTE name their insight by its text
            out.append(Resolved(o.op, match.id, match.text))
    return out


def apply_operations(insights: Sequence[Insight], ops: Sequence[Resolved], next_id: int,
                     max_insights: int) -> tuple[list[Insight], int]:
    """(the new list, the next insight id) after one answer's operations."""
    full = len(insights) >= max_insights + FULL_MARGIN
    rows = {i.id: [i.text, i.count] for i in insights}
    order = [i.id for i in insights]
    for kind in ("DOWNVOTE", "UPVOTE", "EDIT", "ADD"):
        for o in ops:
            if o.op != kind:
                continue
            if kind == "ADD":
                rows[next_id] = [o.text, ADD_WEIGHT]
                order.append(next_id)
                next_id += 1
                continue
            if o.target not in rows:
                continue  # removed since the model saw it
            if kind == "DOWNVOTE":
                rows[o.target][1] -= 3 if full else 1
            elif kind == "UPVOTE":
                rows[o.target][1] += 1
            else:
                rows[o.target] = [o.text, rows[o.target][1] + 1]
    kept = [Insight(i, rows[i][0], rows[i][1]) for i in order if rows[i][1] > 0]
    kept.sort(key=lambda i: -i.count)  # stable: ties keep their order
    return kept, next_id


def numbered(insights: Sequence[Insight]) -> str:
    return "\n".join(f"{n}. {i.text}" for n, i in enumerate(insights, 1)) or "(none yet)"


def render_insights(insights: Sequence[Insight]) -> str:
    """The text an env shows for the insight list (ExpeL's one display function for its
    insights; its recalled trajectories are shown as RAG stores them)."""
    return "Insights from earlier tasks, most important first:\n" + numbered(insights)


# ------------------------------------------------------------------------------ prompts
# The official structure (prompts/templates/human.py: the trials, the existing rules, the
# guidance, the operation format, the "full" suffix); the wording is the project's.
_FORMAT = """Answer with operations on the insights, one a line, each in one of these forms:
UPVOTE <number>: <the existing insight, copied> (it is strongly relevant here)
DOWNVOTE <number>: <the existing insight, copied> (it is contradicted by the trials, or repeats another)
EDIT <number>: <the insight rewritten> (it is too narrow or can be improved)
ADD <number>: <a new insight> (something important that no insight says yet)
Insights must hold for tasks in general: never mention these particular trials. Keep each insight to one \
clear sentence ending with a period. Use at most {max_ops} operations, at most one per existing insight.{full}
Operations:
"""
_FULL = " The list is full: prefer DOWNVOTE, and ADD only an insight that is very different from the others."

COMPARE_PROMPT = """An agent attempted the same task twice: once successfully, once not. Compare the two \
attempts and improve the agent's list of insights, so that it avoids such failures on other tasks.

Task: {intent}

Successful attempt:
{success}

Failed attempt:
{failure}

Current insights:
{insights}

""" + _FORMAT

SUCCESS_PROMPT = """Below are attempts by an agent that succeeded at their tasks. Find what they have in \
common that made them work and improve the agent's list of insights accordingly, favouring advice on how to \
reason and which actions to take.

{successes}

Current insights:
{insights}

""" + _FORMAT


def compare_prompt(intent: str, success: str, failure: str, shown: Sequence[Insight], full: bool,
                   max_ops: int) -> str:
    return COMPARE_PROMPT.format(intent=intent.strip(), success=success, failure=failure,
                                 insights=numbered(shown), full=_FULL if full else "", max_ops=max_ops)


def success_prompt(successes: Sequence[str], shown: Sequence[Insight], full: bool, max_ops: int) -> str:
    trials = "\n\n".join(f"Successful attempt {n}:\n{s}" for n, s in enumerate(successes, 1))
    return SUCCESS_PROMPT.format(successes=trials, insights=numbered(shown), full=_FULL if full else "",
                                 max_ops=max_ops)
