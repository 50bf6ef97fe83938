"""Bounded tool input: every string field and list has a configured limit that the
published schema shows and the handler enforces with ``invalid_input`` naming the field
and the limit; text that is not valid Unicode, deep nesting and megabyte strings are
refused quickly and change nothing. A store or model that cannot serve a call answers a
code that says so, not ``internal_error``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from retold import build_runtime
from retold.errors import ModelError
from retold.runtime import Runtime
from retold.testing import FakeEmbedder, World
from retold.tools.handlers import ToolHandlers
from retold.tools.schemas import tool_schema
from tests.conditions import corrupt_page

QUOTE = "Keep answers concise and technical."
WRITE = {"type": "semantic", "content": "Aditya prefers concise answers.", "attribute": "answer_style",
         "source_kind": "user_statement", "evidence": QUOTE}
REVISE = {"id": "01a228cb-071d-7000-a907-4b24ffb194f9", "action": "supersede", "reason": "corrected",
          "content": "Aditya prefers detail."}
# (tool, a valid payload, the field to overfill, the limit's config key, its default)
OVERFILLED: list[tuple[str, dict[str, Any], str, str, int]] = [
    ("memory_search", {"queries": ["style"]}, "queries[0]", "max_query_chars", 500),
    ("memory_search", {"queries": ["style"], "entities": ["Aditya"]}, "entities[0]",
     "max_entity_name_chars", 200),
    ("memory_search", {"queries": ["style"], "since": "2026-01-01"}, "since", "max_id_chars", 100),
    ("memory_get", {"ids": ["abc"]}, "ids[0]", "max_id_chars", 100),
    ("memory_write", WRITE, "content", "max_content_chars", 1000),
    ("memory_write", WRITE, "evidence", "max_evidence_chars", 2000),
    ("memory_write", WRITE, "attribute", "max_attribute_chars", 100),
    ("memory_write", {**WRITE, "tags": ["style"]}, "tags[0]", "max_tag_chars", 64),
    ("memory_write", {**WRITE, "entities": [{"kind": "person", "name": "Aditya", "role": "about"}]},
     "entities[0].name", "max_entity_name_chars", 200),
    ("memory_write", {**WRITE, "write_target": "personal"}, "write_target", "max_id_chars", 100),
    ("memory_revise", REVISE, "reason", "max_reason_chars", 1000),
    ("memory_revise", REVISE, "content", "max_content_chars", 1000),
    ("memory_revise", {"entity_id": "e1", "merge_into": "e2", "reason": "same"}, "merge_into",
     "max_id_chars", 100),
    ("memory_forget", {"id": "r1", "reason": "asked"}, "id", "max_id_chars", 100),
]


def _set(payload: dict[str, Any], field: str, value: Any) -> dict[str, Any]:
    """A deep copy of ``payload`` with ``field`` (``a``, ``a[0]`` or ``a[0].b``) set."""
    out: Any = {key: [dict(v) if isinstance(v, dict) else v for v in val] if isinstance(val, list)
                else val for key, val in payload.items()}
    head, _, rest = field.partition("[")
    if not rest:
        out[head] = value
    elif "." in rest:
        out[head][int(rest.split("]")[0])][rest.split(".")[1]] = value
    else:
        out[head][int(rest[:-1])] = value
    return dict(out)


@pytest.fixture
def tools(world: World) -> ToolHandlers:
    return ToolHandlers(world.rt)


@pytest.mark.parametrize(("tool", "payload", "field", "key", "limit"), OVERFILLED,
                         ids=[f"{t}.{f}" for t, _, f, _, _ in OVERFILLED])
def test_a_string_over_its_limit_is_refused_naming_field_and_limit(
    world: World, tools: ToolHandlers, tool: str, payload: dict[str, Any], field: str, key: str, limit: int,
) -> None:
    before = world.counts()
    result = tools.call(tool, world.p, _set(payload, field, "x" * (limit + 1)))
    assert result["error"] == {"code": "invalid_input",
                               "message": f"{field} must be at most {limit} characters"}
    assert world.counts() == before
    at_limit = tools.call(tool, world.p, _set(payload, field, "x" * limit))
    assert "at most" not in at_limit.get("error", {}).get("message", ""), at_limit


@pytest.mark.parametrize(("tool", "payload", "field", "limit"), [
    ("memory_search", {"queries": ["a", "b", "c", "d"]}, "queries", "1 to 3"),
    ("memory_search", {"queries": ["a"], "entities": ["e"] * 11}, "entities", "at most 10"),
    ("memory_write", {**WRITE, "tags": ["t"] * 11}, "tags", "at most 10"),
    ("memory_write", {**WRITE, "entities": [{"kind": "person", "name": "A", "role": "mentions"}] * 11},
     "entities", "at most 10"),
])
def test_too_many_items_are_refused_naming_field_and_limit(
    world: World, tools: ToolHandlers, tool: str, payload: dict[str, Any], field: str, limit: str,
) -> None:
    result = tools.call(tool, world.p, payload)
    assert result["error"] == {"code": "invalid_input", "message": f"{field} must have {limit} items"}


@pytest.fixture
def strict(world: World) -> Iterator[Runtime]:
    """A second runtime on the world's store with tighter configured limits."""
    config = world.rt.config.replace({"tools": {"max_query_chars": 20, "max_tags": 2}})
    rt = build_runtime(config, clock=world.clock, embedder=world.embedder, judge=world.judge, environ={})
    yield rt
    rt.close()


