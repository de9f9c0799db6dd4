"""Prompt and action parsing for Lifelong-DB.

The protocol is the benchmark's, worded for this project: each turn the agent writes
``Action: Operation`` followed by one SQL statement in a ```sql block (the database runs it
and the result comes back after ``Output:``), or ``Action: Answer`` followed by
``Final Answer: ...`` to finish. The prompt is plain text ending in ``Action:``, so a base
model continues it with one action and a chat model answers it as a user message; the
parser accepts the usual variations (kind word missing, no code fence, a bare statement).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Sequence

from memrl.core.records import RetrievedMemory
from memrl.env.displays import display
from memrl_envs.lifelong.memory_context import ASSISTANT, USER, chat_text
from memrl_envs.lifelong_db.data import DbTask

INSTRUCTION = (
    "You work on a MySQL database to answer a question or to carry out a change to a table. "
    "You act in turns. In a turn you either run SQL or give your final answer.\n"
    "To run SQL, write \"Action: Operation\" and then one SQL statement, on one line, inside a "
    "```sql code block. The database runs it and shows the result after \"Output:\" (rows as a "
    "list of tuples, the number of rows changed, or an error).\n"
    "To finish, write \"Action: Answer\" and on the next line \"Final Answer:\" followed by your "
    "answer. If the question asks for data, the answer is the result rows exactly as the database "
    "printed them, for example [('Alice', 3), ('Bob', 5)]. If the task asks you to insert, update "
    "or delete rows, make the change first; then any final answer will do (the table itself is "
    "checked).\n"
    "Use only the table and columns described with the question."
)

EXAMPLE = """Question: How many books by 'Ann Lee' cost more than 20? Return the count.
Table information: {"name": "books", "row_list": [[1, "Ann Lee", 25], [2, "Ann Lee", 15], [3, "Bo Chen", 30]], \
"column_info_list": [{"name": "id", "type": "INT"}, {"name": "author", "type": "TEXT"}, \
{"name": "price", "type": "INT"}]}
Action: Operation
```sql
SELECT COUNT(*) FROM books WHERE author = 'Ann Lee' AND price > 20;
```
Output: [(1,)]
Action: Answer
Final Answer: [(1,)]

Question: Change the price of the book with id 2 to 18.
Table information: {"name": "books", "row_list": [[1, "Ann Lee", 25], [2, "Ann Lee", 15], [3, "Bo Chen", 30]], \
"column_info_list": [{"name": "id", "type": "INT"}, {"name": "author", "type": "TEXT"}, \
{"name": "price", "type": "INT"}]}
Action: Operation
```sql
UPDATE books SET price = 18 WHERE id = 2;
```
Output: OK, 1 row affected.
Action: Answer
Final Answer: done"""

STOP = ("\nOutput:", "\nQuestion:")

INVALID_HELP = ("Error: no action found. Write \"Action: Operation\" and one SQL statement in a "
                "```sql block, or \"Action: Answer\" and then \"Final Answer: ...\".")

_SQL_START = re.compile(
    r"^\s*(?:(?:sql|query|statement)\s*:\s*)?((?:SELECT|INSERT|UPDATE|DELETE|WITH|SHOW|DESCRIBE|DESC|EXPLAIN|"
    r"REPLACE|CREATE|ALTER|DROP|TRUNCATE|SET|USE|START|BEGIN|COMMIT|ROLLBACK)\b.*)$",
    re.IGNORECASE | re.MULTILINE)
_FENCE = re.compile(r"```[ \t]*(?:sql|mysql)?[ \t]*\n?(.*?)(?:```|\Z)", re.IGNORECASE | re.DOTALL)
_KIND = re.compile(r"\baction\s*:\s*(operation|answer)\b", re.IGNORECASE)
_LEADING_KIND = re.compile(r"^\s*(?:action\s*:\s*)?(operation|answer)\b\s*:?", re.IGNORECASE)
_FINAL = re.compile(r"final\s+answer\s*:[ \t]*(.*)", re.IGNORECASE)


@dataclass(frozen=True)
class Action:
    """A parsed reply: kind "sql" (``text`` = the statement), "answer" (``text`` = the final
    answer), or "invalid" (``text`` = why)."""

    kind: str
    text: str


def format_question(task: DbTask, max_rows: int | None = None) -> str:
    info = json.dumps(task.table_info(max_rows), ensure_ascii=False)
    text = f"Question: {task.instruction}\nTable information: {info}"
    if max_rows is not None and len(task.rows) > max_rows:
        text += f"\n(The table has {len(task.rows)} rows; the first {max_rows} are shown.)"
    return text


@dataclass(frozen=True)
class Turn:
    """One turn as the prompt shows it: the parsed action and the env's reply."""

    action: Action
    raw: str
    observation: str


