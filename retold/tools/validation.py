"""Tool input checks and the typed requests built from valid input.

Every payload is first screened for what no schema check should have to walk (nesting
deeper than any tool's shape, more values than any call needs, text that is not valid
Unicode), then checked against its tool's published JSON Schema (Draft 2020-12, bounded
by the configured ``tools:`` limits) before a handler sees it, then against the rules a
schema cannot state well: blank text, dates, and the supersede-only fields of
``memory_revise``. None of these checks looks at a stored record or entity, so each may
run before authorization without describing a target. A failed check is a
:class:`ToolError` whose message names the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from functools import cache
from typing import Any, cast

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from retold.clock import from_iso, to_iso
from retold.config import ToolsConfig
from retold.ingest.ingestor import WriteRequest
from retold.models import EntityMention, SearchRequest
from retold.tools.schemas import (
    REVISE_RECORD_FIELDS,
    SUPERSEDE_ONLY_FIELDS,
    TOOL_NAMES,
    validation_schema,
)

__all__ = [
    "ERROR_CODES",
    "ToolError",
    "parse_time",
    "search_request",
    "validate_payload",
    "write_request",
]

# Every ``error.code`` a tool answers with.
ERROR_CODES: frozenset[str] = frozenset({
    "invalid_input", "not_found", "scope_not_writable", "invalid_write_target",
    "entity_ambiguous", "invalid_source_kind", "invalid_subject", "store_unavailable",
    "model_unavailable", "internal_error", "secret_detected",
})
# The deepest valid input (memory_write's entities[i].name) is three levels down, and no
# valid call holds more than a few dozen values; these bound the work of refusing one.
_MAX_DEPTH = 8
_MAX_VALUES = 1000
_MAX_KEY_CHARS = 64  # no tool has a field name anywhere near this long
# The host and the extractor own these kinds; naming one is the
# invalid_source_kind outcome rather than a malformed payload.
_RESERVED_SOURCES = ("system", "session_summary")
# Fields whose whitespace-only value would create or record nothing.
_NOT_BLANK: dict[str, tuple[str, ...]] = {
    "memory_write": ("content", "evidence"),
    "memory_revise": ("content", "evidence", "reason"),
    "memory_forget": ("reason",),
}
_TIME_FIELDS = ("since", "until", "as_of", "event_at", "valid_from", "valid_until")
_TYPE_NAMES = {"string": "a string", "integer": "an integer", "boolean": "a boolean",
               "array": "an array", "object": "an object", "number": "a number"}


class ToolError(Exception):
    """A structured tool error: data for the model, never a trace; nothing was changed."""

    def __init__(self, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code, self.message, self.details = code, message, details

    def as_result(self) -> dict[str, Any]:
        """``{"error": {"code", "message"}}`` plus any details (``candidates``) beside it."""
        return {"error": {"code": self.code, "message": self.message, **self.details}}


@cache
def _validator(tool: str, limits: ToolsConfig) -> Draft202012Validator:
    schema = validation_schema(tool, limits)
    # The published write_target enum is per session; the check accepts any label so that
    # an unoffered one reaches the ingestor and answers invalid_write_target.
    props = schema.get("properties", {})
    if "write_target" in props:
        props["write_target"] = {k: v for k, v in props["write_target"].items() if k != "enum"}
    return Draft202012Validator(schema)


def _field(error: ValidationError) -> str:
    path = ""
    for part in error.absolute_path:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _fields(names: list[str]) -> str:
    return ("field " if len(names) == 1 else "fields ") + ", ".join(repr(n) for n in names)


def _describe(tool: str, error: ValidationError) -> ToolError:
    """One readable message naming the field, from a jsonschema error."""
    name, rule, value = _field(error), error.validator, error.validator_value
    instance = error.instance
    if not name and rule == "type":
        return ToolError("invalid_input", f"{tool} input must be a JSON object, got {_json_type(instance)}")
    if rule == "additionalProperties" and isinstance(instance, Mapping):
        allowed = set(cast(Mapping[str, Any], error.schema.get("properties", {})))
        unknown = sorted(str(k) for k in instance if k not in allowed)
        where = f" in {name}" if name else ""
        return ToolError("invalid_input", f"unknown {_fields(unknown)}{where}")
    if rule == "required" and isinstance(instance, Mapping):
        missing = [str(r) for r in value if r not in instance]
        where = f" in {name}" if name else ""
        return ToolError("invalid_input", f"missing required {_fields(missing)}{where}")
    if rule == "oneOf":
        return _revise_shape(instance)
    if rule == "enum":
        if name.endswith("source_kind") and instance in _RESERVED_SOURCES:
            return ToolError("invalid_source_kind",
                             f"source_kind {instance!r} is reserved for the host and the extractor; "
                             "use user_statement, tool_result or agent_inference")
        return ToolError("invalid_input", f"{name} must be one of {', '.join(map(str, value))}")
    if rule == "type":
        want = _TYPE_NAMES.get(str(value), str(value))
        return ToolError("invalid_input", f"{name} must be {want}, got {_json_type(instance)}")
    if rule in ("minimum", "maximum"):
        bounds = {k: error.schema[k] for k in ("minimum", "maximum") if k in error.schema}
        if len(bounds) == 2:
            return ToolError("invalid_input",
                             f"{name} must be between {bounds['minimum']} and {bounds['maximum']}")
        side = "at least" if rule == "minimum" else "at most"
        return ToolError("invalid_input", f"{name} must be {side} {value}")
    if rule in ("minItems", "maxItems"):
        low, high = error.schema.get("minItems", 0), error.schema.get("maxItems")
        span = (f"at least {low}" if high is None else f"at most {high}" if not low
                else f"{low} to {high}")
        return ToolError("invalid_input", f"{name} must have {span} items")
    if rule == "maxLength":
        return ToolError("invalid_input", f"{name} must be at most {value} characters")
    return ToolError("invalid_input", f"{name or tool + ' input'} is invalid: {error.message}")


def _revise_shape(payload: object) -> ToolError:
    """The oneOf of memory_revise failed: say which shape was meant and what it lacks."""
    assert isinstance(payload, Mapping)
    keys = set(payload)
    merge = bool(keys & {"entity_id", "merge_into"})
    if merge:
        mixed = sorted(str(k) for k in keys & (set(REVISE_RECORD_FIELDS) - {"reason"}))
        if mixed:
            return ToolError("invalid_input", f"{_fields(mixed)} cannot be combined with an "
                             "entity merge (entity_id, merge_into, reason)")
        need = ("entity_id", "merge_into", "reason")
    else:
        need = ("id", "action", "reason")
    missing = [k for k in need if k not in keys]
    return ToolError("invalid_input", f"missing required {_fields(missing)}"
                     " (memory_revise takes {id, action, reason} or {entity_id, merge_into, reason})")


def _rank(error: ValidationError) -> tuple[int, int, str]:
    # Report the most basic problem first: shape of the whole input, then missing and
    # unknown fields, then field values in path order, then the revise shape choice.
    order = {"type": 0, "required": 1, "additionalProperties": 2}
    top = 0 if not error.absolute_path else 1
    base = order.get(str(error.validator), 3) if top == 0 else 3
    if error.validator == "oneOf":
        base = 4
    return (base, len(error.absolute_path), _field(error))


def _text(where: str, text: str) -> None:
    # A lone surrogate is a legal JSON escape but no UTF-8 text: it could be neither
    # stored nor sent on, so it is refused here rather than failing deep inside.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError("invalid_input", f"{where} is not valid Unicode text (a lone surrogate "
                        f"{text[exc.start]!r} at character {exc.start})") from None


def _screen(payload: object) -> None:
    """Refuse nesting deeper than any tool's shape, more values than any call needs, and
    text that is not valid Unicode, before the schema check walks (and quotes) the input.
    Iterative, so no depth of nesting can exhaust the stack."""
    pending: list[tuple[object, str, int]] = [(payload, "input", 0)]
    for _ in range(_MAX_VALUES + 1):
        if not pending:
            return
        value, where, depth = pending.pop()
        if isinstance(value, str):
            _text(where, value)
            continue
        if not isinstance(value, Mapping | list | tuple):
            continue
        if depth == _MAX_DEPTH:
            raise ToolError("invalid_input", f"{where} is nested more than {_MAX_DEPTH} levels deep")
        if len(value) + len(pending) > _MAX_VALUES:
            break
        prefix = "" if where == "input" else where
        if isinstance(value, Mapping):
            for key, item in value.items():
                name = str(key)
                _text(f"a field name in {where}", name)
                if len(name) > _MAX_KEY_CHARS:
                    raise ToolError("invalid_input", f"unknown field {name[:20]!r}... in {where}: no "
                                    f"field name is longer than {_MAX_KEY_CHARS} characters")
                pending.append((item, f"{prefix}.{name}" if prefix else name, depth + 1))
        else:
            pending.extend((item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value))
    raise ToolError("invalid_input", f"input holds more than {_MAX_VALUES} values")


def validate_payload(tool: str, payload: object, limits: ToolsConfig | None = None) -> None:
    """Raise ToolError when ``payload`` is not valid input for ``tool`` under ``limits``
    (the configured ``tools:`` block; the defaults when None)."""
    if not isinstance(tool, str) or tool not in TOOL_NAMES:
        shown = tool[:64] if isinstance(tool, str) else tool
        raise ToolError("invalid_input", f"unknown tool {shown!r}; the tools are {', '.join(TOOL_NAMES)}")
    _screen(payload)
    errors = sorted(_validator(tool, limits or ToolsConfig()).iter_errors(payload), key=_rank)
    if errors:
        raise _describe(tool, errors[0])
    assert isinstance(payload, dict)
    for name in _NOT_BLANK.get(tool, ()):
        value = payload.get(name)
        if isinstance(value, str) and not value.strip():
            raise ToolError("invalid_input", f"{name} must not be blank")
    for i, query in enumerate(payload.get("queries", []) if tool == "memory_search" else []):
        if not query.strip():
            raise ToolError("invalid_input", f"queries[{i}] must not be blank")
    for name in _TIME_FIELDS:
        if name in payload:
            parse_time(name, payload[name])
    if (tool == "memory_search" and "since" in payload and "until" in payload
            and parse_time("since", payload["since"]) > parse_time("until", payload["until"])):
        raise ToolError("invalid_input", "since must not be later than until")
    if "valid_from" in payload and "valid_until" in payload and (
            parse_time("valid_from", payload["valid_from"])
            > parse_time("valid_until", payload["valid_until"])):
        raise ToolError("invalid_input", "valid_from must not be later than valid_until")
    if tool == "memory_revise" and "action" in payload:
        _check_revise_fields(payload)


def _check_revise_fields(payload: Mapping[str, Any]) -> None:
    # content, source_kind, evidence and evidence_turn are valid only with supersede, and
    # supersede requires content. Payload-only, so safe before authorization.
    if payload["action"] == "supersede":
        if "content" not in payload:
            raise ToolError("invalid_input", "content is required with action supersede")
        return
    extra = [name for name in SUPERSEDE_ONLY_FIELDS if name in payload]
    if extra:
        raise ToolError("invalid_input",
                        f"{', '.join(extra)} {'is' if len(extra) == 1 else 'are'} valid only with "
                        f"action supersede, not {payload['action']}")


def parse_time(name: str, value: object) -> datetime:
    """An ISO 8601 date-time as an aware UTC datetime; a value without an offset is UTC.

    Years outside 1000-9999 are refused: the store compares fixed-width timestamp text
    (``retold.clock.to_iso``), which only four-digit years keep in order.
    """
    problem = ToolError("invalid_input", f"{name} must be an ISO 8601 date-time such as 2026-09-03T12:00:00Z")
    if not isinstance(value, str):
        raise problem
    try:
        moment = from_iso(value.strip())
        to_iso(moment)
    except (ValueError, OverflowError):
        raise problem from None
    if not 1000 <= moment.year <= 9999:
        raise problem
    return moment


def search_request(payload: Mapping[str, Any], context: str | None = None) -> SearchRequest:
    """The SearchRequest for a validated memory_search payload; the adapter supplies
    ``context``, never the model, so a search call cannot carry a transcript."""
    since = payload.get("since")
    until = payload.get("until")
    as_of = payload.get("as_of")
    k = payload.get("k")
    return SearchRequest(
        queries=[q.strip() for q in payload["queries"]],
        context=context,
        types=list(payload["types"]) if "types" in payload else None,
        entities=list(payload["entities"]) if "entities" in payload else None,
        since=parse_time("since", since) if since is not None else None,
        until=parse_time("until", until) if until is not None else None,
        k=int(k) if k is not None else None,  # JSON Schema counts 3.0 as an integer
        include_history=bool(payload.get("include_history", False)),
        as_of=parse_time("as_of", as_of) if as_of is not None else None,
        trigger="tool",
    )


def write_request(payload: Mapping[str, Any]) -> WriteRequest:
    """The WriteRequest for a validated memory_write payload. ``write_target`` stays a
    symbolic label; the ingestor resolves it against this session's offer."""
    event_at = payload.get("event_at")
    valid_from = payload.get("valid_from")
    valid_until = payload.get("valid_until")
    return WriteRequest(
        type=payload["type"],
        content=payload["content"],
        attribute=payload.get("attribute"),
        target=payload.get("write_target"),
        source_kind=payload.get("source_kind", "agent_inference"),
        evidence=payload.get("evidence"),
        event_at=parse_time("event_at", event_at) if event_at is not None else None,
        valid_from=parse_time("valid_from", valid_from) if valid_from is not None else None,
        valid_until=parse_time("valid_until", valid_until) if valid_until is not None else None,
        entities=tuple(
            EntityMention(kind=e["kind"], text=e["name"], role=e["role"], entity_id=e.get("entity_id"))
            for e in payload.get("entities", [])
        ),
        tags=tuple(payload.get("tags", [])),
    )
