"""What each config key means, as its schema says it (`memrl config`, memrl/cli/config.py).

A schema field says what it means in one place: its `description`, or else the comment on its
line or the comment lines right above it in the schema's source (the style of
memrl.config.sections and of every env's and memory's `Settings`). `field_notes` reads both,
so the schemas stay the one home of each key's meaning; `describe_config` prints a validated
config with every key's value, its default where the value differs, its mark (memrl.core.fields:
a key that does not change results says so) and its meaning.

`suggest` finds the key a mistyped one meant ("did you mean memory.lam?"), for the
validation's messages (memrl.config.validate).
"""

from __future__ import annotations

import difflib
import inspect
import io
import textwrap
import tokenize
from functools import lru_cache
from typing import Any, Mapping, Sequence

from pydantic import BaseModel
from pydantic_core import PydanticUndefined, to_jsonable_python

from memrl.core.fields import EXTENT, NO_EFFECT, RESULT, DATA_LOCATION, _submodel, mark_of

MARK_WORDS = {NO_EFFECT: "no effect on results", EXTENT: "extent: a run may be extended",
              DATA_LOCATION: "where data is read", RESULT: ""}


@lru_cache(maxsize=None)
def _class_comments(cls: type) -> dict[str, str]:
    """Field name -> the comment on its line or the comment block right above it, in `cls`'s
    own source (not its bases')."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    comments: dict[int, str] = {}
    code_lines: set[int] = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                comments[tok.start[0]] = tok.string.lstrip("#").strip()
            elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                                  tokenize.ENDMARKER):
                code_lines.add(tok.start[0])
    except (tokenize.TokenError, IndentationError):
        return {}
    lines = source.splitlines()
    out: dict[str, str] = {}
    for i, line in enumerate(lines, 1):
        stripped = line.strip()
        if line.startswith("    ") and not line.startswith("     ") and ":" in stripped:
            name = stripped.split(":", 1)[0].strip()
            if not name.isidentifier() or name in out:
                continue
            parts = [comments[i]] if i in comments and i in code_lines else []
            above: list[str] = []
            j = i - 1
            while j in comments and j not in code_lines:
                above.insert(0, comments[j])
                j -= 1
            text = " ".join(x for x in above + parts if x and not x.startswith("---"))
            if text:
                out[name] = text
    return out


def field_notes(schema: type[BaseModel]) -> dict[str, str]:
    """Field name -> what it means: its `description`, else its comments in the schema class
    (or the base class that declares it)."""
    out: dict[str, str] = {}
    for name, info in schema.model_fields.items():
        if info.description:
            out[name] = " ".join(info.description.split())
            continue
        for cls in schema.__mro__:
            if name in getattr(cls, "__annotations__", {}):
                note = _class_comments(cls).get(name)
                if note:
                    out[name] = note
                    break
    return out


def _default(info: Any) -> Any:
    if info.is_required():
        return PydanticUndefined
    return to_jsonable_python(info.get_default(call_default_factory=True))


def _fmt(v: Any) -> str:
    import json

    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return v if v and v.strip() == v and not any(c in v for c in ":#{}[],\n") else json.dumps(v)
    return json.dumps(v, ensure_ascii=False)


def describe_section(schema: type[BaseModel], values: Mapping[str, Any], indent: int = 2,
                     width: int = 40) -> list[str]:
    """One line per key of `values` (a validated section): `key: value`, then after `#` its
    default when the value differs, its mark and its meaning; a nested schema indented below."""
    notes = field_notes(schema)
    lines: list[str] = []
    pad = " " * indent
    for name, info in schema.model_fields.items():
        if name not in values:
            continue
        value = values[name]
        sub = _submodel(info.annotation)
        mark = MARK_WORDS.get(mark_of(info), "")
        if sub is not None and isinstance(value, Mapping):
            head = f"{pad}{name}:"
            extra = "; ".join(x for x in (mark, notes.get(name, "")) if x)
            lines.append(f"{head:<{width}} # {extra}" if extra else head)
            lines += describe_section(sub, value, indent + 2, width)
            continue
        default = _default(info)
        parts = []
        if default is PydanticUndefined:
            parts.append("required (no default)")
        elif to_jsonable_python(value) != default:
            parts.append(f"default {_fmt(default)}")
        parts += [x for x in (mark, notes.get(name, "")) if x]
        head = f"{pad}{name}: {_fmt(value)}"
        lines.append(f"{head:<{width}} # {'; '.join(parts)}" if parts else head)
    return lines


def suggest(key: str, known: Sequence[str]) -> str | None:
    """The known key closest to a mistyped one (`memory.lambda` -> `memory.lam`), if any is close."""
    prefix, _, leaf = key.rpartition(".")
    leaves = [k.rpartition(".")[2] for k in known if k.rpartition(".")[0] == prefix]
    near = difflib.get_close_matches(leaf, leaves, n=1, cutoff=0.6)
    if not near:
        starts = [x for x in leaves if x.startswith(leaf) or leaf.startswith(x)]
        near = starts[:1]
    return f"{prefix}.{near[0]}" if near and prefix else (near[0] if near else None)


def schema_keys(schema: type[BaseModel], prefix: str = "") -> list[str]:
    """Every dotted key of a schema (nested schemas walked)."""
    out: list[str] = []
    for name, info in schema.model_fields.items():
        out.append(prefix + name)
        sub = _submodel(info.annotation)
        if sub is not None:
            out += schema_keys(sub, f"{prefix}{name}.")
    return out
