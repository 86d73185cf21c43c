"""The one serializer of records: frozen dataclasses to plain JSON types and back.

`to_jsonable` is what the results store's `Json` columns and every record's `to_dict` write;
`from_jsonable` rebuilds a dataclass from it by the class's own type hints (nested dataclasses,
`X | None`, `tuple[T, ...]`), so no record spells its fields a second time to be read back.

Usage:
    row = to_jsonable(result)                       # dicts, lists, str, int, float, bool, None
    result = from_jsonable(RequestResult, row)      # keys the class lacks (derived values) are skipped
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["from_jsonable", "to_jsonable"]

T = TypeVar("T")


def to_jsonable(value: Any) -> Any:
    """Dataclasses, tuples, mappings and paths to plain JSON types; NaN and infinities to None.

    Anything else JSON cannot hold is left as it is, so writing it fails (a programming error,
    never stored as its repr)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    return value


def from_jsonable(cls: type[T], data: Mapping[str, Any]) -> T:
    """The dataclass `cls` from `to_jsonable`'s output. Missing keys take the field's default (an
    older record); keys that are not init fields are skipped (derived values stored beside them)."""
    return _build(cls, data)


def _build(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        records = [a for a in options if dataclasses.is_dataclass(a)]
        if records and isinstance(value, Mapping):
            return _build(records[0], value)
        return _build(options[0], value) if len(options) == 1 else value
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_build(args[0], v) for v in value)
        return tuple(_build(a, v) for a, v in zip(args, value, strict=True)) if args else tuple(value)
    if dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        return hint(**{f.name: _build(hints[f.name], value[f.name])
                       for f in dataclasses.fields(hint) if f.init and f.name in value})
    return value
