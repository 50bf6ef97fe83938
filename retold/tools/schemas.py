"""The five memory tools as plain JSON Schema, Draft 2020-12.

Every adapter registers the same contract: ``{"name", "description", "input_schema"}``
per tool. The schemas are data, built fresh on each call so no caller can mutate a shared
copy. No ``$schema`` key is published (some model providers refuse it); validate with
``jsonschema.Draft202012Validator``. ``memory_write``'s ``write_target`` enum is per
session: the handler passes the labels this principal can write, so the model never sees
a target it could not use, and omits the tool when there are none. Every string and list
carries the ``maxLength``/``maxItems`` of the configured ``tools:`` limits, so the model
sees the bounds the handler enforces.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from retold.config import ToolsConfig
from retold.models import ENTITY_KINDS, RECORD_TYPES
from retold.policy.grants import DEFAULT_TARGETS

__all__ = [
    "EVIDENCE_SOURCE_KINDS",
    "REVISE_ACTIONS",
    "REVISE_MERGE_FIELDS",
    "REVISE_RECORD_FIELDS",
    "REVISE_SHAPES",
    "SUPERSEDE_ONLY_FIELDS",
    "TOOL_NAMES",
    "ToolSchema",
    "tool_schema",
    "tool_schemas",
    "validation_schema",
]

ToolSchema = dict[str, Any]
"""One tool as registered with a model: ``name``, ``description`` and ``input_schema``."""

TOOL_NAMES: tuple[str, ...] = (
    "memory_search", "memory_get", "memory_write", "memory_revise", "memory_forget",
)
# The model may claim only these; the host owns system and the extractor
# owns session_summary, so the input enum excludes them.
EVIDENCE_SOURCE_KINDS: tuple[str, ...] = ("user_statement", "tool_result", "agent_inference")
REVISE_ACTIONS: tuple[str, ...] = ("confirm", "supersede", "expire", "restore", "pin", "unpin")
REVISE_RECORD_FIELDS: tuple[str, ...] = (
    "id", "action", "reason", "content", "source_kind", "evidence", "evidence_turn", "valid_from",
    "valid_until",
)
REVISE_MERGE_FIELDS: tuple[str, ...] = ("entity_id", "merge_into", "reason")
SUPERSEDE_ONLY_FIELDS: tuple[str, ...] = (
    "content", "source_kind", "evidence", "evidence_turn", "valid_from", "valid_until",
)
# The ``tools:`` limit on a string property's length, wherever the property appears.
_STRING_LIMITS: dict[str, str] = {
    "content": "max_content_chars", "evidence": "max_evidence_chars", "reason": "max_reason_chars",
    "attribute": "max_attribute_chars", "name": "max_entity_name_chars",
    **dict.fromkeys(("id", "entity_id", "merge_into", "write_target", "since", "until", "as_of", "event_at",
                     "valid_from", "valid_until"), "max_id_chars"),
}
# Array properties: the limit on the number of items (None: fixed in the schema) and, for
# arrays of strings, on each item's length.
_LIST_LIMITS: dict[str, tuple[str | None, str]] = {
    "queries": ("max_queries", "max_query_chars"), "tags": ("max_tags", "max_tag_chars"),
    "entities": ("max_entities", "max_entity_name_chars"), "ids": (None, "max_id_chars"),
}

_SEARCH: ToolSchema = {
    "name": "memory_search",
    "description": (
        "Search long-term memory for facts, past decisions, and procedures relevant to the "
        "current task. Call this before acting on anything that may depend on the user's "
        "preferences, prior decisions, or earlier sessions. Returns nothing when nothing "
        "relevant is stored; treat an empty result as 'no memory', not as an error."
    ),
    # No ``context`` property. The adapter attaches current-turn context itself;
    # letting the model supply it would invite transcript-sized search calls.
    "input_schema": {
        "type": "object",
        "properties": {
            "queries": {
                "type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3,
                "description": "One to three standalone search phrases. Write them as if to a "
                               "colleague: name the subject, not the pronoun.",
            },
            "types": {"type": "array", "items": {"enum": list(RECORD_TYPES)}},
            "entities": {
                "type": "array", "items": {"type": "string"},
                "description": "Names of people, projects, or repos the task is about.",
            },
            "since": {"type": "string", "format": "date-time",
                      "description": "Only memories recorded or that happened at or after this time "
                                     "(when it was said or happened, not when it was true)."},
            "until": {"type": "string", "format": "date-time",
                      "description": "Only memories recorded or that happened at or before this time "
                                     "(when it was said or happened, not when it was true)."},
            "as_of": {"type": "string", "format": "date-time",
                      "description": "Answer as of this time: what was true then, replaced values "
                                     "included, later ones left out. Use it for questions about the "
                                     "past such as 'who was the contact in February?'."},
            "k": {"type": "integer", "minimum": 1, "maximum": 20, "default": 8},
            "include_history": {"type": "boolean", "default": False},
        },
        "required": ["queries"],
        "additionalProperties": False,
    },
}

_GET: ToolSchema = {
    "name": "memory_get",
    "description": (
        "Read full memory records by id: content, source, evidence, status, conflicts, and "
        "superseded lineage. Use it to inspect where a memory came from before trusting it, or "
        "to show a disagreement to the user. Call it only with ids you already know from "
        "memory_search or an earlier tool result; an id that is unknown to you answers "
        "not_found."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "ids": {
                "type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 20,
                "description": "Record ids, full or the short form shown in search results.",
            },
        },
        "required": ["ids"],
        "additionalProperties": False,
    },
}

_ENTITY: dict[str, Any] = {
    "type": "object",
    "properties": {
        "kind": {"enum": list(ENTITY_KINDS)},
        "name": {"type": "string", "description": "The name as it appears in the conversation."},
        "role": {"enum": ["about", "mentions"],
                 "description": "about: the memory is about this entity; mentions: it only names it."},
        "entity_id": {
            "type": "string",
            "description": "Pass this when a previous call returned entity_ambiguous, or when "
                           "memory_get showed you the exact entity.",
        },
    },
    "required": ["kind", "name", "role"],
    "additionalProperties": False,
}

_WRITE: ToolSchema = {
    "name": "memory_write",
    "description": (
        "Save one durable fact, preference, decision, or procedure from this session to "
        "long-term memory. Write one fact per call, and only information that would change a "
        "future action. Quote the supporting words verbatim from this session as evidence; a "
        "user_statement needs the user's own words. Never save secrets such as passwords, API "
        "keys, or tokens. Do not save guesses as facts."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "type": {"enum": list(RECORD_TYPES),
                     "description": "semantic: a current fact or preference; episodic: something "
                                    "that happened or was decided; procedural: how to do something."},
            "content": {"type": "string", "description": "The memory as one standalone sentence."},
            "attribute": {
                "type": "string",
                "description": "Current-fact attribute such as 'timezone'. Required for semantic "
                               "and procedural memories. Any entity prefix is ignored.",
            },
            "write_target": {
                "type": "string", "enum": list(DEFAULT_TARGETS),
                "description": "Optional symbolic destination. The handler creates this enum for "
                               "the current session and omits targets that the principal cannot "
                               "write. Omit this field to use personal memory.",
            },
            "source_kind": {"enum": list(EVIDENCE_SOURCE_KINDS)},
            "evidence": {"type": "string",
                         "description": "Verbatim quote from this session. Required for user_statement."},
            "event_at": {"type": "string", "format": "date-time"},
            "valid_from": {"type": "string", "format": "date-time",
                           "description": "When this value started to hold, if the conversation says "
                                          "(\"since March\"); a value it replaces then ends there."},
            "valid_until": {"type": "string", "format": "date-time",
                            "description": "When this value stops or stopped holding, if the "
                                           "conversation says."},
            "entities": {"type": "array", "items": _ENTITY},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["type", "content"],
        "additionalProperties": False,
    },
}

_REVISE: ToolSchema = {
    "name": "memory_revise",
    "description": (
        "Change a memory you already know by id: confirm a provisional record, expire one that "
        "no longer holds, or supersede it with corrected content (content, source_kind, "
        "evidence, evidence_turn, valid_from and valid_until are valid only with supersede, and "
        "evidence must be a verbatim quote from this session). Superseded and expired records "
        "are history and cannot be revised; a forgotten one can only be restored (action restore) while "
        "memory_get shows it as restorable, and so can one archived for space. pin keeps a "
        "memory the user wants kept from ageing out (unpin undoes it). With {entity_id, "
        "merge_into, reason} instead, it merges two entities of the same kind that name one "
        "person, project, or thing. Every "
        "change is audited with your reason."
    ),
    "input_schema": {
        "type": "object",
        # Every property of both shapes is declared here.
        "properties": {
            "id": {"type": "string", "description": "The record to revise."},
            "action": {"enum": list(REVISE_ACTIONS)},
            "reason": {"type": "string", "description": "Why, in a sentence; kept in the audit log."},
            "content": {"type": "string", "description": "supersede only: the replacing memory."},
            "source_kind": {"enum": list(EVIDENCE_SOURCE_KINDS),
                            "description": "supersede only: the source of the new content."},
            "evidence": {"type": "string",
                         "description": "supersede only: verbatim quote from this session."},
            "evidence_turn": {"type": "integer", "minimum": 1,
                              "description": "supersede only: the turn number the quote is from."},
            "valid_from": {"type": "string", "format": "date-time",
                           "description": "supersede only: when the corrected value started to hold, "
                                          "if the conversation says; the old one then ends there."},
            "valid_until": {"type": "string", "format": "date-time",
                            "description": "supersede only: when the corrected value stopped holding, "
                                           "if the conversation says."},
            "entity_id": {"type": "string", "description": "Entity merge: the entity to merge away."},
            "merge_into": {"type": "string", "description": "Entity merge: the surviving entity."},
        },
        # Providers refuse oneOf/anyOf/allOf at the top level of a tool's input schema, so
        # the published schema requires only what both shapes share; the handler checks
        # the rest with REVISE_SHAPES (see validation_schema).
        "required": ["reason"],
        "additionalProperties": False,
    },
}

# The two shapes of memory_revise: a record change or an entity merge, never both.
REVISE_SHAPES: list[dict[str, Any]] = [
    {
        "required": ["id", "action", "reason"],
        "not": {"anyOf": [{"required": ["entity_id"]}, {"required": ["merge_into"]}]},
    },
    {
        "required": ["entity_id", "merge_into", "reason"],
        "not": {"anyOf": [{"required": [name]} for name in REVISE_RECORD_FIELDS if name != "reason"]},
    },
]

_FORGET: ToolSchema = {
    "name": "memory_forget",
    "description": (
        "Remove a known memory from normal use when the user asks you to forget it. The record "
        "becomes a tombstone that no tool returns and an audit event records your reason. For a "
        "while (memory_get says until when) memory_revise with action restore brings it back; "
        "after that it is erased for good. An administrator can erase it at once with "
        "`retold erase`; tell the user so if they need it gone now."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "id": {"type": "string", "description": "The record to forget."},
            "reason": {"type": "string", "description": "Why, in a sentence; kept in the audit log."},
        },
        "required": ["id", "reason"],
        "additionalProperties": False,
    },
}

_BY_NAME: dict[str, ToolSchema] = {
    s["name"]: s for s in (_SEARCH, _GET, _WRITE, _REVISE, _FORGET)
}


def tool_schema(name: str, write_targets: Sequence[str] | None = None,
                limits: ToolsConfig | None = None) -> ToolSchema:
    """One tool's schema, bounded by ``limits`` (the defaults when None); raises KeyError
    for an unknown name.

    For ``memory_write``, ``write_targets`` replaces the ``write_target`` enum (None keeps
    the full static enum). An empty list still returns the schema; :func:`tool_schemas`
    is where an unwritable session loses the tool.
    """
    # A deep copy: callers (adapters, tests) may edit what they get.
    out = copy.deepcopy(_BY_NAME[name])
    if name == "memory_write" and write_targets is not None:
        out["input_schema"]["properties"]["write_target"]["enum"] = list(write_targets)
    _bound(out["input_schema"], limits or ToolsConfig())
    return out


def _bound(node: dict[str, Any], limits: ToolsConfig) -> None:
    """Stamp the configured ``maxLength``/``maxItems`` on every property of ``node`` that
    has a limit, descending into array items that are objects."""
    for prop_name, prop in node.get("properties", {}).items():
        if prop.get("type") == "string" and prop_name in _STRING_LIMITS:
            prop["maxLength"] = getattr(limits, _STRING_LIMITS[prop_name])
        if prop.get("type") == "array" and prop_name in _LIST_LIMITS:
            count, chars = _LIST_LIMITS[prop_name]
            if count is not None:
                prop["maxItems"] = getattr(limits, count)
            if prop["items"].get("type") == "string":
                prop["items"]["maxLength"] = getattr(limits, chars)
            _bound(prop["items"], limits)


def tool_schemas(principal_targets: list[str] | None, limits: ToolsConfig | None = None) -> list[ToolSchema]:
    """All tool schemas in :data:`TOOL_NAMES` order, with ``memory_write``'s enum set to
    the labels the principal can write, bounded by ``limits`` (the defaults when None).

    ``None`` is the static contract with the full enum (documentation, adapters that
    register before a principal exists). An empty list means nothing is writable, so
    ``memory_write`` is not registered at all.
    """
    out: list[ToolSchema] = []
    for name in TOOL_NAMES:
        if name == "memory_write" and principal_targets is not None and not principal_targets:
            continue
        out.append(tool_schema(name, principal_targets, limits))
    return out


def validation_schema(name: str, limits: ToolsConfig | None = None) -> dict[str, Any]:
    """The input schema the handler checks ``name``'s payloads against: the published one,
    plus for ``memory_revise`` the rule that exactly one of its two shapes applies."""
    schema: dict[str, Any] = tool_schema(name, limits=limits)["input_schema"]
    if name == "memory_revise":
        schema.pop("required")
        schema["oneOf"] = copy.deepcopy(REVISE_SHAPES)
    return schema
