"""How a Lifelong-DB episode is judged, following the benchmark's rules.

* Tasks whose ground truth is a SELECT ("direct" answers) are judged on the agent's final
  answer *text*: the parenthesised groups in it are its rows, compared in order with the
  ground-truth rows; within a row, values are the comma-separated pieces. A number matches
  when it parses as a float (optionally written ``Decimal('…')``) equal to the expected one
  within 1e-6 (relative or absolute); a string matches exactly, after dropping at most one
  quote character at each end when the answer is one or two characters longer. An answer with
  no parentheses counts as a single row. These are the benchmark's rules, quirks included:
  a value that itself contains a comma or a parenthesis cannot match, and a number written
  inside quotes does not match.
* Tasks whose ground truth changes the table (INSERT / UPDATE / DELETE, "md5" answers) are
  judged on the table itself: an MD5 over the sorted 5-character MD5 prefixes of every row
  (``table_hash_sql``), compared with the recorded hash, whatever the agent answered.
"""

from __future__ import annotations

import math
import re
from typing import Sequence

Row = Sequence[int | float | str]

_DECIMAL = "Decimal"
_NUMBER_CHARS = set("0123456789.-")
_DECIMAL_WRAPPER = re.compile(r"""^Decimal\((["']?)(.*?)(["']?)\)$""")
_SPLIT = re.compile(r"\s*,\s*")


def quote_ident(name: str) -> str:
    """A MySQL identifier in backticks (backticks inside doubled)."""
    return "`" + name.replace("`", "``") + "`"


def table_hash_sql(table: str, columns: Sequence[str]) -> str:
    """The benchmark's table fingerprint: md5 of the ordered, comma-joined 5-hex-digit md5
    prefixes of each row's comma-joined values (NULLs skipped). Relies on MySQL's default
    ``group_concat_max_len`` of 1024 (the managed MariaDB server is started with it)."""
    cols = ",".join(quote_ident(c) for c in columns)
    return ("SELECT MD5(GROUP_CONCAT(rowhash ORDER BY rowhash)) AS hash FROM "
            f"(SELECT SUBSTRING(MD5(CONCAT_WS(',', {cols})), 1, 5) AS rowhash FROM {quote_ident(table)}) AS sub")


def floats_equal(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)


def tuple_spans(answer: str) -> list[tuple[int, int]] | None:
    """(open, close) index pairs of the answer's parenthesised groups; ``Decimal(...)`` is
    not a group. None when the parentheses do not pair up. As in the benchmark, an opening
    parenthesis inside an open group restarts the group there."""
    spans: list[tuple[int, int]] = []
    start: int | None = None
    in_decimal = False
    for i, ch in enumerate(answer):
        if ch == "(":
            if answer[max(0, i - len(_DECIMAL)):i] == _DECIMAL and i >= len(_DECIMAL):
                if in_decimal:
                    return None
                in_decimal = True
            else:
                start = i
        elif ch == ")":
            if in_decimal:
                in_decimal = False
                continue
            if start is None:
                return None
            spans.append((start, i))
            start = None
    if start is not None:
        return None
    return spans


def _number_slice(text: str) -> str:
    """The piece of ``text`` the benchmark hands to float(): it trims the characters before
    the first and after the last digit/sign/point, but keeps one of each trimmed run (an
    off-by-one upstream), so any text around a number makes it unreadable."""
    begin = 0
    for i, ch in enumerate(text):
        if ch in _NUMBER_CHARS:
            break
        begin = i
    end = len(text)
    for i in range(len(text) - 1, -1, -1):
        if text[i] in _NUMBER_CHARS:
            break
        end = i + 1
    return text[begin:end]


def _value_matches(piece: str, expected: int | float | str) -> bool:
    if isinstance(expected, bool):
        return False
    if isinstance(expected, (int, float)):
        piece = _DECIMAL_WRAPPER.sub(r"\2", piece)
        try:
            value = float(_number_slice(piece))
        except ValueError:
            return False
        return floats_equal(value, float(expected))
    if isinstance(expected, str):
        if 0 < len(piece) - len(expected) <= 2:
            stripped_head = stripped_tail = False
            for quote in ("'", '"'):
                if not stripped_head and piece.startswith(quote) and not expected.startswith(quote):
                    piece, stripped_head = piece[1:], True
                if not stripped_tail and piece.endswith(quote) and not expected.endswith(quote):
                    piece, stripped_tail = piece[:-1], True
        return piece == expected
    return False


def row_matches(text: str, expected: Row) -> bool:
    """One answer row (the text between its parentheses) against one expected row."""
    pieces = [p.strip() for p in _SPLIT.split(text) if p.strip()]
    if len(pieces) != len(expected):
        return False
    return all(_value_matches(p, e) for p, e in zip(pieces, expected))


def direct_answer_matches(answer: str, expected: Sequence[Row]) -> bool:
    """The benchmark's verdict on a final answer for a SELECT task."""
    spans = tuple_spans(answer)
    if spans is None:
        return False
    if not spans:
        if not expected:
            return True
        return len(expected) == 1 and row_matches(answer, expected[0])
    if len(spans) != len(expected):
        return False
    return all(row_matches(answer[a + 1:b], row) for (a, b), row in zip(spans, expected))


def hash_matches(actual: str | None, expected: str) -> bool:
    """The table's hash against the recorded one (an empty or missing table never matches)."""
    return actual is not None and actual == expected
