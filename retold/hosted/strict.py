"""strict_form: whether an answer schema can go to OpenAI-compatible servers in strict mode.

Strict mode (a ``json_schema`` response format with ``strict: true``) makes the server
constrain its output to the schema, so a strict answer cannot come back malformed in
shape. It accepts only a subset of JSON Schema: every object closed, with every property
required, and a short list of keywords. A schema inside that subset is sent strict, and
so is one whose only optional properties already accept null (they become required: the
answer says null where it would have left them out). Any other schema goes as a forced
tool call instead, since rewriting it (making an optional property nullable, closing an
open object) would change which answers are right. Either way the answer is validated
against the original schema afterwards.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["strict_form"]

# Value checks strict mode refuses: left out of the schema sent, which changes no answer's
# shape, and still enforced by the validation every answer gets.
_DROPPED = frozenset({"minLength", "maxLength", "default"})
# Everything else strict mode accepts on a schema node.
_ACCEPTED = frozenset({
    "type", "properties", "required", "additionalProperties", "items", "enum", "const",
    "description", "title", "format", "pattern", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "multipleOf", "minItems", "maxItems",
})
_FORMATS = frozenset({"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"})


class _NotStrict(Exception):
    """The schema needs more than strict mode offers."""


def strict_form(schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """``schema`` as strict mode accepts it, or None when it is outside strict mode's subset
    (an open object, an optional property that refuses null, a combinator, a reference, an
    unknown format, or a top level that is not an object)."""
    if schema.get("type") != "object":
        return None
    try:
        return _node(schema)
    except _NotStrict:
        return None


def _node(node: object) -> dict[str, Any]:
    if not isinstance(node, Mapping) or not set(node) <= _ACCEPTED | _DROPPED:
        raise _NotStrict
    if "format" in node and node["format"] not in _FORMATS:
        raise _NotStrict
    out = {key: value for key, value in node.items() if key not in _DROPPED}
    types = node.get("type")
    if "properties" in node or types == "object" or (isinstance(types, list) and "object" in types):
        properties = node.get("properties")
        if not isinstance(properties, Mapping) or node.get("additionalProperties") is not False:
            raise _NotStrict
        required = set(node.get("required", ()))
        if not all(name in required or _accepts_null(sub) for name, sub in properties.items()):
            raise _NotStrict
        out["properties"] = {name: _node(sub) for name, sub in properties.items()}
        out["required"] = list(properties)
    if "items" in node:
        out["items"] = _node(node["items"])
    return out


def _accepts_null(node: object) -> bool:
    if not isinstance(node, Mapping):
        return False
    types = node.get("type")
    return types == "null" or (isinstance(types, list) and "null" in types)
