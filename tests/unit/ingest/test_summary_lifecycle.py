"""A session summary never presents a superseded fact as current.

The demo story (the account manager names Dana Reyes as Acme North's billing contact,
then reports that Marcus Chen took over) runs through the runtime with the demo's own
turns, explicit write and recorded extractor output, with fakes at the model boundaries.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from retold import build_runtime
from retold.demo import EXPLICIT_WRITE, FEBRUARY, PAST_QUESTION, QUESTION, SESSIONS
from retold.ingest.extractor import FakeExtractor, ReplayExtractor
from retold.ingest.reviewer import TableReviewer
from retold.models import ExtractionOutput, Principal, Record, SessionSummary
from retold.retrieve.explain import short_id
from retold.testing import AGENT, World

DANA = "Billing contact for Acme North is Dana Reyes."
MARCUS = "Billing contact for Acme North is Marcus Chen."
MARCUS_SAYS = "Marcus Chen took over billing for Acme North."


def principal(session_id: str) -> Principal:
    return Principal(AGENT, "aditya", session_id)


def tell_demo_story(world: World) -> None:
    """Both demo sessions as `retold demo` runs them, a few minutes apart."""
    for index, (session_id, recording, turns) in enumerate(SESSIONS):
        world.clock.advance(minutes=5)
        p = principal(session_id)
        world.rt.hooks.on_session_start(p)
        for role, text in turns:
            p = world.rt.hooks.on_turn(p, role, text)
            if index == 0 and role == "user":
                assert "error" not in world.rt.tools.call("memory_write", p, EXPLICIT_WRITE)
        world.rt.hooks.on_session_end(p)
        with resources.as_file(resources.files("retold.demo_data") / recording) as path:
            replay = world.rt.session_end.using(ReplayExtractor(path), TableReviewer())
            assert replay.run(session_id).outcome == "extracted"


def summary_of(world: World, session_id: str) -> Record:
    (found,) = world.rt.store.find_records(source_kind="session_summary", source_ref=f"session:{session_id}")
    return found


def ask(world: World, **fields: Any) -> dict[str, Any]:
    answer: dict[str, Any] = world.rt.tools.call(
        "memory_search", principal("review"), {"queries": [QUESTION], "k": 3, **fields})
    return answer


def block_of(rendered: str, record_id: str) -> str:
    (block,) = [b for b in rendered.split("\n\n") if b.startswith(f"[{short_id(record_id)}]")]
    return block


def test_demo_question_puts_the_current_contact_first_and_never_dana_as_current(world: World) -> None:
    tell_demo_story(world)
    stale = summary_of(world, "acme-north-1")
    answer = ask(world)
    results = answer["results"]
    assert results[0]["content"] == MARCUS
    # Dana is named as the contact only by the old fact and the first session's summary;
    # neither is served as current, and the rendered text does not carry them.
    current = [r for r in results if r["status"] in ("confirmed", "provisional")]
    assert all(r["content"] not in (DANA, stale.content) for r in current)
    assert DANA not in answer["rendered"] and stale.content not in answer["rendered"]


def test_history_shows_the_restating_summary_marked_superseded(world: World) -> None:
    tell_demo_story(world)
    stale = summary_of(world, "acme-north-1")
    assert stale.status == "superseded"
    assert summary_of(world, "acme-north-2").status == "confirmed"
    answer = ask(world, k=5, include_history=True)
    assert answer["results"][0]["content"] == MARCUS
    assert "· superseded · session_summary ·" in block_of(answer["rendered"], stale.id)
    (retired,) = [e for e in world.events("record.superseded") if e["record_id"] == stale.id]
    marcus = world.rt.store.find_records(content=MARCUS)[0]
    dana = world.rt.store.find_records(content=DANA)[0]
    assert retired["payload"]["by"] == marcus.id and retired["payload"]["restates"] == dana.id
    # Dana held from the notes of 10 January until Marcus took over on 1 March; the summary
    # that restated her was written after that, so no time finds it.
    assert (dana.valid_until, stale.valid_until) == (marcus.valid_from, stale.event_at)
    february = ask(world, queries=[PAST_QUESTION], as_of=FEBRUARY)
    assert [r["content"] for r in february["results"]] == [DANA]


# -- which summaries retire ------------------------------------------------------------------


def session(world: World, session_id: str, said: str, summary: str, write: dict[str, Any] | None) -> None:
    """One ended and extracted session: a user turn, an optional explicit write quoting it,
    and an extractor that returns only the summary."""
    world.clock.advance(minutes=5)
    p = principal(session_id)
    world.rt.hooks.on_session_start(p)
    p = world.rt.hooks.on_turn(p, "user", said)
    if write is not None:
        assert "error" not in world.rt.tools.call("memory_write", p, write)
    world.rt.hooks.on_session_end(p)
    extractor = FakeExtractor(ExtractionOutput([], SessionSummary(summary, [], [])))
    assert world.rt.session_end.using(extractor, TableReviewer()).run(session_id).outcome == "extracted"


MARCUS_WRITE = {**EXPLICIT_WRITE, "content": MARCUS, "evidence": MARCUS_SAYS,
                "entities": [{"kind": "org", "name": "Acme North", "role": "about"}]}
DANA_SAYS = str(EXPLICIT_WRITE["evidence"])


def test_summaries_of_every_session_that_stated_or_reinforced_the_fact_retire(world: World) -> None:
    session(world, "a", DANA_SAYS, "Jordan named Dana Reyes as the billing contact.", EXPLICIT_WRITE)
    session(world, "b", DANA_SAYS, "Jordan repeated that Dana Reyes handles billing.", EXPLICIT_WRITE)
    session(world, "c", "Send the renewal quote on Friday.", "Jordan planned the renewal quote.", None)
    dana = world.rt.store.find_records(content=DANA)[0]
    assert dana.reinforcements == 1  # session b counted as independent support
    session(world, "d", MARCUS_SAYS, "Jordan reported that Marcus Chen took over billing.", MARCUS_WRITE)
    statuses = {s: summary_of(world, s).status for s in "abcd"}
    assert statuses == {"a": "superseded", "b": "superseded", "c": "confirmed", "d": "confirmed"}


def test_a_rerun_does_not_bring_back_a_retired_summary(world: World) -> None:
    tell_demo_story(world)
    stale = summary_of(world, "acme-north-1")
    rerun = world.rt.session_end.using(TableReviewer()).run("acme-north-1", force=True)
    assert rerun.outcome == "extracted"
    payload = world.events("extraction.run")[-1]["payload"]
    assert payload["summary"] == {"outcome": "already_superseded", "record_id": stale.id}
    assert summary_of(world, "acme-north-1").status == "superseded"


def test_a_manual_supersede_retires_the_summary_for_every_process(world: World) -> None:
    session(world, "a", DANA_SAYS, "Jordan named Dana Reyes as the billing contact.", EXPLICIT_WRITE)
    other = build_runtime(world.rt.config, clock=world.clock, embedder=world.embedder, judge=world.judge,
                          environ={})
    try:
        summary = summary_of(world, "a")
        seen = other.tools.call("memory_search", principal("x"), {"queries": [QUESTION], "k": 5})
        assert summary.id in [r["id"] for r in seen["results"]]
        dana = world.rt.store.find_records(content=DANA)[0]
        world.clock.advance(minutes=5)
        world.rt.hooks.on_session_start(principal("e"))
        p = world.rt.hooks.on_turn(principal("e"), "user", MARCUS_SAYS)
        revised = world.rt.tools.call("memory_revise", p, {
            "id": dana.id, "action": "supersede", "content": MARCUS, "reason": "billing moved",
            "source_kind": "user_statement", "evidence": MARCUS_SAYS})
        assert "error" not in revised
        assert summary_of(world, "a").status == "superseded"
        # This process acknowledged both retirements, so its index has nothing to catch up on.
        assert world.rt.index.refresh(world.rt.store, 512) == "current"
        seen = other.tools.call("memory_search", principal("x"), {"queries": [QUESTION], "k": 5})
        assert [r["content"] for r in seen["results"]][0] == MARCUS
        assert summary.id not in [r["id"] for r in seen["results"]]
    finally:
        other.close()


def test_forgetting_the_new_value_leaves_the_summary_retired(world: World) -> None:
    tell_demo_story(world)
    marcus = world.rt.store.find_records(content=MARCUS)[0]
    forgot = world.rt.tools.call("memory_forget", principal("review"), {"id": marcus.id, "reason": "wrong"})
    assert "error" not in forgot
    # Dana stays superseded, so the summary restating her stays history too.
    assert summary_of(world, "acme-north-1").status == "superseded"
    assert all(r["content"] != DANA for r in ask(world)["results"])

