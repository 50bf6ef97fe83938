"""Tool schemas in the providers' formats: every exported tool meets the rules the
Anthropic Messages API and OpenAI function tools enforce, and the strict form round-trips
through the handlers."""

from __future__ import annotations

import json
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from retold.models import Principal
from retold.testing import World
from retold.testing.anthropic_stub import AnthropicStub, tool_use
from retold.testing.openai_stub import reply as reply_text
from retold.testing.openai_stub import serve_openai_stub, tool_call
from retold.tools.export import (
    STRICT_UNSUPPORTED,
    TOOL_NAME,
    anthropic_tools,
    openai_arguments,
    openai_tools,
    result_text,
    strict_schema,
)
from retold.tools.schemas import TOOL_NAMES, tool_schema, tool_schemas, validation_schema
from tests.optional import need

COMBINATORS = {"oneOf", "anyOf", "allOf"}


def _nodes(schema: Any) -> list[dict[str, Any]]:
    """Every mapping inside ``schema``, itself included."""
    if isinstance(schema, dict):
        return [schema, *(n for v in schema.values() for n in _nodes(v))]
    if isinstance(schema, list):
        return [n for v in schema for n in _nodes(v)]
    return []


def _check_top_level(name: str, schema: dict[str, Any]) -> None:
    assert TOOL_NAME.fullmatch(name), name
    assert schema["type"] == "object"
    assert not COMBINATORS & set(schema), name
    Draft202012Validator.check_schema(schema)


def _check_strict(schema: dict[str, Any]) -> None:
    for node in _nodes(schema):
        assert not STRICT_UNSUPPORTED & set(node), sorted(STRICT_UNSUPPORTED & set(node))
        if node.get("type") == "object" or "properties" in node:
            assert node["additionalProperties"] is False
            assert node["required"] == list(node["properties"])


@pytest.mark.parametrize("targets", [None, ["personal"]])
def test_every_anthropic_tool_meets_the_messages_api_rules(targets: list[str] | None) -> None:
    tools = anthropic_tools(tool_schemas(targets))
    assert [t["name"] for t in tools] == list(TOOL_NAMES)
    for tool in tools:
        assert set(tool) == {"name", "description", "input_schema"}
        assert tool["description"].strip()
        _check_top_level(tool["name"], tool["input_schema"])


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_every_openai_strict_tool_meets_the_strict_mode_rules(api: str) -> None:
    for tool in openai_tools(tool_schemas(None), api=api):  # type: ignore[arg-type]
        function = tool["function"] if api == "chat" else tool
        assert tool["type"] == "function" and function["strict"] is True
        _check_top_level(function["name"], function["parameters"])
        _check_strict(function["parameters"])


def test_the_non_strict_openai_form_is_the_published_schema() -> None:
    for tool, published in zip(openai_tools(tool_schemas(None), strict=False), tool_schemas(None),
                               strict=True):
        assert "strict" not in tool["function"]
        assert tool["function"]["parameters"] == published["input_schema"]


def test_strict_form_makes_optional_fields_nullable_and_keeps_required_ones() -> None:
    write = strict_schema(tool_schema("memory_write")["input_schema"])
    props = write["properties"]
    assert props["content"]["type"] == "string"  # required: never null
    assert props["attribute"]["type"] == ["string", "null"]
    assert props["source_kind"]["enum"][-1] is None
    entity = props["entities"]["items"]
    assert entity["properties"]["entity_id"]["type"] == ["string", "null"]
    assert entity["properties"]["kind"]["enum"][-1] is not None  # required inside the entity