def test_configured_limits_are_published_and_enforced(world: World, strict: Runtime) -> None:
    search = next(s for s in strict.tools.schemas(world.p) if s["name"] == "memory_search")
    assert search["input_schema"]["properties"]["queries"]["items"]["maxLength"] == 20
    write = next(s for s in strict.tools.schemas(world.p) if s["name"] == "memory_write")
    assert write["input_schema"]["properties"]["tags"]["maxItems"] == 2
    query = {"queries": ["what style does Aditya like"]}
    refused = strict.tools.call("memory_search", world.p, query)
    assert refused["error"]["message"] == "queries[0] must be at most 20 characters"
    assert "results" in world.rt.tools.call("memory_search", world.p, query)


def test_default_schemas_publish_the_default_limits() -> None:
    props = tool_schema("memory_write")["input_schema"]["properties"]
    assert (props["content"]["maxLength"], props["evidence"]["maxLength"], props["tags"]["maxItems"],
            props["entities"]["items"]["properties"]["name"]["maxLength"]) == (1000, 2000, 10, 200)


@pytest.mark.parametrize(("tool", "payload", "where"), [
    ("memory_search", {"queries": ["x\udfff"]}, "queries[0]"),
    ("memory_search", {"queries": ["style"], "entities": ["\ud800Aditya"]}, "entities[0]"),
    ("memory_write", {**WRITE, "evidence": QUOTE + "\udfff"}, "evidence"),
    ("memory_write", {**WRITE, "entities": [{"kind": "person", "name": "A\udc00", "role": "about"}]},
     "entities[0].name"),
    ("memory_revise", {**REVISE, "reason": "\udfff"}, "reason"),
    ("memory_forget", {"id": "r1", "reason": "asked", "\udfff": 1}, "a field name in input"),
])
def test_text_that_is_not_valid_unicode_is_invalid_input(
    world: World, tools: ToolHandlers, tool: str, payload: dict[str, Any], where: str,
) -> None:
    world.say("user", QUOTE)
    before = world.counts()
    result = tools.call(tool, world.p, payload)
    assert result["error"]["code"] == "invalid_input"
    assert result["error"]["message"].startswith(f"{where} is not valid Unicode text")
    result["error"]["message"].encode("utf-8")  # the answer itself is sendable
    assert world.counts() == before


def test_a_megabyte_query_is_refused_within_50_ms(world: World, tools: ToolHandlers) -> None:
    for query in ("a" * 1_000_000, "word " * 200_000):
        started = time.perf_counter()
        result = tools.call("memory_search", world.p, {"queries": [query]})
        elapsed = time.perf_counter() - started
        assert result["error"]["message"] == "queries[0] must be at most 500 characters"
        assert elapsed < 0.05, elapsed


def test_deep_nesting_and_huge_collections_are_refused_without_recursion(
    world: World, tools: ToolHandlers,
) -> None:
    deep: list[Any] = []
    innermost = deep
    for _ in range(100_000):
        innermost.append([])
        innermost = innermost[0]
    nested = tools.call("memory_search", world.p, {"queries": deep})
    assert nested["error"]["code"] == "invalid_input"
    assert nested["error"]["message"].endswith("is nested more than 8 levels deep")
    top = tools.call("memory_forget", world.p, deep)
    assert top["error"]["code"] == "invalid_input"
    huge = tools.call("memory_get", world.p, {"ids": ["x"] * 1_000_000})
    assert huge["error"]["message"] == "input holds more than 1000 values"


# -- a store or a model that cannot serve the call ------------------------------------------------


def test_a_read_only_store_answers_searches_and_refuses_writes_as_store_unavailable(
    world: World, tmp_path: Any,
) -> None:
    config = world.rt.config.replace({"store": {"read_only": True}})
    with build_runtime(config, clock=world.clock, embedder=world.embedder, judge=world.judge,
                       environ={}) as reader:
        assert "results" in reader.tools.call("memory_search", world.p, {"queries": ["answer style"]})
        world.say("user", QUOTE)
        refused = reader.tools.call("memory_write", world.p, WRITE)
    assert refused["error"]["code"] == "store_unavailable"
    assert "read-only" in refused["error"]["message"]
    assert str(tmp_path) not in refused["error"]["message"]  # no server path reaches the model


@pytest.mark.sqlite_only("a damaged page of a store file")
def test_a_damaged_store_answers_store_unavailable_and_changes_nothing(world: World, tmp_path: Any) -> None:
    world.say("user", QUOTE)
    written = world.rt.tools.call("memory_write", world.p, WRITE)
    config, path = world.rt.config, world.rt.store.path
    world.rt.close()
    corrupt_page(path, "records")
    with build_runtime(config, clock=world.clock, embedder=world.embedder, judge=world.judge,
                       environ={}) as damaged:
        got = damaged.tools.call("memory_get", world.p, {"ids": [written["record_id"]]})
        found = damaged.tools.call("memory_search", world.p, {"queries": ["answer style"]})
    for answer in (got, found):
        assert answer["error"]["code"] == "store_unavailable", answer
        assert "damaged" in answer["error"]["message"] and str(tmp_path) not in answer["error"]["message"]


class UnloadableEmbedder(FakeEmbedder):
    """An embedder whose weights fail to load on first use."""

    def _encode(self, texts: list[str]) -> np.ndarray:
        raise ModelError("cannot load embedding model fake: weights file truncated")


def test_a_model_that_fails_to_load_answers_model_unavailable(world: World) -> None:
    with build_runtime(world.rt.config, clock=world.clock, embedder=UnloadableEmbedder(),
                       judge=world.judge, environ={}) as broken:
        result = broken.tools.call("memory_search", world.p, {"queries": ["answer style"]})
    assert result["error"]["code"] == "model_unavailable"
