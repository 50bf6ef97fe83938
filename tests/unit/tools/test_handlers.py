"""The tool surface and the tools' result shapes, on a real store."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from typing import Any

import pytest

from retold.clock import new_id
from retold.models import Principal, Scope
from retold.testing import AGENT, World
from retold.tools.handlers import ToolHandlers
from tests.sql import rows

CONCISE = "Aditya prefers concise technical explanations."
DETAILED = "Aditya prefers detailed architecture explanations."
ACME = Scope("project", "acme")
PLANNER = "planner-agent"


def tools(world: World) -> ToolHandlers:
    return ToolHandlers(world.rt)


def user_fact(world: World, content: str = CONCISE, attribute: str = "explanation_style",
              **extra: Any) -> dict[str, Any]:
    """A user statement backed by a fresh user turn, written through memory_write."""
    world.say("user", content)
    result = tools(world).call("memory_write", world.p, {
        "type": "semantic", "content": content, "attribute": attribute,
        "source_kind": "user_statement", "evidence": content, **extra,
    })
    assert result.get("outcome") == "created", result
    return result


def swap(result: dict[str, Any], record_id: str) -> str:
    return json.dumps(result, sort_keys=True).replace(record_id, "<ID>")


def vera_record(world: World) -> tuple[Principal, str]:
    """A record in user:vera, which the test principal (user aditya) cannot read."""
    world.rt.host.grant(AGENT, Scope("user", "vera"), read=True, write=True)
    world.rt.host.provision_user("vera")
    vera = Principal(AGENT, "vera", "sv", None)
    world.rt.hooks.on_session_start(vera)
    secret = "Vera keeps her recovery codes in the blue notebook."
    vera = world.rt.hooks.on_turn(vera, "user", secret)
    written = tools(world).call("memory_write", vera, {
        "type": "semantic", "content": secret, "attribute": "recovery_codes",
        "source_kind": "user_statement", "evidence": secret,
    })
    assert written["outcome"] == "created"
    return vera, written["record_id"]


def acme_record(world: World) -> tuple[Principal, str]:
    """A project:acme record written by another agent; the test agent gets read only."""
    world.rt.host.grant(PLANNER, ACME, read=True, write=True)
    planner = Principal(PLANNER, "aditya", "sp", "acme")
    world.rt.hooks.on_session_start(planner)
    written = tools(world).call("memory_write", planner, {
        "type": "semantic", "content": "Acme deploys on Fridays.", "attribute": "deploy_day",
        "write_target": "current_project",
        "entities": [{"kind": "project", "name": "Acme", "role": "about"}],
    })
    assert written["outcome"] == "created", written
    world.share(ACME)  # read only, and the test user is a member
    return planner, written["record_id"]


# -- tool surface ---------------------------------------------------------------------------


def test_foreign_scope_id_answers_exactly_like_an_id_that_never_existed(world: World) -> None:
    _, foreign = vera_record(world)
    missing = new_id()
    handlers = tools(world)
    before = world.counts()
    calls: list[tuple[str, dict[str, Any]]] = [
        ("memory_get", {"ids": ["<ID>"]}),
        ("memory_forget", {"id": "<ID>", "reason": "user asked"}),
        ("memory_revise", {"id": "<ID>", "action": "confirm", "reason": "checked"}),
        ("memory_revise", {"id": "<ID>", "action": "expire", "reason": "stale"}),
        ("memory_revise", {"id": "<ID>", "action": "supersede", "reason": "fix",
                           "content": "Vera keeps nothing anywhere."}),
    ]
    for name, template in calls:
        def payload(record_id: str, template: dict[str, Any] = template) -> Any:
            return json.loads(json.dumps(template).replace("<ID>", record_id))

        foreign_answer = handlers.call(name, world.p, payload(foreign))
        missing_answer = handlers.call(name, world.p, payload(missing))
        assert swap(foreign_answer, foreign) == swap(missing_answer, missing), name
        assert "not_found" in json.dumps(foreign_answer)
        assert "recovery" not in json.dumps(foreign_answer).lower()
        assert "vera" not in json.dumps(foreign_answer).lower()
    # The short id of the foreign record does not resolve either.
    short = foreign.replace("-", "")[-8:]
    entry = handlers.call("memory_get", world.p, {"ids": [short]})["records"][0]
    assert entry["error"]["code"] == "not_found"
    assert world.counts() == before


def test_foreign_or_unwritable_entities_collapse_into_one_not_found(world: World) -> None:
    vera_record(world)
    acme_record(world)
    store = world.rt.store
    vera_entity = store.entities_by_alias("vera", scopes=[Scope("user", "vera")])[0].id
    acme_entity = store.entities_by_alias("acme", scopes=[ACME])[0].id  # readable, not writable
    own = store.entities_by_alias("aditya", scopes=[Scope("user", "aditya")])[0].id
    handlers = tools(world)
    before = world.counts()
    answers = [
        swap(handlers.call("memory_revise", world.p,
                           {"entity_id": other, "merge_into": own, "reason": "same person"}), other)
        for other in (vera_entity, acme_entity, "ent_" + new_id())
    ]
    assert len(set(answers)) == 1 and '"not_found"' in answers[0]
    reverse = handlers.call("memory_revise", world.p,
                            {"entity_id": own, "merge_into": vera_entity, "reason": "same person"})
    assert reverse["error"]["code"] == "not_found" and "person" not in reverse["error"]["message"]
    assert world.counts() == before


def test_readable_but_unwritable_record_cannot_be_forgotten(world: World) -> None:
    _, record_id = acme_record(world)
    handlers = tools(world)
    assert handlers.call("memory_get", world.p, {"ids": [record_id]})["records"][0]["status"] == "provisional"
    before = world.counts()
    answer = handlers.call("memory_forget", world.p, {"id": record_id, "reason": "user asked"})
    assert answer["error"]["code"] == "scope_not_writable"
    revise = handlers.call("memory_revise", world.p, {"id": record_id, "action": "confirm", "reason": "ok"})
    assert revise["error"]["code"] == "scope_not_writable"
    assert world.counts() == before
    assert world.record(record_id).status == "provisional"


def test_forgotten_record_get_payload_is_a_tombstone_without_content(world: World) -> None:
    record_id = user_fact(world)["record_id"]
    handlers = tools(world)
    forgotten = handlers.call("memory_forget", world.p, {"id": record_id, "reason": "user asked"})
    assert forgotten["status"] == "deleted" and forgotten["tombstone"] is True
    assert "retold erase" in forgotten["note"]
    entry = handlers.call("memory_get", world.p, {"ids": [record_id]})["records"][0]
    assert entry["tombstone"] is True and entry["status"] == "deleted"
    assert entry["content"] is None and entry["evidence"] is None and entry["source_ref"] is None
    assert "concise" not in json.dumps(entry).lower()
    assert [e["kind"] for e in entry["events"]] == ["record.created", "record.activation", "record.forgotten"]
    # Gone from every channel: FTS row removed, vector dead, never returned by search.
    assert rows(world.rt.store, "SELECT count(*) FROM records_fts WHERE record_id = ?", record_id) == [(0,)]
    assert not world.rt.index.live[world.rt.index.pos[record_id]]
    found = handlers.call("memory_search", world.p, {"queries": ["concise technical explanations"],
                                                     "include_history": True})
    assert record_id not in [r["id"] for r in found["results"]]
    event = world.events("record.forgotten")[0]
    assert event["payload"]["reason"] == "user asked" and event["record_id"] == record_id


def _superseded(world: World) -> str:
    record_id: str = user_fact(world)["record_id"]
    world.say("user", DETAILED)
    revised = tools(world).call("memory_revise", world.p, {
        "id": record_id, "action": "supersede", "reason": "user changed their mind",
        "content": DETAILED, "source_kind": "user_statement", "evidence": DETAILED,
    })
    assert revised["status"] == "confirmed", revised
    return record_id


def _expired(world: World) -> str:
    record_id: str = user_fact(world)["record_id"]
    answer = tools(world).call("memory_revise", world.p,
                               {"id": record_id, "action": "expire", "reason": "no longer true"})
    assert answer["status"] == "expired"
    return record_id


def _forgotten(world: World) -> str:
    record_id: str = user_fact(world)["record_id"]
    assert tools(world).call("memory_forget", world.p, {"id": record_id, "reason": "asked"})["tombstone"]
    return record_id


@pytest.mark.parametrize("make", [_superseded, _expired, _forgotten],
                         ids=["superseded", "expired", "forgotten"])
@pytest.mark.parametrize("action", ["confirm", "expire", "supersede"])
def test_history_cannot_be_confirmed_expired_or_superseded(world: World, make: Any, action: str) -> None:
    record_id = make(world)
    quote = "From now on I want bullet point summaries only."
    world.say("user", quote)
    payload: dict[str, Any] = {"id": record_id, "action": action, "reason": "try again"}
    if action == "supersede":
        payload |= {"content": "Aditya prefers bullet point summaries.", "source_kind": "user_statement",
                    "evidence": quote}
    status = world.record(record_id).status
    before = world.counts()
    answer = tools(world).call("memory_revise", world.p, payload)
    assert answer["error"]["code"] == "invalid_input"
    assert "history" in answer["error"]["message"]
    assert world.counts() == before and world.record(record_id).status == status


def test_a_provisional_record_past_its_expiry_is_history_too(world: World) -> None:
    written = tools(world).call("memory_write", world.p, {
        "type": "semantic", "content": CONCISE, "attribute": "explanation_style"})
    world.clock.advance(days=400)
    answer = tools(world).call("memory_revise", world.p,
                               {"id": written["record_id"], "action": "confirm", "reason": "late"})
    assert answer["error"]["code"] == "invalid_input" and "history" in answer["error"]["message"]


def test_confirm_clears_a_provisional_expiry(world: World) -> None:
    written = tools(world).call("memory_write", world.p, {
        "type": "semantic", "content": CONCISE, "attribute": "explanation_style"})
    assert written["status"] == "provisional" and written["note"] == "evidence not provided"
    assert world.record(written["record_id"]).expires_at is not None
    answer = tools(world).call("memory_revise", world.p, {
        "id": written["record_id"], "action": "confirm", "reason": "the user confirmed it"})
    assert answer == {"id": written["record_id"], "action": "confirm", "status": "confirmed",
                      "previous_status": "provisional", "event_id": answer["event_id"]}
    record = world.record(written["record_id"])
    assert record.status == "confirmed" and record.expires_at is None
    event = world.events("record.confirmed")[0]
    assert event["payload"]["reason"] == "the user confirmed it" and event["id"] == answer["event_id"]


def test_unevidenced_inference_cannot_supersede_a_user_statement_but_a_session_quote_can(
    world: World,
) -> None:
    old_id = user_fact(world, entities=[
        {"kind": "person", "name": "Aditya", "role": "about"},
        {"kind": "project", "name": "Retold", "role": "mentions"},
    ], tags=["style"])["record_id"]
    old_links = world.rt.store.record_links(old_id)
    assert sorted(role for _, role in old_links) == ["about", "mentions"]
    handlers = tools(world)
    call = {"id": old_id, "action": "supersede", "reason": "the user now wants detail",
            "content": DETAILED, "source_kind": "user_statement"}
    before = world.counts()
    for attempt in (call, {**call, "source_kind": "agent_inference"}):
        refused = handlers.call("memory_revise", world.p, attempt)
        assert refused["error"]["code"] == "invalid_input"
        assert "agent_inference cannot supersede user_statement" in refused["error"]["message"]
    assert world.counts() == before and world.record(old_id).status == "confirmed"

    world.say("user", "Actually, I want detailed architecture explanations from now on.")
    landed = handlers.call("memory_revise", world.p,
                           {**call, "evidence": "I want detailed architecture explanations"})
    assert landed["outcome"] == f"superseded:{old_id}" and landed["status"] == "confirmed"
    old, new = world.record(old_id), world.record(landed["record_id"])
    assert old.status == "superseded"
    assert new.supersedes_id == old_id and new.version == old.version + 1
    assert new.source_kind == "user_statement" and new.source_ref == "session:s1<turn:2>"
    assert (new.subject, new.attribute, new.tags) == (old.subject, old.attribute, old.tags)
    assert new.scope == old.scope
    assert world.rt.store.record_links(new.id) == old_links
    event = world.rt.store.events(record_id=new.id, kind="record.created")[-1]
    assert event["payload"]["manual_revision"] is True
    assert event["payload"]["reason"] == "the user now wants detail"
    assert event["payload"]["entailment"] == 1.0 and event["payload"]["evidence_note"] is None
    assert world.rt.index.vector_for(new.id) is not None
    found = handlers.call("memory_search", world.p, {"queries": ["architecture explanations"]})
    assert [r["id"] for r in found["results"]] == [new.id]


@pytest.mark.parametrize("payload", [None, [], "memory", 3, 2.5, True, [{"queries": ["x"]}]])
@pytest.mark.parametrize("name", ["memory_search", "memory_get", "memory_write", "memory_revise",
                                  "memory_forget"])
def test_a_payload_that_is_not_a_json_object_is_invalid_input(world: World, name: str, payload: Any) -> None:
    before = world.counts()
    answer = tools(world).call(name, world.p, payload)
    assert answer["error"]["code"] == "invalid_input"
    assert "must be a JSON object" in answer["error"]["message"]
    assert world.counts() == before


@pytest.mark.parametrize("field,value", [("content", ""), ("content", "  \n\t"), ("evidence", " ")])
def test_blank_content_or_evidence_is_invalid_input(world: World, field: str, value: str) -> None:
    record_id = user_fact(world)["record_id"]
    before = world.counts()
    write = {"type": "semantic", "content": DETAILED, "attribute": "explanation_style", field: value}
    revise = {"id": record_id, "action": "supersede", "reason": "fix", "content": DETAILED, field: value}
    for name, payload in (("memory_write", write), ("memory_revise", revise)):
        answer = tools(world).call(name, world.p, payload)
        assert answer["error"] == {"code": "invalid_input", "message": f"{field} must not be blank"}
    assert world.counts() == before


def test_memory_get_omits_entity_links_the_caller_cannot_read(world: World) -> None:
    world.rt.host.grant(AGENT, ACME, read=True, write=True)
    writer = Principal(AGENT, "aditya", "s1", "acme")
    written = tools(world).call("memory_write", writer, {
        "type": "semantic", "content": "Acme's release owner is Aditya.", "attribute": "release_owner",
        "write_target": "current_project",
        "entities": [{"kind": "project", "name": "Acme", "role": "about"},
                     {"kind": "person", "name": "Aditya", "role": "mentions"}],
    })
    assert written["outcome"] == "created", written
    person = world.rt.store.entities_by_alias("aditya", scopes=[Scope("user", "aditya")])[0].id
    assert person in dict(world.rt.store.record_links(written["record_id"]))
    # Another agent reads the project but not the user's scope.
    world.rt.host.grant("reader-agent", ACME, read=True, write=False)
    reader = Principal("reader-agent", "aditya", "sr", "acme")
    entry = tools(world).call("memory_get", reader, {"ids": [written["record_id"]]})["records"][0]
    links = [(e["kind"], e["canonical"], e["role"]) for e in entry["entities"]]
    assert links == [("project", "Acme", "about")]
    assert person not in json.dumps(entry)
    own = tools(world).call("memory_get", writer, {"ids": [written["record_id"]]})["records"][0]
    assert sorted(e["role"] for e in own["entities"]) == ["about", "mentions"]
    found = tools(world).call("memory_search", reader, {"queries": ["Acme release owner"]})
    assert found["results"] and person not in json.dumps(found["results"])


# -- results and errors ---------------------------------------------------------------------


def test_search_result_carries_the_public_keys(world: World) -> None:
    record_id = user_fact(world)["record_id"]
    found = tools(world).call("memory_search", world.p, {"queries": ["concise technical explanations"]})
    assert {"search_id", "results", "empty_reason", "timings_ms", "rendered", "rewrite_status"} <= set(found)
    hit = found["results"][0]
    assert {"id", "content", "type", "status", "source_kind", "scope", "event_at", "score",
            "explanation"} <= set(hit)
    assert hit["id"] == record_id and hit["scope"] == "user:aditya"
    assert hit["event_at"].startswith("2026-09-03T12:00:00")
    assert hit["explanation"]["matched_by"] and isinstance(hit["explanation"]["created_at"], str)
    assert hit["short_id"] in found["rendered"]
    json.dumps(found)
    assert world.rt.flush_search_log()
    row = world.rt.store.search_log_row(found["search_id"])
    assert row is not None and row["trigger"] == "tool"
    empty = tools(world).call("memory_search", world.p, {"queries": ["kubernetes ingress timeouts"]})
    assert empty["results"] == [] and empty["empty_reason"] and "no memory found" in empty["rendered"]


def test_search_context_comes_from_the_adapter_only(world: World) -> None:
    answer = tools(world).call("memory_search", world.p, {"queries": ["style"], "context": "x"})
    assert answer["error"] == {"code": "invalid_input", "message": "unknown field 'context'"}
    ok = tools(world).call("memory_search", world.p, {"queries": ["style"]}, context="user: hi")
    assert "results" in ok


def test_search_time_window_and_k_are_checked(world: World) -> None:
    handlers = tools(world)
    for payload, field in (({"queries": ["a"], "k": 0}, "k"), ({"queries": ["a"], "k": 21}, "k"),
                           ({"queries": ["a"], "since": "last week"}, "since"),
                           ({"queries": ["a", "b", "c", "d"]}, "queries"),
                           ({"queries": [" "]}, "queries[0]")):
        answer = handlers.call("memory_search", world.p, payload)
        assert answer["error"]["code"] == "invalid_input"
        assert answer["error"]["message"].startswith(field), answer
    window = handlers.call("memory_search", world.p, {
        "queries": ["a"], "since": "2026-09-04T00:00:00Z", "until": "2026-09-01T00:00:00Z"})
    assert window["error"]["message"] == "since must not be later than until"


def test_write_result_carries_the_public_keys(world: World) -> None:
    result = user_fact(world)
    assert set(result) == {"record_id", "status", "outcome", "note", "activation", "activation_reason",
                           "timings_ms"}
    assert result["status"] == "confirmed" and result["timings_ms"]["total"] > 0


def test_write_errors_are_the_lld_outcomes(world: World) -> None:
    handlers = tools(world)
    base = {"type": "semantic", "content": "Prefers tea.", "attribute": "drink"}
    before = world.counts()
    cases = [
        ({**base, "write_target": "current_project"}, "invalid_write_target"),
        ({**base, "write_target": "user:aditya"}, "invalid_write_target"),
        ({**base, "source_kind": "system"}, "invalid_source_kind"),
        ({**base, "source_kind": "session_summary"}, "invalid_source_kind"),
        ({**base, "source_kind": "rumour"}, "invalid_input"),
        ({"type": "semantic", "content": "Prefers tea."}, "invalid_subject"),
        ({**base, "event_at": "tomorrow"}, "invalid_input"),
        ({**base, "content": "x" * 1001}, "invalid_input"),
        ({**base, "entities": [{"kind": "person", "name": "Aditya", "role": "about", "x": 1}]},
         "invalid_input"),
        ({**base, "entities": [{"kind": "person", "name": "A", "role": "about", "entity_id": "ent_nope"}]},
         "not_found"),
    ]
    for payload, code in cases:
        assert handlers.call("memory_write", world.p, payload)["error"]["code"] == code, payload
    assert world.counts() == before


def test_ambiguous_about_entity_returns_its_candidates(world: World) -> None:
    store = world.rt.store
    for _ in range(2):
        entity = store.create_entity("person", "Sam", Scope("user", "aditya"))
        store.add_alias(entity.id, "sam")
    before = world.counts()
    answer = tools(world).call("memory_write", world.p, {
        "type": "semantic", "content": "Sam prefers email.", "attribute": "contact",
        "entities": [{"kind": "person", "name": "Sam", "role": "about"}]})
    assert answer["error"]["code"] == "entity_ambiguous"
    assert len(answer["error"]["candidates"]) == 2
    assert {c["canonical"] for c in answer["error"]["candidates"]} == {"Sam"}
    assert world.counts() == before


def test_supersede_only_fields_are_refused_with_other_actions(world: World) -> None:
    record_id = user_fact(world)["record_id"]
    handlers = tools(world)
    for extra in ({"content": DETAILED}, {"evidence": "x y z"}, {"source_kind": "user_statement"},
                  {"evidence_turn": 1}):
        answer = handlers.call("memory_revise", world.p,
                               {"id": record_id, "action": "confirm", "reason": "ok", **extra})
        assert answer["error"]["code"] == "invalid_input"
        assert "valid only with action supersede" in answer["error"]["message"]
    missing = handlers.call("memory_revise", world.p, {"id": record_id, "action": "supersede", "reason": "x"})
    assert missing["error"]["message"] == "content is required with action supersede"


def test_expire_takes_a_record_out_of_default_search(world: World) -> None:
    record_id = user_fact(world)["record_id"]
    handlers = tools(world)
    answer = handlers.call("memory_revise", world.p,
                           {"id": record_id, "action": "expire", "reason": "moved on"})
    assert answer["status"] == "expired" and answer["previous_status"] == "confirmed"
    query = {"queries": ["concise technical explanations"]}
    assert handlers.call("memory_search", world.p, query)["results"] == []
    history = handlers.call("memory_search", world.p, {**query, "include_history": True})
    assert [r["id"] for r in history["results"]] == [record_id]
    assert world.events("record.expired")[0]["payload"]["reason"] == "moved on"


def test_forgetting_twice_is_invalid_input(world: World) -> None:
    record_id = user_fact(world)["record_id"]
    handlers = tools(world)
    handlers.call("memory_forget", world.p, {"id": record_id, "reason": "asked"})
    before = world.counts()
    again = handlers.call("memory_forget", world.p, {"id": record_id, "reason": "asked"})
    assert again["error"] == {"code": "invalid_input", "message": f"memory {record_id} is already forgotten"}
    assert world.counts() == before


def test_memory_get_shows_lineage_both_ways_and_conflicts(world: World) -> None:
    first = user_fact(world)["record_id"]
    handlers = tools(world)
    world.say("user", "Give me detailed architecture explanations instead.")
    second = handlers.call("memory_revise", world.p, {
        "id": first, "action": "supersede", "reason": "changed", "content": DETAILED,
        "source_kind": "user_statement", "evidence": "Give me detailed architecture explanations"})
    conflict = handlers.call("memory_write", world.p, {
        "type": "semantic", "content": "Aditya prefers short bullet lists.",
        "attribute": "explanation_style"})
    assert conflict["outcome"] == f"conflict:{second['record_id']}"
    ids = [first, second["record_id"], conflict["record_id"]]
    records = handlers.call("memory_get", world.p, {"ids": ids})
    old, new, provisional = records["records"]
    assert old["superseded_by"] == new["id"]
    assert [(e["relation"], e["id"]) for e in old["lineage"]] == [("superseded_by", new["id"])]
    assert [(e["relation"], e["id"]) for e in new["lineage"]] == [("supersedes", first)]
    assert new["supersedes_id"] == first and new["lineage"][0]["content"] == CONCISE
    assert [c["id"] for c in provisional["conflicts"]] == [new["id"]]
    assert [c["id"] for c in new["conflicts"]] == [provisional["id"]]


def test_memory_get_accepts_the_short_id_shown_to_the_model(world: World) -> None:
    record_id = user_fact(world)["record_id"]
    short = record_id.replace("-", "")[-8:]
    entries = tools(world).call("memory_get", world.p, {"ids": [short, "missing"]})["records"]
    assert entries[0]["id"] == record_id and entries[0]["content"] == CONCISE
    assert entries[1] == {"id": "missing",
                          "error": {"code": "not_found", "message": "no memory with id missing"}}


def test_entity_merge_rewrites_records_and_logs_the_reason(world: World) -> None:
    store = world.rt.store
    handlers = tools(world)
    written = handlers.call("memory_write", world.p, {
        "type": "semantic", "content": "Bob prefers calls.", "attribute": "contact",
        "entities": [{"kind": "person", "name": "Bob", "role": "about"}]})
    bob = store.entities_by_alias("bob", scopes=[Scope("user", "aditya")])[0]
    robert = store.create_entity("person", "Robert", Scope("user", "aditya"))
    store.add_alias(robert.id, "robert")
    project = store.create_entity("project", "Retold", Scope("user", "aditya"))
    mismatch = handlers.call("memory_revise", world.p,
                             {"entity_id": bob.id, "merge_into": project.id, "reason": "x"})
    assert mismatch["error"]["code"] == "invalid_input" and "person" in mismatch["error"]["message"]
    merged = handlers.call("memory_revise", world.p,
                           {"entity_id": bob.id, "merge_into": robert.id, "reason": "Bob is Robert"})
    assert merged["status"] == "merged" and merged["records_rewritten"] == [written["record_id"]]
    assert world.record(written["record_id"]).subject_entity_id == robert.id
    assert world.rt.store.events(kind="entity.merged")[0]["payload"]["reason"] == "Bob is Robert"
    again = handlers.call("memory_revise", world.p,
                          {"entity_id": bob.id, "merge_into": robert.id, "reason": "again"})
    assert again["error"]["code"] == "invalid_input"


def test_unknown_tool_is_invalid_input(world: World) -> None:
    answer = tools(world).call("memory_erase", world.p, {"id": "x"})
    assert answer["error"]["code"] == "invalid_input" and "memory_erase" in answer["error"]["message"]


def test_an_unexpected_failure_is_internal_error_and_changes_nothing(
    world: World, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    record_id = user_fact(world)["record_id"]
    world.say("user", "Actually I want detailed architecture explanations.")

    def broken(*_args: object, **_kwargs: object) -> int:
        raise RuntimeError("disk on fire")

    # Fault injection inside the supersede transaction: every earlier row must roll back.
    monkeypatch.setattr(world.rt.store, "write_record", broken)
    before = world.counts()
    with caplog.at_level(logging.ERROR, logger="retold.tools.handlers"):
        answer = tools(world).call("memory_revise", world.p, {
            "id": record_id, "action": "supersede", "reason": "x", "content": DETAILED,
            "source_kind": "user_statement", "evidence": "I want detailed architecture explanations"})
    assert answer["error"]["code"] == "internal_error"
    assert "disk on fire" not in json.dumps(answer) and "Traceback" not in json.dumps(answer)
    assert "disk on fire" in caplog.text
    assert world.counts() == before and world.record(record_id).status == "confirmed"


def test_revision_timestamps_follow_the_record_type(world: World) -> None:
    world.say("user", "We decided to ship the beta on Friday.")
    episode = tools(world).call("memory_write", world.p, {
        "type": "episodic", "content": "We decided to ship the beta on Friday.",
        "source_kind": "user_statement", "evidence": "We decided to ship the beta on Friday.",
        "event_at": "2026-09-01T09:00:00Z"})
    world.clock.advance(timedelta(days=2))
    world.say("user", "Correction: we decided to ship the beta on Monday.")
    revised = tools(world).call("memory_revise", world.p, {
        "id": episode["record_id"], "action": "supersede", "reason": "correction",
        "content": "We decided to ship the beta on Monday.", "source_kind": "user_statement",
        "evidence": "we decided to ship the beta on Monday"})
    new = world.record(revised["record_id"])
    assert new.event_at == world.record(episode["record_id"]).event_at  # the same event
    assert new.created_at == world.clock.now()


def test_a_forgotten_predecessor_shows_in_lineage_as_a_tombstone(world: World) -> None:
    old_id = _superseded(world)
    handlers = tools(world)
    assert handlers.call("memory_forget", world.p, {"id": old_id, "reason": "drop the old one"})["tombstone"]
    new = world.rt.store.find_records(supersedes_id=old_id)[0]
    entry = handlers.call("memory_get", world.p, {"ids": [new.id]})["records"][0]
    assert entry["lineage"] == [{
        "relation": "supersedes", "id": old_id, "short_id": old_id.replace("-", "")[-8:],
        "status": "deleted", "type": "semantic", "created_at": entry["lineage"][0]["created_at"],
        "event_at": entry["lineage"][0]["event_at"], "tombstone": True, "content": None,
    }]
    assert "concise" not in json.dumps(entry).lower()


def test_host_issued_search_uses_the_same_result_shape(world: World) -> None:
    from retold.models import SearchRequest

    record_id = user_fact(world)["record_id"]
    answer = tools(world).search(world.p, SearchRequest(
        queries=["concise technical explanations"], context="user: how should you answer?",
        trigger="host"))
    assert [r["id"] for r in answer["results"]] == [record_id]
    assert world.rt.flush_search_log()
    row = world.rt.store.search_log_row(answer["search_id"])
    assert row is not None and row["trigger"] == "host"


def test_a_search_by_an_agent_without_a_grant_says_so_instead_of_looking_empty(world: World) -> None:
    user_fact(world)
    stranger = Principal("nobody", "aditya", "s9", None)
    found = tools(world).call("memory_search", stranger, {"queries": ["concise technical explanations"]})
    assert found["results"] == [] and "agent 'nobody' holds no grant" in found["empty_reason"]
    assert "retold grant nobody user:aditya" in found["rendered"]
    other_user = Principal(world.p.agent_id, "bob", "s8", None)
    found = tools(world).call("memory_search", other_user, {"queries": ["kubernetes ingress timeouts"]})
    assert f"no grant of agent '{world.p.agent_id}' covers user 'bob'" in found["empty_reason"]
    # a granted agent's empty search names no grant problem
    empty = tools(world).call("memory_search", world.p, {"queries": ["kubernetes ingress timeouts"]})
    assert "grant" not in empty["empty_reason"]
