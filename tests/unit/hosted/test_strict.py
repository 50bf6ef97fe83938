"""strict_form: which answer schemas go to OpenAI-compatible servers in strict mode."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from retold.hosted.strict import strict_form
from retold.ingest.extractor import EXTRACTION_SCHEMA
from retold.ingest.reviewer import REVIEW_SCHEMA
from retold.retrieve.rewrite import REWRITE_SCHEMA
from retold.testing.openai_stub import refused_request


def obj(properties: dict[str, Any], required: list[str], **more: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required,
            "additionalProperties": False, **more}


def as_response_format(schema: dict[str, Any]) -> dict[str, Any]:
    return {"model": "m", "messages": [], "response_format": {
        "type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}}}


def test_extraction_and_rewrite_answers_go_strict_and_the_api_accepts_them() -> None:
    for schema in (EXTRACTION_SCHEMA, REWRITE_SCHEMA):
        before = copy.deepcopy(schema)
        strict = strict_form(schema)
        assert strict is not None
        assert refused_request(as_response_format(strict)) is None
        assert schema == before  # the schema every answer is validated against is untouched


def test_the_review_answer_goes_as_a_tool_because_a_revision_is_an_open_object() -> None:
    assert strict_form(REVIEW_SCHEMA) is None
    assert refused_request(as_response_format(REVIEW_SCHEMA)) is not None  # what strict mode would say


def test_checks_strict_mode_refuses_are_left_out_and_nullable_optionals_become_required() -> None:
    schema = obj({"name": {"type": "string", "minLength": 1, "maxLength": 9},
                  "note": {"type": ["string", "null"], "default": None}}, ["name"])

    assert strict_form(schema) == obj({"name": {"type": "string"}, "note": {"type": ["string", "null"]}},
                                      ["name", "note"])


@pytest.mark.parametrize("schema", [
    obj({"name": {"type": "string"}}, []),  # optional and never null: no strict equivalent
    {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},  # open
    obj({"tags": {"type": "array", "items": {"type": "object"}}}, ["tags"]),  # a free-form object
    obj({"n": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}, ["n"]),
    obj({"n": {"$ref": "#/$defs/n"}}, ["n"]),
    obj({"when": {"type": "string", "format": "iso-week"}}, ["when"]),
    obj({"n": {"type": "integer"}}, ["n"], patternProperties={"^x": {}}),
    {"type": "array", "items": {"type": "string"}},
], ids=["optional", "open", "free-form", "any-of", "ref", "unknown-format", "pattern-properties", "array"])
def test_a_schema_strict_mode_cannot_express_goes_as_a_tool(schema: dict[str, Any]) -> None:
    assert strict_form(schema) is None
