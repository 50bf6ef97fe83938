"""How a logged event's details read on a page: one ``key: value`` line per field.

An event's payload is JSON written for machines; shown raw it is one long line of braces
that nobody reads. Nested objects become dotted keys (``timings_ms.embed``), a list of
plain values one comma-separated value, and a list of objects one line per item.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["readable_fields"]


def readable_fields(payload: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """``payload`` as (key, value) lines, in the payload's own order."""
    lines: list[tuple[str, str]] = []
    _add(lines, "", payload or {})
    return lines


def _add(lines: list[tuple[str, str]], prefix: str, value: Any) -> None:
    if isinstance(value, Mapping) and value:
        for key, inner in value.items():
            _add(lines, f"{prefix}.{key}" if prefix else str(key), inner)
    elif isinstance(value, list) and any(isinstance(v, Mapping | list) for v in value):
        for n, item in enumerate(value, start=1):
            lines.append((f"{prefix}[{n}]", _inline(item)))
    elif prefix:
        lines.append((prefix, _inline(value)))


def _inline(value: Any) -> str:
    """One value on one line: objects as ``key: value`` pairs, lists comma-separated."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}: {_inline(v)}" for k, v in value.items()) or "none"
    if isinstance(value, list):
        return ", ".join(_inline(v) for v in value) or "none"
    return str(value)
