"""The tool schemas in each model provider's format, and tool results as model text.

Retold's schemas are plain JSON Schema (:mod:`retold.tools.schemas`). The Anthropic
Messages API takes them as they are; OpenAI function tools wrap them, and OpenAI's
strict mode needs every object to list all its properties in ``required`` and forbid
others, so optional fields become nullable there and :func:`openai_arguments` drops the
nulls the model sends before the call reaches the handler. Neither provider accepts
``oneOf``/``anyOf``/``allOf`` at the top level of an input schema, and none is published.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from retold.tools.schemas import ToolSchema

__all__ = [
    "STRICT_UNSUPPORTED",
    "TOOL_NAME",
    "anthropic_tools",
    "openai_arguments",
    "openai_tools",
    "result_text",
    "strict_schema",
]

# Both providers: letters, digits, underscore and dash, 1 to 64 characters.
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# Keywords OpenAI's strict mode refuses (or that have no meaning once nulls are allowed);
# the checks they carried still run in the handler.
STRICT_UNSUPPORTED: frozenset[str] = frozenset({
    "default", "minLength", "maxLength", "oneOf", "anyOf", "allOf", "not", "if", "then",
    "else", "patternProperties", "propertyNames", "dependentRequired", "dependentSchemas",
    "unevaluatedProperties", "$ref", "$defs",
})


def anthropic_tools(schemas: Iterable[ToolSchema]) -> list[dict[str, Any]]:
    """Tools for the Anthropic Messages API ``tools`` parameter: name, description and
    input_schema, as published."""
    return [{"name": s["name"], "description": s["description"],
             "input_schema": copy.deepcopy(s["input_schema"])} for s in schemas]


def openai_tools(
    schemas: Iterable[ToolSchema], *, strict: bool = True, api: Literal["chat", "responses"] = "chat"
) -> list[dict[str, Any]]:
    """Function tools for OpenAI: the Chat Completions form
    (``{"type": "function", "function": {...}}``) or the flat Responses API form.

    With ``strict`` the parameters are :func:`strict_schema`'s form; pass each call's
    arguments through :func:`openai_arguments` before handing them to the tools.
    """
    out: list[dict[str, Any]] = []
    for s in schemas:
        params = strict_schema(s["input_schema"]) if strict else copy.deepcopy(s["input_schema"])
        function: dict[str, Any] = {"name": s["name"], "description": s["description"],
                                    "parameters": params}
        if strict:
            function["strict"] = True
        out.append({"type": "function", **function} if api == "responses"
                   else {"type": "function", "function": function})
    return out


def strict_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` in OpenAI's strict form: every object lists all its properties as
    required and forbids others; a property that was optional also accepts null."""
    strict: dict[str, Any] = _strict(schema)
    return strict


def _strict(node: Any) -> Any:
    if isinstance(node, list):
        return [_strict(item) for item in node]
    if not isinstance(node, Mapping):
        return node
    out = {key: _strict(value) for key, value in node.items() if key not in STRICT_UNSUPPORTED}
    if out.get("type") == "object" and "properties" in out:
        required = set(node.get("required", ()))
        out["properties"] = {name: prop if name in required else _nullable(prop)
                             for name, prop in out["properties"].items()}
        out["required"] = list(out["properties"])
        out["additionalProperties"] = False
    return out


def _nullable(prop: dict[str, Any]) -> dict[str, Any]:
    prop = dict(prop)
    if "enum" in prop:
        prop["enum"] = [*prop["enum"], None]
        if "type" in prop:
            prop["type"] = _with_null(prop["type"])
    elif "type" in prop:
        prop["type"] = _with_null(prop["type"])
    return prop


def _with_null(kind: str | list[str]) -> list[str]:
    kinds = [kind] if isinstance(kind, str) else list(kind)
    return kinds if "null" in kinds else [*kinds, "null"]


def openai_arguments(arguments: str | Mapping[str, Any]) -> Any:
    """A function call's arguments (the JSON text OpenAI sends, or its parsed form) as a
    tool payload: the nulls strict mode makes the model send for omitted optional fields
    are dropped, at every depth. Text that is not JSON is returned as it is, so the tool
    answers ``invalid_input``."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return arguments
    return _drop_nulls(arguments)


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _drop_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_drop_nulls(item) for item in value]
    return value


def result_text(tool: str, result: Mapping[str, Any]) -> str:
    """The text a tool result goes back to the model as.

    A successful search is its ``rendered`` block: numbered memories with their source,
    status and time, written for the model to read and cite. Every other result, and
    every error, is compact JSON: ids and statuses the model may pass to a later call,
    without the timings, which only cost tokens.
    """
    if tool == "memory_search" and "error" not in result and isinstance(result.get("rendered"), str):
        return str(result["rendered"])
    shown = {key: value for key, value in result.items() if key != "timings_ms"}
    return json.dumps(shown, ensure_ascii=False, separators=(",", ":"), sort_keys=False, default=str)
