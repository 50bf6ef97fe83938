"""Validity windows on the write path: supersession ends the old window where the new one
starts, an explicit window wins, a conflict ends neither, and a correction fixes a window
only where it states one. On a real store, both backends."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from retold.testing import T0, World
from retold.tools.handlers import ToolHandlers

CONCISE = "Aditya prefers concise technical explanations."
DETAILED = "Aditya prefers detailed architecture explanations."


def _user_fact(world: World, content: str, **extra: Any):  # type: ignore[no-untyped-def]
    world.say("user", content)
    return world.write(content=content, attribute="explanation_style", source_kind="user_statement",
                       evidence=content, **extra)


def test_supersession_ends_the_old_window_when_the_new_value_was_recorded(world: World) -> None:
    old = _user_fact(world, CONCISE)
    world.judge.table[(CONCISE, DETAILED)] = "contradicts"
    world.clock.advance(days=60)
    new = _user_fact(world, DETAILED)
    assert new.outcome == f"superseded:{old.record_id}"
    dana, marcus = world.record(old.record_id), world.record(new.record_id)
    assert (dana.valid_from, dana.valid_until) == (None, T0 + timedelta(days=60))
    # The new value's start is its event time; nothing is written that nobody stated.
    assert (marcus.valid_from, marcus.valid_until) == (None, None)


def test_the_change_the_write_dates_wins_over_when_it_was_recorded(world: World) -> None:
    first = _user_fact(world, CONCISE)
    world.judge.table[(CONCISE, DETAILED)] = "contradicts"
    world.clock.advance(days=60)
    changed = T0 + timedelta(days=30)
    second = _user_fact(world, DETAILED, valid_from=changed)
    assert world.record(first.record_id).valid_until == changed
    assert world.record(second.record_id).valid_from == changed
    # An event time is a dated change too, when there is no valid_from.
    newest = "Aditya prefers bullet-point explanations."
    world.judge.table[(DETAILED, newest)] = "contradicts"
    world.clock.advance(days=10)
    third = _user_fact(world, newest, event_at=T0 + timedelta(days=65))
    assert third.outcome == f"superseded:{second.record_id}"
    assert world.record(second.record_id).valid_until == T0 + timedelta(days=65)


def test_an_explicit_earlier_end_stays_and_no_window_ends_before_it_starts(world: World) -> None:
    lapsed = _user_fact(world, CONCISE, valid_until=T0 + timedelta(days=10))
    world.judge.table[(CONCISE, DETAILED)] = "contradicts"
    world.clock.advance(days=60)
    _user_fact(world, DETAILED)
    assert world.record(lapsed.record_id).valid_until == T0 + timedelta(days=10)

    # A higher-ranked source replaces a value with an earlier start: the old window is empty.
    world.say("tool", "profile service: answer_format=tables")
    tool = world.write(content="Aditya wants tables.", attribute="answer_format", source_kind="tool_result",
                       evidence="answer_format=tables", event_at=T0 + timedelta(days=70))
    world.judge.table[("Aditya wants tables.", "Aditya wants prose.")] = "contradicts"
    world.say("user", "Aditya wants prose.")
    user = world.write(content="Aditya wants prose.", attribute="answer_format", source_kind="user_statement",
                       evidence="Aditya wants prose.", event_at=T0 + timedelta(days=40))
    assert user.outcome == f"superseded:{tool.record_id}"
    assert world.record(tool.record_id).valid_until == T0 + timedelta(days=70)


def test_late_history_holds_until_the_current_value_started(world: World) -> None:
    current = _user_fact(world, CONCISE, event_at=T0 + timedelta(days=10))
    world.judge.table[(CONCISE, DETAILED)] = "contradicts"
    stale = _user_fact(world, DETAILED, event_at=T0)
    assert stale.outcome == f"superseded_on_arrival:{current.record_id}"
    record = world.record(stale.record_id)
    assert (record.event_at, record.valid_until) == (T0, T0 + timedelta(days=10))
    assert world.record(current.record_id).valid_until is None


def test_a_conflict_leaves_both_windows_open_and_says_so(world: World) -> None:
    user = _user_fact(world, CONCISE)
    world.say("assistant", "Looks like you want detailed architecture explanations.")
    world.judge.table[(CONCISE, DETAILED)] = "contradicts"
    world.clock.advance(days=1)
    guess = world.write(content=DETAILED, attribute="explanation_style",
                        evidence="you want detailed architecture explanations")
    assert guess.outcome == f"conflict:{user.record_id}"
    assert world.record(user.record_id).valid_until is None
    assert world.record(guess.record_id).valid_until is None
    (event,) = [e for e in world.events("record.created") if e["record_id"] == guess.record_id]
    assert event["payload"]["validity"] == "both windows left open: a conflict ends neither"


def _revise(world: World, record_id: str, **fields: Any) -> dict[str, Any]:
    world.say("user", "Actually, I want detailed architecture explanations.")
    return ToolHandlers(world.rt).call("memory_revise", world.p, {
        "id": record_id, "action": "supersede", "reason": "the user corrected it", "content": DETAILED,
        "source_kind": "user_statement", "evidence": "I want detailed architecture explanations", **fields})


def test_a_correction_that_states_when_the_value_changed_ends_the_old_window_there(world: World) -> None:
    old = _user_fact(world, CONCISE)
    world.clock.advance(days=60)
    landed = _revise(world, str(old.record_id), valid_from="2026-10-01T00:00:00Z")
    assert landed["outcome"] == f"superseded:{old.record_id}", landed
    new = world.record(landed["record_id"])
    assert to_day(new.valid_from) == "2026-10-01" and new.valid_until is None
    assert to_day(world.record(old.record_id).valid_until) == "2026-10-01"


def test_a_correction_without_dates_invents_no_window(world: World) -> None:
    old = _user_fact(world, CONCISE, valid_from=T0 - timedelta(days=5))
    world.clock.advance(days=60)
    landed = _revise(world, str(old.record_id))
    replaced, new = world.record(old.record_id), world.record(landed["record_id"])
    # The old value may never have been right: it gets no end, and the correction keeps its start.
    assert replaced.status == "superseded" and replaced.valid_until is None
    assert (new.valid_from, new.valid_until) == (T0 - timedelta(days=5), None)


def test_a_correction_whose_window_would_end_before_it_starts_changes_nothing(world: World) -> None:
    old = _user_fact(world, CONCISE, valid_until=T0 + timedelta(days=3))
    before = world.counts()
    refused = _revise(world, str(old.record_id), valid_from="2026-12-01T00:00:00Z")
    assert refused["error"]["code"] == "invalid_input"
    assert "would end" in refused["error"]["message"]
    crossed = _revise(world, str(old.record_id), valid_from="2026-12-01T00:00:00Z",
                      valid_until="2026-11-01T00:00:00Z")
    assert crossed["error"] == {"code": "invalid_input",
                                "message": "valid_from must not be later than valid_until"}
    after = world.counts()
    assert after["records"] == before["records"] and world.record(old.record_id).status == "confirmed"


def to_day(moment: Any) -> str:
    return str(moment.date().isoformat())
