"""Values as plain JSON data: configs, search-log flags and command output, whatever the types inside."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from retold.clock import to_iso

__all__ = ["to_plain"]


def to_plain(value: Any) -> Any:
    """``value`` as plain JSON data: dataclasses as dicts of their fields, datetimes as
    store text, tuples as lists, numpy scalars as Python numbers.

    A dataclass that defines its own ``__str__`` is a value with a canonical text form
    (a Scope is ``user:aditya``) and becomes that text.
    """
    kind: Any = type(value)
    if kind in _PLAIN_SCALARS:
        return value
    names = _dataclass_fields(kind)
    if names is not None:
        if kind.__str__ is not object.__str__:
            return str(value)
        return {name: to_plain(getattr(value, name)) for name in names}
    if isinstance(value, datetime):
        return to_iso(value)
    if isinstance(value, Mapping):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_plain(v) for v in value]
    if kind.__module__ == "numpy" and hasattr(value, "item"):
        return value.item()  # a numpy scalar score is not JSON
    return value


# Returned as they are; checked first because most leaves of a tool result are these.
_PLAIN_SCALARS = frozenset({str, int, float, bool, type(None)})


@functools.lru_cache(maxsize=256)
def _dataclass_fields(kind: Any) -> tuple[str, ...] | None:
    """The field names of a dataclass type, None for any other type; asked per value, so
    remembered per type (a search result converts hundreds of values)."""
    if not dataclasses.is_dataclass(kind):
        return None
    return tuple(f.name for f in dataclasses.fields(kind))