def _action_text(turn: Turn) -> str:
    """A turn's action as the prompt shows it."""
    a = turn.action
    if a.kind == "sql":
        return f"Action: Operation\n```sql\n{a.text}\n```"
    if a.kind == "answer":
        return f"Action: Answer\nFinal Answer: {a.text}"
    first = next((ln.strip() for ln in turn.raw.splitlines() if ln.strip()), "")
    return f"Action: {first[:200]}"


def format_turn(turn: Turn) -> str:
    return f"{_action_text(turn)}\nOutput: {turn.observation}"


def _preamble(with_example: bool) -> list[str]:
    parts = [INSTRUCTION]
    if with_example:
        parts.append("Two examples of tasks being solved:\n\n" + EXAMPLE)
    return parts


def build_prompt(task: DbTask, memories: Sequence[RetrievedMemory], history: Sequence[Turn],
                 max_rows: int | None = None, with_example: bool = True, memory_format: str = "memrl") -> str:
    """The whole prompt for the next action; it ends with ``Action:``.

    ``memory_format``: "memrl" puts the shared memory block (memrl.env.memory_block) after
    the instructions and the examples; "official" puts the official block (memory_context)
    first, ahead of the instructions and their output format, as the official agent's system
    prompt holds its memories before its format rules and the benchmark's own instructions."""
    parts = _preamble(with_example)
    block = display("lifelong_db", memory_format)(memories)  # memrl.env.displays
    if block:
        parts.insert(0 if memory_format == "official" else len(parts), block)
    episode = [format_question(task, max_rows)] + [format_turn(t) for t in history]
    parts.append("Here is your task.\n" + "\n".join(episode))
    return "\n\n".join(parts) + "\nAction:"


def chat_messages(task: DbTask, history: Sequence[Turn], max_rows: int | None = None,
                  with_example: bool = True) -> list[tuple[str, str]]:
    """The episode as a chat, in the prompt's own words (the official memory writer's input,
    memory_context): the instructions (with the examples) as the preamble user message, the
    question and its table as the next user message, then each action (assistant) and the
    database's output (user); the answer ends it, with nothing after. No memories: the
    official history holds none."""
    preamble = "\n\n".join(_preamble(with_example)) + "\n\nHere is your task."
    messages = [(USER, preamble), (USER, format_question(task, max_rows))]
    for turn in history:
        messages.append((ASSISTANT, _action_text(turn)))
        if turn.action.kind != "answer":
            messages.append((USER, f"Output: {turn.observation}"))
    return messages


def memory_trajectory(task: DbTask, history: Sequence[Turn], max_rows: int | None = None,
                      with_example: bool = True, agent_failed: bool = False) -> str:
    """`EpisodeResult.memory_trajectory`: `chat_messages` as text (memory_context.chat_text)."""
    return chat_text(chat_messages(task, history, max_rows, with_example), agent_failed)


def _first_statement(text: str) -> str:
    """Up to and including the first semicolon outside quotes (whole text if none)."""
    quote = None
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in ("'", '"', "`"):
            quote = ch
        elif ch == ";":
            return text[: i + 1]
    return text


def _clean_sql(sql: str) -> str:
    return " ".join(sql.replace("\r", " ").split())


def _extract_sql(text: str) -> str | None:
    fence = _FENCE.search(text)
    if fence and fence.group(1).strip():
        return _clean_sql(fence.group(1))
    line = _SQL_START.search(text)
    if line:
        rest = text[line.start(1):]
        return _clean_sql(_first_statement(rest.split("\n\n")[0]))
    return None


def _extract_answer(text: str, after: int) -> str:
    """The rest of the "Final Answer:" line (as the benchmark reads it); when that is empty,
    the next line that is not a code fence."""
    final = _FINAL.search(text, after)
    if final:
        if final.group(1).strip():
            return final.group(1).strip()
        rest = text[final.end():]
    else:
        rest = text[after:].lstrip(" :\t")
    return next((ln.strip() for ln in rest.splitlines() if ln.strip() and not ln.strip().startswith("```")), "")


def parse_action(reply: str) -> Action:
    """Read one action from a model reply; see the module docstring for what is accepted."""
    text = (reply or "").strip()
    if not text:
        return Action("invalid", "empty reply")
    kind, after = None, 0
    lead = _LEADING_KIND.match(text)
    if lead:
        kind, after = lead.group(1).lower(), lead.end()
    else:
        named = _KIND.search(text)
        if named:
            kind, after = named.group(1).lower(), named.end()
    if kind is None:
        final = _FINAL.search(text)
        fence = _FENCE.search(text)
        sql_line = _SQL_START.search(text)
        first_sql = min([m.start() for m in (fence, sql_line) if m], default=None)
        if final and (first_sql is None or final.start() < first_sql):
            kind = "answer"
        elif first_sql is not None:
            kind = "operation"
    if kind == "answer":
        return Action("answer", _extract_answer(text, after))
    if kind == "operation":
        sql = _extract_sql(text[after:])
        if sql:
            return Action("sql", sql)
        return Action("invalid", "no SQL statement after \"Action: Operation\"")
    return Action("invalid", "no action found")
