"""As-of search: what was valid at a time, through the tool, the session and the
retriever, on a real store (both backends); and an ordinary search that windows leave
exactly as it was."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from retold import build_runtime
from retold.models import SearchRequest
from retold.retrieve.explain import short_id
from retold.testing import T0, InProcessScheduler, World
from tests.sql import execute

ACME = [("org", "Acme North", "about")]
DANA = "Billing contact for Acme North is Dana Reyes."
MARCUS = "Billing contact for Acme North is Marcus Chen."
QUESTION = "billing contact for Acme North"
FEBRUARY = "2026-02-15T00:00:00Z"


def _acme(world: World) -> tuple[str, str]:
    """Dana from 10 January (said then), Marcus from 1 March (said later, dated by the
    user); the store's clock is September."""
    said = "The billing contact for Acme North is Dana Reyes."
    world.say("user", said)
    dana = world.write(content=DANA, attribute="billing_contact", source_kind="user_statement",
                       evidence=said, entities=ACME, event_at=datetime(2026, 1, 10, tzinfo=UTC))
    world.judge.table[(DANA, MARCUS)] = "contradicts"
    world.say("user", "Dana left in March; Marcus Chen took over billing for Acme North.")
    marcus = world.write(content=MARCUS, attribute="billing_contact", source_kind="user_statement",
                         evidence="Marcus Chen took over billing for Acme North", entities=ACME,
                         valid_from=datetime(2026, 3, 1, tzinfo=UTC))
    assert marcus.outcome == f"superseded:{dana.record_id}"
    assert dana.record_id is not None and marcus.record_id is not None
    return dana.record_id, marcus.record_id


def _search(world: World, **payload: Any) -> dict[str, Any]:
    return world.rt.tools.call("memory_search", world.p, {"queries": [QUESTION], **payload})


def _contents(result: dict[str, Any]) -> list[str]:
    assert "error" not in result, result
    return [r["content"] for r in result["results"]]


def test_as_of_returns_what_held_then_and_says_its_window(world: World) -> None:
    dana, marcus = _acme(world)
    february = _search(world, as_of=FEBRUARY)
    assert _contents(february) == [DANA]
    (hit,) = february["results"]
    assert hit["status"] == "superseded"
    assert "valid 2026-01-10 to 2026-03-01" in hit["explanation"]["summary"]
    rendered = february["rendered"]
    assert rendered.startswith(f'searched for: "{QUESTION}" as of 2026-02-15')
    assert f"[{short_id(dana)}] semantic · superseded" in rendered
    assert "valid 2026-01-10 to 2026-03-01 (valid at 2026-02-15)" in rendered
    # Right after, on the same retriever: the cached eligible set is one per as_of.
    now = _search(world, as_of=world.clock.now().isoformat())
    assert _contents(now) == [MARCUS]
    assert "valid from 2026-03-01 (valid at 2026-09-03 12:00 UTC)" in now["rendered"]
    assert _contents(_search(world)) == [MARCUS]
    assert _contents(_search(world, as_of="2026-01-01T00:00:00Z")) == []
    # The day the change took effect belongs to the new value.
    assert _contents(_search(world, as_of="2026-03-01T00:00:00Z")) == [MARCUS]
    assert marcus in {r["id"] for r in _search(world, include_history=True)["results"]}


def test_as_of_reaches_the_session_api_and_the_search_log(world: World) -> None:
    _acme(world)
    with world.rt.session(world.p.agent_id, world.p.user_id) as session:
        found = session.search(QUESTION, as_of=FEBRUARY)
    assert _contents(found) == [DANA]
    world.rt.flush_search_log()
    row = world.rt.store.search_log_row(found["search_id"])
    assert row is not None and '"as_of": "2026-02-15T00:00:00.000000Z"' in row["request"]


