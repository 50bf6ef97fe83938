"""The published tool contract: valid Draft 2020-12, per-session write targets."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from jsonschema import Draft202012Validator

from retold.models import Principal, Scope
from retold.testing import AGENT, World
from retold.tools.handlers import ToolHandlers
from retold.tools.schemas import REVISE_SHAPES, TOOL_NAMES, tool_schema, tool_schemas, validation_schema

EXAMPLES: dict[str, dict[str, Any]] = {
    "memory_search": {"queries": ["Aditya explanation style"], "types": ["semantic"],
                      "entities": ["Aditya"], "since": "2026-01-01T00:00:00Z", "k": 5,
                      "include_history": False, "as_of": "2026-02-15T00:00:00Z"},
    "memory_get": {"ids": ["01a228cb-071d-7000-a907-4b24ffb194f9"]},
    "memory_write": {"type": "semantic", "content": "Aditya prefers concise answers.",
                     "attribute": "answer_style", "write_target": "personal",
                     "source_kind": "user_statement", "evidence": "Keep answers concise.",
                     "event_at": "2026-09-03T12:00:00Z",
                     "entities": [{"kind": "person", "name": "Aditya", "role": "about"}],
                     "tags": ["style"]},
    "memory_revise": {"id": "01a228cb-071d-7000-a907-4b24ffb194f9", "action": "supersede",
                      "reason": "the user corrected it", "content": "Aditya prefers detailed answers.",
                      "source_kind": "user_statement", "evidence": "Actually, give me detail.",
                      "evidence_turn": 3, "valid_from": "2026-09-01T00:00:00Z"},
    "memory_forget": {"id": "01a228cb-071d-7000-a907-4b24ffb194f9", "reason": "the user asked"},
}


def _walk(schema: Any) -> list[dict[str, Any]]:
    """Every object schema inside ``schema`` (including itself)."""
    found: list[dict[str, Any]] = []
    if isinstance(schema, dict):
        if schema.get("type") == "object":
            found.append(schema)
        for value in schema.values():
            found += _walk(value)
    elif isinstance(schema, list):
        for value in schema:
            found += _walk(value)
    return found


def test_tool_names_are_the_five_tools_in_lld_order() -> None:
    assert TOOL_NAMES == ("memory_search", "memory_get", "memory_write", "memory_revise", "memory_forget")
    assert [t["name"] for t in tool_schemas(None)] == list(TOOL_NAMES)


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_every_schema_is_valid_draft_2020_12_and_accepts_its_example(name: str) -> None:
    tool = tool_schema(name)
    assert set(tool) == {"name", "description", "input_schema"}
    Draft202012Validator.check_schema(tool["input_schema"])
    Draft202012Validator(tool["input_schema"]).validate(EXAMPLES[name])


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_every_object_schema_forbids_unknown_fields(name: str) -> None:
    objects = _walk(tool_schema(name)["input_schema"])
    assert objects
    assert all(obj.get("additionalProperties") is False for obj in objects)
    with pytest.raises(jsonschema.ValidationError):
        Draft202012Validator(tool_schema(name)["input_schema"]).validate({**EXAMPLES[name], "extra": 1})


def test_memory_search_has_no_context_property() -> None:
    schema = tool_schema("memory_search")["input_schema"]
    assert "context" not in schema["properties"]
    assert schema["required"] == ["queries"]
    assert schema["properties"]["k"] == {"type": "integer", "minimum": 1, "maximum": 20, "default": 8}


def test_search_times_say_what_they_filter_on() -> None:
    props = tool_schema("memory_search")["input_schema"]["properties"]
    for name in ("since", "until", "as_of"):
        assert props[name]["type"] == "string" and props[name]["format"] == "date-time"
        assert props[name]["maxLength"] == 100
    # since/until filter on when a memory was recorded or happened; as_of on when it held.
    assert "not when it was true" in props["since"]["description"]
    assert "not when it was true" in props["until"]["description"]
    assert "what was true then" in props["as_of"]["description"]


def test_every_key_required_by_a_memory_revise_branch_is_declared_at_the_top_level() -> None:
    schema = tool_schema("memory_revise")["input_schema"]
    declared = set(schema["properties"])
    assert len(REVISE_SHAPES) == 2
    for branch in REVISE_SHAPES:
        assert set(branch["required"]) <= declared
    assert {"id", "action", "reason", "content", "source_kind", "evidence", "evidence_turn",
            "valid_from", "valid_until", "entity_id", "merge_into"} == declared


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_no_published_schema_combines_schemas_at_its_top_level(name: str) -> None:
    # Both big providers refuse the whole request when one tool's input schema does.
    schema = tool_schema(name)["input_schema"]
    assert schema["type"] == "object"
    assert not {"oneOf", "anyOf", "allOf"} & set(schema)


def test_memory_revise_branches_select_exactly_one_shape() -> None:
    validator = Draft202012Validator(validation_schema("memory_revise"))
    assert validator.is_valid({"id": "r", "action": "confirm", "reason": "ok"})
    assert validator.is_valid({"entity_id": "a", "merge_into": "b", "reason": "same person"})
    assert not validator.is_valid({"id": "r", "action": "confirm", "reason": "ok", "entity_id": "a"})
    assert not validator.is_valid({"entity_id": "a", "merge_into": "b", "reason": "x", "content": "c"})
    assert not validator.is_valid({"reason": "only a reason"})


def test_write_descriptions_carry_the_rules_the_model_must_follow() -> None:
    write = tool_schema("memory_write")
    assert "one fact per call" in write["description"]
    assert "future action" in write["description"]
    assert "verbatim" in write["description"].lower()
    assert write["input_schema"]["properties"]["source_kind"]["enum"] == [
        "user_statement", "tool_result", "agent_inference"]
    assert write["input_schema"]["properties"]["content"]["maxLength"] == 1000
    forget = tool_schema("memory_forget")["description"]
    assert "action restore" in forget and "retold erase" in forget


def test_static_schema_offers_the_full_target_enum_and_a_list_narrows_it() -> None:
    def enum(tools: list[dict[str, Any]]) -> list[str]:
        write = next(t for t in tools if t["name"] == "memory_write")
        return list(write["input_schema"]["properties"]["write_target"]["enum"])

    assert enum(tool_schemas(None)) == ["personal", "current_project"]
    assert enum(tool_schemas(["personal"])) == ["personal"]
    assert "memory_write" not in [t["name"] for t in tool_schemas([])]


def test_schemas_are_fresh_copies() -> None:
    first = tool_schemas(None)
    first[0]["input_schema"]["properties"].clear()
    assert tool_schemas(None)[0]["input_schema"]["properties"]


def _targets(handlers: ToolHandlers, principal: Principal) -> list[str] | None:
    for tool in handlers.schemas(principal):
        if tool["name"] == "memory_write":
            return list(tool["input_schema"]["properties"]["write_target"]["enum"])
    return None


def test_session_schema_enum_follows_the_current_write_grants(world: World) -> None:
    handlers = ToolHandlers(world.rt)
    with_project = Principal(AGENT, "aditya", "s1", "acme")
    assert _targets(handlers, world.p) == ["personal"]
    assert _targets(handlers, with_project) == ["personal"]  # no grant on the project yet
    world.rt.host.grant(AGENT, Scope("project", "acme"), read=True, write=True)
    assert _targets(handlers, with_project) == ["personal", "current_project"]
    world.rt.host.grant(AGENT, Scope("project", "acme"), read=True, write=False)
    assert _targets(handlers, with_project) == ["personal"]


def test_memory_write_is_not_registered_without_a_writable_target(world: World) -> None:
    handlers = ToolHandlers(world.rt)
    world.rt.host.grant(AGENT, Scope("user", "aditya"), read=True, write=False)
    names = [t["name"] for t in handlers.schemas(world.p)]
    assert names == ["memory_search", "memory_get", "memory_revise", "memory_forget"]
