"""How a config key bears on results, marked once on its schema field (docs/design.md §8,
"Same command, same directory"): `no_effect`, `extent`, `data_location`, or unmarked (it
changes results). A leaf: schemas everywhere import these marks; what the marks decide
(resume check, report groups, directory names) is derived in memrl.config.keys."""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel, Field
from pydantic_core import PydanticUndefined

MARK = "affects_results"  # the key in a field's json_schema_extra
RESULT = "result"
NO_EFFECT = "no_effect"
EXTENT = "extent"
DATA_LOCATION = "data_location"
_EXTRA = {NO_EFFECT: False, EXTENT: EXTENT, DATA_LOCATION: DATA_LOCATION}



def _marked(mark: str, default: Any, kw: dict[str, Any]) -> Any:
    extra = dict(kw.pop("json_schema_extra", None) or {})
    extra[MARK] = _EXTRA[mark]
    return Field(default, json_schema_extra=extra, **kw)


def no_effect(default: Any = PydanticUndefined, **kw: Any) -> Any:
    """`Field(...)` for a key that never changes results (see the module doc)."""
    return _marked(NO_EFFECT, default, kw)


def extent(default: Any = PydanticUndefined, **kw: Any) -> Any:
    """`Field(...)` for how far a run goes (runner.epochs)."""
    return _marked(EXTENT, default, kw)


def data_location(default: Any = PydanticUndefined, **kw: Any) -> Any:
    """`Field(...)` for where task data is read from (its content is fingerprinted)."""
    return _marked(DATA_LOCATION, default, kw)


def mark_of(field: Any) -> str:
    extra = getattr(field, "json_schema_extra", None)
    if isinstance(extra, dict) and MARK in extra:
        value = extra[MARK]
        for mark, spelled in _EXTRA.items():
            if value == spelled and type(value) is type(spelled):
                return mark
        raise ValueError(f"unknown {MARK} mark {value!r}")
    return RESULT


def _submodel(annotation: Any) -> type[BaseModel] | None:
    """The schema a field nests (`X` or `X | None`), else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    models = [a for a in typing.get_args(annotation)
              if isinstance(a, type) and issubclass(a, BaseModel)]
    return models[0] if len(models) == 1 else None


def schema_marks(model: type[BaseModel], prefix: str = "") -> dict[str, str]:
    """Dotted key -> mark for every field of `model`, nested schemas walked. A nested node
    appears under its own key too when every key below it is no-effect."""
    out: dict[str, str] = {}
    for name, field in model.model_fields.items():
        key = prefix + name
        mark = mark_of(field)
        sub = _submodel(field.annotation)
        if sub is None:
            out[key] = mark
            continue
        inner = schema_marks(sub, key + ".")
        if mark == NO_EFFECT:
            inner = {k: NO_EFFECT for k in inner}
        elif mark != RESULT:
            raise ValueError(f"{key}: a nested schema can be marked no_effect only")
        out.update(inner)
        if inner and all(m == NO_EFFECT for m in inner.values()):
            out[key] = NO_EFFECT
    return out