def test_a_model_dates_the_change_it_writes_through_memory_write(world: World) -> None:
    said = "The billing contact for Acme North is Dana Reyes."
    world.say("user", said)
    dana = world.write(content=DANA, attribute="billing_contact", source_kind="user_statement",
                       evidence=said, entities=ACME, event_at=datetime(2026, 1, 10, tzinfo=UTC))
    world.judge.table[(DANA, MARCUS)] = "contradicts"
    quote = "Marcus Chen took over billing for Acme North in March"
    world.say("user", quote + ".")
    entities = [{"kind": "org", "name": "Acme North", "role": "about"}]
    written = world.rt.tools.call("memory_write", world.p, {
        "type": "semantic", "content": MARCUS, "attribute": "billing_contact",
        "source_kind": "user_statement", "evidence": quote, "entities": entities,
        "valid_from": "2026-03-01T00:00:00Z"})
    assert written.get("outcome") == f"superseded:{dana.record_id}", written
    assert _contents(_search(world, as_of=FEBRUARY)) == [DANA]
    assert _contents(_search(world, as_of="2026-03-02T00:00:00Z")) == [MARCUS]
    before = world.counts()
    backwards = world.rt.tools.call("memory_write", world.p, {
        "type": "semantic", "content": "Acme North pays by card.", "attribute": "payment_method",
        "valid_from": "2026-05-01T00:00:00Z", "valid_until": "2026-04-01T00:00:00Z"})
    assert backwards["error"]["code"] == "invalid_input", backwards
    assert world.counts() == before


def test_a_bad_as_of_is_refused_and_changes_nothing(world: World) -> None:
    _acme(world)
    before = world.counts()
    for value in ("February", "2026-02-30T00:00:00Z", 20260215):
        refused = _search(world, as_of=value)
        assert refused["error"]["code"] == "invalid_input", refused
        assert "as_of" in refused["error"]["message"]
    assert world.counts() == before


def test_a_conflict_shows_both_windows_open(world: World) -> None:
    concise, detailed = "Aditya prefers concise explanations.", "Aditya prefers detailed explanations."
    world.say("user", concise)
    user = world.write(content=concise, attribute="explanation_style", source_kind="user_statement",
                       evidence=concise)
    world.judge.table[(concise, detailed)] = "contradicts"
    world.clock.advance(days=1)
    guess = world.write(content=detailed, attribute="explanation_style")
    assert guess.outcome == f"conflict:{user.record_id}"
    found = world.rt.tools.call("memory_search", world.p, {"queries": ["Aditya explanations"],
                                                            "as_of": world.clock.now().isoformat()})
    summaries = [r["explanation"]["summary"] for r in found["results"]]
    assert len(summaries) == 2, found
    assert all("left open while the conflict stands" in s for s in summaries)


def _ranked(world: World, rt: Any) -> list[list[tuple[str, float]]]:
    out = []
    for query in (QUESTION, "Aditya on leave", "Dana Reyes"):
        for history in (False, True):
            outcome = rt.retriever.search(world.p, SearchRequest(queries=[query], include_history=history))
            out.append([(r.record.id, r.score) for r in outcome.response.results])
    return out


def test_a_search_without_as_of_ranks_a_store_with_windows_as_one_without(world: World) -> None:
    _acme(world)
    # An active record whose stated window has passed: still found without as_of.
    leave = "Aditya is on leave until the end of August."
    world.say("user", leave)
    away = world.write(content=leave, attribute="availability", source_kind="user_statement",
                       evidence=leave, valid_until=T0 - timedelta(days=3))
    windowed = _ranked(world, world.rt)
    assert any(away.record_id in {rid for rid, _ in hits} for hits in windowed)
    assert execute(world.target, "UPDATE records SET valid_from = NULL, valid_until = NULL") >= 3
    # A fresh runtime, so nothing cached from the windowed store is reused.
    with build_runtime(world.rt.config, clock=world.clock, embedder=world.embedder, judge=world.judge,
                       scheduler=InProcessScheduler(), environ={}) as bare:
        assert _ranked(world, bare) == windowed
