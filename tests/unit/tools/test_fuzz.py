"""Arbitrary JSON into every tool: no exception escapes, no call answers internal_error,
the answer is a JSON-serialisable dict that encodes as UTF-8, and an error changes nothing
in the store. Hostile values are mixed in everywhere: lone surrogates (legal JSON escapes
that are not text), megabyte strings and nesting deeper than any tool's shape."""

from __future__ import annotations

import json
from functools import reduce
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retold.models import ENTITY_KINDS, RECORD_TYPES
from retold.testing import ADITYA, World
from retold.tools.handlers import ToolHandlers
from retold.tools.schemas import TOOL_NAMES, tool_schema
from retold.tools.validation import ERROR_CODES

SETTINGS = settings(max_examples=2000, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

HOSTILE_TEXT = st.sampled_from(["\udfff", "fine \ud800 then", "\udc00" * 3, "x" * 1_000_000,
                                "word " * 200_000, "Aditya \udfff prefers concise answers."])
# Lists or objects nested 9 to 5,000 deep around a string.
DEEP = st.tuples(st.integers(9, 5000), st.booleans()).map(
    lambda shape: reduce(lambda inner, _: {"a": inner} if shape[1] else [inner], range(shape[0]), "x"))
SCALARS = (st.none() | st.booleans() | st.integers()
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30) | HOSTILE_TEXT)
JSON = st.recursive(
    SCALARS | DEEP,
    lambda children: (st.lists(children, max_size=4)
                      | st.dictionaries(st.text(max_size=12), children, max_size=4)),
    max_leaves=12,
)
# Values that get past the schema often enough to reach the handlers' deeper paths.
PLAUSIBLE: list[Any] = [
    "semantic", "episodic", "procedural", "confirm", "expire", "supersede", "user_statement",
    "tool_result", "agent_inference", "system", "personal", "current_project", "explanation_style",
    "Aditya prefers concise technical explanations.", "Keep answers concise and technical.",
    "2026-09-03T12:00:00Z", "2026-09-01", " ", "", 1, 3, 20, 21, 0, True,
    ["concise explanations"], ["a", "b", "c", "d"], ["semantic"], ["Aditya"],
    [{"kind": "person", "name": "Aditya", "role": "about"}],
    [{"kind": "project", "name": "Retold", "role": "mentions"}],
    [{"kind": "person", "name": "Aditya", "role": "about", "entity_id": "ent_x"}],
]
QUOTES = ["Keep answers concise and technical.", "We deploy on Fridays after review.",
          "Aditya prefers concise technical explanations.", "deploy on Fridays", " ", ""]
SEEDS = [("answer_style", QUOTES[0]), ("deploy_day", QUOTES[1]),
         ("editor", "I write all my code in Helix these days."),
         ("timezone", "I am based in Berlin, so use CET for meetings."),
         ("language", "Please reply in English even when I write German."),
         ("review", "Every pull request needs two approvals before merge.")]
SUCCESS_KEY = {
    "memory_search": "results", "memory_get": "records", "memory_write": "record_id",
    "memory_revise": "action", "memory_forget": "tombstone",
}


def _keys(name: str) -> list[str]:
    return list(tool_schema(name)["input_schema"]["properties"])


