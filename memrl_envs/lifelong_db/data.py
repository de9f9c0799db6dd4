"""The Lifelong-DB task record: its schema check (for the loader) and a typed view of a row."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# Fields that may arrive as Python-literal strings (hub tables); see loader.load_samples.
LITERAL_FIELDS = ("answer_info", "table_info", "skill_list")
# Column types a task may declare: a plain SQL type name with an optional size.
_COLUMN_TYPE = re.compile(r"^[A-Za-z]+(\s*\(\s*\d+(\s*,\s*\d+)?\s*\))?(\s+UNSIGNED)?$", re.I)
_MUTATIONS = ("INSERT", "UPDATE", "DELETE")


@dataclass(frozen=True)
class Column:
    name: str
    type: str


@dataclass(frozen=True)
class DbTask:
    """One DB task: the question, the table to create, and how the outcome is judged.

    ``answer_type`` is "direct" (a SELECT: the final answer is compared with ``direct_rows``)
    or "md5" (a change to the table: the table hash is compared with ``md5``).
    """

    key: str
    instruction: str
    table: str
    columns: tuple[Column, ...]
    rows: tuple[tuple[Any, ...], ...]
    answer_type: str
    direct_rows: tuple[tuple[Any, ...], ...] | None
    md5: str | None
    gold_sql: str
    skills: tuple[str, ...]

    @classmethod
    def from_row(cls, key: str, row: dict[str, Any]) -> "DbTask":
        check_row(row)
        answer, table = row["answer_info"], row["table_info"]
        direct = answer.get("direct")
        return cls(
            key=key,
            instruction=row["instruction"].strip(),
            table=table["name"],
            columns=tuple(Column(c["name"], c["type"]) for c in table["column_info_list"]),
            rows=tuple(tuple(r) for r in table["row_list"]),
            answer_type="md5" if answer.get("md5") is not None else "direct",
            direct_rows=None if direct is None else tuple(tuple(r) for r in direct),
            md5=answer.get("md5"),
            gold_sql=answer["sql"].strip(),
            skills=tuple(row.get("skill_list") or ()),
        )

    def table_info(self, max_rows: int | None = None) -> dict[str, Any]:
        """The table as the benchmark shows it to the agent (name, rows, columns)."""
        rows = self.rows if max_rows is None else self.rows[:max_rows]
        return {"name": self.table, "row_list": [list(r) for r in rows],
                "column_info_list": [{"name": c.name, "type": c.type} for c in self.columns]}


def _need(cond: bool, message: str) -> None:
    if not cond:
        raise ValueError(message)


def check_row(row: dict[str, Any]) -> None:
    """Raise ValueError naming the first problem of a DB task row (the loader skips it)."""
    _need(isinstance(row.get("instruction"), str) and row["instruction"].strip() != "",
          "instruction: missing or empty")
    answer = row.get("answer_info")
    _need(isinstance(answer, dict), "answer_info: missing or not an object")
    _need(isinstance(answer.get("sql"), str) and answer["sql"].strip() != "", "answer_info.sql: missing")
    direct, md5 = answer.get("direct"), answer.get("md5")
    _need((direct is None) != (md5 is None), "answer_info: exactly one of direct / md5 must be set")
    first_word = answer["sql"].split()[0].upper()
    if md5 is not None:
        _need(isinstance(md5, str) and re.fullmatch(r"[0-9a-f]{32}", md5) is not None,
              "answer_info.md5: not a 32-digit hex string")
        _need(first_word in _MUTATIONS, f"answer_info: an md5 answer needs an INSERT/UPDATE/DELETE, got {first_word}")
    else:
        _need(isinstance(direct, list) and all(isinstance(r, (list, tuple)) for r in direct),
              "answer_info.direct: not a list of rows")
        _need(all(isinstance(v, (int, float, str)) and not isinstance(v, bool) for r in direct for v in r),
              "answer_info.direct: values must be numbers or strings")
    table = row.get("table_info")
    _need(isinstance(table, dict), "table_info: missing or not an object")
    _need(isinstance(table.get("name"), str) and table["name"].strip() != "", "table_info.name: missing")
    cols = table.get("column_info_list")
    _need(isinstance(cols, list) and len(cols) > 0, "table_info.column_info_list: missing or empty")
    for c in cols:
        _need(isinstance(c, dict) and isinstance(c.get("name"), str) and c["name"] != "",
              "table_info.column_info_list: a column without a name")
        _need(isinstance(c.get("type"), str) and _COLUMN_TYPE.match(c["type"].strip()) is not None,
              f"table_info: column {c.get('name')!r} has an unsupported type {c.get('type')!r}")
    rows = table.get("row_list")
    _need(isinstance(rows, list), "table_info.row_list: missing")
    for i, r in enumerate(rows):
        _need(isinstance(r, (list, tuple)) and len(r) == len(cols),
              f"table_info.row_list[{i}]: expected {len(cols)} values")
    skills = row.get("skill_list", [])
    _need(isinstance(skills, (list, tuple)) and all(isinstance(s, str) for s in skills),
          "skill_list: not a list of strings")

