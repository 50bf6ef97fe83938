"""Plain data (YAML, overrides) checked and coerced into the frozen config dataclasses.

Every problem is collected with its dotted key, so one load reports all of them; a value
is checked against its field's type hint and, for numbers, a range chosen by key pattern.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
from collections.abc import Mapping
from fnmatch import fnmatchcase
from functools import cache
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

__all__ = ["Invalid", "build_block"]

# (dotted-key pattern, (low, high, low is exclusive)); first match wins. A key with no match
# falls back on its type: an int must be >= 1 (counts, k, ms, ttl, batch sizes) and a
# float > 0. Listed: the [0, 1] scales, and the keys where 0 is meaningful.
_UNIT = (0.0, 1.0, False)
_NON_NEGATIVE = (0.0, math.inf, False)
_ANY = (-math.inf, math.inf, False)
_RANGES: tuple[tuple[str, tuple[float, float, bool]], ...] = (
    ("*cosine", _UNIT),
    ("*floor", _UNIT),  # entail/contradict floors, freshness, reranker
    ("*fraction*", _UNIT),  # 0 = no tail cut
    ("*share", _UNIT),  # a share of rows: 0 = any
    ("retrieval.gate.answer_at.*", _UNIT),  # 0 = always answer
    ("retrieval.gate.weights.*", _ANY),  # fitted: a signal may count against answering
    ("retrieval.gate.bias", _ANY),
    ("retrieval.fusion.beyond_names", _UNIT),  # a share: 0 = the plain cosine alone
    ("retrieval.fusion.*", _NON_NEGATIVE),  # 0 = the channel has no say in the order
    ("store.busy_timeout_seconds", _NON_NEGATIVE),  # 0 = fail at once on a held lock
    ("embedding.query_cache_entries", _NON_NEGATIVE),  # 0 = every query is encoded afresh
    ("retrieval.link_sources", _NON_NEGATIVE),  # 0 = no link hop
    ("policy.source_rank.*", _NON_NEGATIVE),
    ("ingestion.evidence.min_*", _NON_NEGATIVE),  # 0 = no minimum
    ("retrieval.trigger.host_min_query_chars", _NON_NEGATIVE),  # 0 = never skip a turn
    ("hosted.max_retries", _NON_NEGATIVE),  # 0 = one attempt only
    ("metrics.port", (1.0, 65535.0, False)),
    # Backoff doubles per attempt, so twenty attempts already wait for about a year.
    ("ingestion.extraction_max_attempts", (1.0, 20.0, False)),
    ("tools.max_queries", (1.0, 3.0, False)),  # the search tool offers one to three queries
    # Generous ceilings that still keep a refused call cheap and a stored row small.
    ("tools.max_*_chars", (1.0, 100_000.0, False)),
    ("tools.max_*", (1.0, 100.0, False)),
    ("activation.profile_max_tokens", (1.0, 8000.0, False)),  # a profile is a prefix, not a document
    ("ui.page_size", (1.0, 500.0, False)),
)
# Accepted Python types per scalar hint; bool is excluded from the numbers because it is
# an int subclass and `dims: true` is a mistake, not 1. An int is fine for a float.
_SCALARS: dict[type, tuple[tuple[type, ...], str]] = {
    bool: ((bool,), "true or false"),
    int: ((int,), "an integer"),
    float: ((int, float), "a number"),
    str: ((str,), "a string"),
}


class Invalid(Exception):
    """A value failed validation; a non-empty message is the error to record."""


def _check_range(key: str, hint: type, value: float) -> None:
    if not math.isfinite(value):
        raise Invalid(f"{key}: must be a finite number, got {value!r}")
    default = (1.0, math.inf, False) if hint is int else (0.0, math.inf, True)
    low, high, exclusive = next((r for p, r in _RANGES if fnmatchcase(key, p)), default)
    if high != math.inf and not low <= value <= high:
        raise Invalid(f"{key}: must be between {low:g} and {high:g}, got {value!r}")
    if value < low or (exclusive and value == low):
        bound = "greater than" if exclusive else "at least"
        raise Invalid(f"{key}: must be {bound} {low:g}, got {value!r}")


@cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def _describe(value: object) -> str:
    return f"{type(value).__name__} ({value!r})"


def build_block(cls: type, data: object, key: str, errors: list[str]) -> Any:
    """Build dataclass ``cls`` from ``data``, appending every error found under ``key``.

    Raises ``Invalid("")`` when anything inside was wrong (the messages are in ``errors``).
    """
    if data is None:
        data = {}  # a YAML block whose keys are all commented out means "all defaults"
    if not isinstance(data, Mapping):
        raise Invalid(f"{key}: expected a mapping (a block of keys), got {_describe(data)}")
    before = len(errors)
    names = [f.name for f in dataclasses.fields(cls)]
    for name in data:
        if name not in names:
            near = difflib.get_close_matches(str(name), names, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            errors.append(f"{_join(key, str(name))}: unknown key{hint}")
    values: dict[str, object] = {}
    hints = _hints(cls)
    for name in (n for n in names if n in data):
        try:
            values[name] = _coerce(hints[name], data[name], _join(key, name), errors)
        except Invalid as bad:
            if str(bad):
                errors.append(str(bad))
    if len(errors) > before:
        raise Invalid("")
    return cls(**values)


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _coerce(hint: Any, value: object, key: str, errors: list[str]) -> object:
    """Check ``value`` against type ``hint`` and return its typed form, or raise Invalid."""
    origin = get_origin(hint)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return build_block(hint, value, key, errors)
    if origin in (Union, types.UnionType):  # only ever `X | None` here
        if value is None:
            return None
        (inner,) = [a for a in get_args(hint) if a is not type(None)]
        return _coerce(inner, value, key, errors)
    if origin is Literal:
        if isinstance(value, str) and value in get_args(hint):
            return value
        choices = ", ".join(repr(a) for a in get_args(hint))
        raise Invalid(f"{key}: must be one of {choices}, got {value!r}")
    if origin is tuple:  # YAML lists become tuples so the config stays frozen
        if not isinstance(value, list | tuple):
            raise Invalid(f"{key}: expected a list, got {_describe(value)}")
        item_hint = get_args(hint)[0]
        return tuple(_coerce(item_hint, v, f"{key}[{i}]", errors) for i, v in enumerate(value))
    accepted, wanted = _SCALARS[hint]
    if not isinstance(value, accepted) or (hint is not bool and isinstance(value, bool)):
        quote = " (quote it in YAML)" if hint is str and isinstance(value, int | float) else ""
        raise Invalid(f"{key}: expected {wanted}, got {_describe(value)}{quote}")
    if hint is int or hint is float:
        assert isinstance(value, int | float)
        _check_range(key, hint, value)
        return hint(value)
    return value