def _near_valid(name: str, ids: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects with the tool's required keys and mostly well-typed values, so that many
    examples get past validation into authorization, the ingestor and the retriever."""
    some_id = st.sampled_from(ids) | st.text(max_size=12) | HOSTILE_TEXT
    text = st.sampled_from(QUOTES) | st.text(max_size=60) | HOSTILE_TEXT
    when = st.text(max_size=20) | st.sampled_from([
        "2026-09-03T12:00:00Z", "2026-01-01", "2026-09-03T12:00:00+05:30", "0999-01-01T00:00:00Z",
        "9999-12-31T23:59:59-05:00", "soon"])
    mention = st.fixed_dictionaries(
        {"kind": st.sampled_from([*ENTITY_KINDS, "robot"]),
         "name": st.text(max_size=12) | st.sampled_from(["Aditya", "Retold"]),
         "role": st.sampled_from(["about", "mentions"])},
        optional={"entity_id": some_id},
    )
    good: dict[str, st.SearchStrategy[Any]] = {
        "queries": st.lists(text, min_size=1, max_size=3), "types": st.lists(st.sampled_from(RECORD_TYPES)),
        "since": when, "until": when, "k": st.integers(-1, 22), "include_history": st.booleans(),
        "as_of": when, "valid_from": when, "valid_until": when,
        "ids": st.lists(some_id, min_size=1, max_size=4), "type": st.sampled_from(RECORD_TYPES),
        "content": text,
        "attribute": st.sampled_from(["explanation_style", "deploy_day", "", "/"]) | st.text(max_size=12),
        "write_target": st.sampled_from(["personal", "current_project", "user:aditya"]),
        "source_kind": st.sampled_from(["user_statement", "tool_result", "agent_inference", "system"]),
        "evidence": text, "event_at": when, "tags": st.lists(st.text(max_size=8), max_size=3),
        "id": some_id, "action": st.sampled_from(["confirm", "expire", "supersede"]), "reason": text,
        "evidence_turn": st.integers(-1, 4), "entity_id": some_id, "merge_into": some_id,
    }
    good["entities"] = (st.lists(mention, max_size=3) if name == "memory_write"
                        else st.lists(st.text(max_size=12), max_size=3))
    keys = _keys(name)

    def shape(required: list[str]) -> st.SearchStrategy[dict[str, Any]]:
        optional = {k: good[k] | JSON for k in keys if k not in required}
        return st.fixed_dictionaries({k: good[k] for k in required}, optional=optional)

    if name == "memory_revise":
        return shape(["id", "action", "reason"]) | shape(["entity_id", "merge_into", "reason"])
    return shape([k for k in keys if k in tool_schema(name)["input_schema"].get("required", [])])


def payloads(name: str, ids: list[str]) -> st.SearchStrategy[Any]:
    """Arbitrary JSON, objects built from the tool's real keys with arbitrary values, and
    near-valid objects."""
    values = (JSON | st.sampled_from(PLAUSIBLE) | st.sampled_from(ids)
              | st.lists(st.sampled_from(ids), max_size=3))
    keys = _keys(name)
    return (JSON | st.dictionaries(st.sampled_from(keys), values, min_size=1, max_size=len(keys))
            | _near_valid(name, ids))


def _seed(world: World) -> list[str]:
    """A few records and entities so ids in payloads can name real rows."""
    tools = ToolHandlers(world.rt)
    ids: list[str] = []
    for attribute, text in SEEDS:
        world.say("user", text)
        written = tools.call("memory_write", world.p, {
            "type": "semantic", "content": text, "attribute": attribute,
            "source_kind": "user_statement", "evidence": text,
            "entities": [{"kind": "project", "name": "Retold", "role": "mentions"}]})
        ids.append(written["record_id"])
    ids += [ids[0].replace("-", "")[-8:], "ent_missing", "missing"]
    ids += [e.id for e in world.rt.store.entities_by_alias("retold", scopes=[ADITYA])]
    ids += [e.id for e in world.rt.store.entities_by_alias("aditya", scopes=[ADITYA])]
    return ids


def _check(world: World, handlers: ToolHandlers, name: str, payload: Any) -> None:
    before = world.counts()
    result = handlers.call(name, world.p, payload)
    assert isinstance(result, dict)
    json.dumps(result, ensure_ascii=False).encode("utf-8")
    if "error" in result:
        code = result["error"]["code"]
        assert code in ERROR_CODES and code != "internal_error", result
        assert world.counts() == before, (payload, result)
    else:
        assert SUCCESS_KEY[name] in result, result
        if name == "memory_get":
            for entry in result["records"]:
                assert "error" not in entry or entry["error"]["code"] == "not_found"


@pytest.mark.slow
@pytest.mark.parametrize("name", TOOL_NAMES)
def test_arbitrary_payloads_never_raise_and_errors_change_nothing(world: World, name: str) -> None:
    handlers = ToolHandlers(world.rt)
    ids = _seed(world)

    @SETTINGS
    @given(payload=payloads(name, ids))
    def run(payload: Any) -> None:
        _check(world, handlers, name, payload)

    run()