def _with_nulls(schema: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """What a strict-mode model sends: every property, null where it has nothing to say."""
    return {name: payload.get(name) for name in schema["properties"]}


@pytest.mark.parametrize("name, payload", [
    ("memory_search", {"queries": ["explanation style"]}),
    ("memory_search", {"queries": ["billing contact"], "as_of": "2026-02-15T00:00:00Z"}),
    ("memory_revise", {"id": "r", "action": "supersede", "reason": "fixed", "content": "c",
                       "valid_from": "2026-03-01T00:00:00Z"}),
    ("memory_get", {"ids": ["abc"]}),
    ("memory_write", {"type": "semantic", "content": "Aditya prefers tea.", "attribute": "drink"}),
    ("memory_revise", {"id": "r", "action": "confirm", "reason": "checked"}),
    ("memory_revise", {"entity_id": "a", "merge_into": "b", "reason": "same person"}),
    ("memory_forget", {"id": "r", "reason": "asked"}),
])
def test_a_strict_call_validates_and_becomes_the_plain_payload(name: str, payload: dict[str, Any]) -> None:
    strict = strict_schema(tool_schema(name)["input_schema"])
    sent = _with_nulls(strict, payload)
    Draft202012Validator(strict).validate(sent)
    plain = openai_arguments(json.dumps(sent))
    assert plain == payload
    Draft202012Validator(validation_schema(name)).validate(plain)


def test_openai_arguments_leave_bad_json_for_the_handler_to_refuse(world: World) -> None:
    assert openai_arguments("{not json") == "{not json"
    answer = world.rt.tools.call("memory_get", world.p, openai_arguments("{not json"))
    assert answer["error"]["code"] == "invalid_input"


def test_strict_openai_calls_round_trip_through_the_tools(world: World) -> None:
    tools = {t["function"]["name"]: t["function"]["parameters"] for t in world.rt.tools.openai_tools(world.p)}
    world.say("user", "Please keep every answer short and technical.")

    def call(name: str, **payload: Any) -> dict[str, Any]:
        arguments = json.dumps(_with_nulls(tools[name], payload))
        return world.rt.tools.call(name, world.p, openai_arguments(arguments))

    written = call("memory_write", type="semantic", content="Aditya prefers short technical answers.",
                   attribute="answer_style", source_kind="user_statement",
                   evidence="keep every answer short and technical",
                   entities=[{"kind": "person", "name": "Aditya", "role": "about"}])
    assert written["outcome"] == "created" and written["status"] == "confirmed"
    found = call("memory_search", queries=["what answer style does Aditya prefer"])
    assert [r["id"] for r in found["results"]] == [written["record_id"]]
    forgotten = call("memory_forget", id=written["record_id"], reason="the user asked")
    assert forgotten["status"] == "deleted"
    mixed = call("memory_revise", id=written["record_id"], action="confirm", reason="x", entity_id="e")
    assert mixed["error"]["code"] == "invalid_input"  # one shape per call, enforced by the handler


def test_result_text_gives_the_rendered_block_for_searches_and_compact_json_otherwise(
    world: World,
) -> None:
    world.say("user", "Please keep every answer short and technical.")
    written = world.rt.tools.call("memory_write", world.p, {
        "type": "semantic", "content": "Aditya prefers short technical answers.",
        "attribute": "answer_style", "source_kind": "user_statement",
        "evidence": "keep every answer short and technical"})
    text = result_text("memory_write", written)
    assert json.loads(text) == {k: v for k, v in written.items() if k != "timings_ms"}
    assert "timings_ms" not in text and ": " not in text
    found = world.rt.tools.call("memory_search", world.p, {"queries": ["answer style"]})
    assert result_text("memory_search", found) == found["rendered"]
    assert "short technical answers" in result_text("memory_search", found)
    refused = world.rt.tools.call("memory_forget", world.p, {"id": "nope", "reason": "x"})
    assert json.loads(result_text("memory_forget", refused))["error"]["code"] == "not_found"


def test_the_real_sdk_sends_the_exported_tools_and_the_api_would_refuse_a_top_level_one_of(
    world: World, anthropic_stub: AnthropicStub
) -> None:
    anthropic = need("anthropic")
    client = anthropic.Anthropic(api_key="test-key", base_url=anthropic_stub.base_url, max_retries=0)
    tools = world.rt.tools.anthropic_tools(world.p)
    anthropic_stub.script(tool_use({"queries": ["answer style"]}))
    reply = client.messages.create(model="claude-test", max_tokens=64, tools=tools,
                                   messages=[{"role": "user", "content": "What do I prefer?"}])
    assert reply.content[0].type == "tool_use"
    assert [t["name"] for t in anthropic_stub.requests[-1]["tools"]] == list(TOOL_NAMES)

    # The schema as it was before export rules existed: one combinator fails the request.
    revise = next(t for t in tools if t["name"] == "memory_revise")
    revise["input_schema"] = {**revise["input_schema"], "oneOf": [{"required": ["id"]}]}
    anthropic_stub.script(tool_use({}))
    with pytest.raises(anthropic.BadRequestError, match="oneOf"):
        client.messages.create(model="claude-test", max_tokens=64, tools=tools,
                               messages=[{"role": "user", "content": "hi"}])


def test_a_principal_without_a_writable_scope_gets_no_write_tool_in_any_format(world: World) -> None:
    stranger = Principal("research-agent", "nobody", "s9", None)
    world.rt.hooks.on_session_start(stranger)
    names = [t["name"] for t in world.rt.tools.anthropic_tools(stranger)]
    assert "memory_write" not in names
    assert [t["function"]["name"] for t in world.rt.tools.openai_tools(stranger)] == names


def test_the_real_openai_sdk_round_trips_strict_tool_calls(world: World) -> None:
    openai = need("openai")
    world.say("user", "Please keep every answer short and technical.")
    tools = world.rt.tools.openai_tools(world.p)
    strict_write = next(t for t in tools if t["function"]["name"] == "memory_write")["function"]
    arguments = _with_nulls(strict_write["parameters"], {
        "type": "semantic", "content": "Aditya prefers short technical answers.",
        "attribute": "answer_style", "source_kind": "user_statement",
        "evidence": "keep every answer short and technical"})
    with serve_openai_stub() as stub:
        client = openai.OpenAI(api_key="test-key", base_url=stub.base_url, max_retries=0)
        stub.script(tool_call("memory_write", arguments))
        reply = client.chat.completions.create(
            model="gpt-test", tools=tools, messages=[{"role": "user", "content": "note my style"}])
        (call,) = reply.choices[0].message.tool_calls
        result = world.rt.tools.call(call.function.name, world.p, openai_arguments(call.function.arguments))
        assert result["outcome"] == "created" and result["status"] == "confirmed"

        # Strict mode with the published (non-strict) schema is what the API refuses.
        unstrict = [{"type": "function", "function": {**t["function"], "strict": True}}
                    for t in world.rt.tools.openai_tools(world.p, strict=False)]
        stub.script(reply_text("x"))
        with pytest.raises(openai.BadRequestError, match="required|additionalProperties|not permitted"):
            client.chat.completions.create(model="gpt-test", tools=unstrict,
                                           messages=[{"role": "user", "content": "hi"}])
