"""The weekly extraction audit on a real store (SQLite and PostgreSQL): what a week's
sample holds, that sampling again adds nothing, that a tenant's queue holds only its own
records, and that answers move the rates and the queue's age that the metrics show."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from retold.activation.policy import sampled
from retold.observability import collect_metrics
from retold.quality.audit import (
    RATE_WINDOW_DAYS,
    WEEKLY_QUOTA,
    AuditError,
    answer_audit,
    audit_entries,
    audit_summary,
    sample_for_audit,
)
from retold.store.audit import Verdicts
from retold.testing import World, make_world
from tests.extracted import extract_facts

YES, NO = True, False


@pytest.fixture
def other(tmp_path: Path, world: World) -> Iterator[World]:
    """A second tenant on the world's store, with the same agent, user and session ids."""
    made = make_world(tmp_path, store=world.target, tenant="acme")
    yield made
    made.rt.close()


def queue(world: World) -> list[str]:
    return [item.record_id for item in world.rt.store.audit_items(answered=None, limit=1000)]


def test_a_week_with_no_rate_gives_twenty_of_extractions_records_and_nothing_else(world: World) -> None:
    old = extract_facts(world, "last-month", 3)
    world.clock.advance(days=8)
    written = extract_facts(world, "this-week", WEEKLY_QUOTA + 5, first=100)
    world.say("user", "I always take the stairs to the third floor, never the lift.")
    by_tool = world.write(content="Aditya takes the stairs to the third floor.", attribute="floor_route",
                          source_kind="user_statement", evidence="take the stairs to the third floor")
    assert by_tool.ok
    summaries = [r.id for r in world.rt.store.find_records(source_kind="session_summary")]

    sample = sample_for_audit(world.rt.store, 0.0)

    assert (sample.written, sample.rule, len(sample.added)) == (WEEKLY_QUOTA + 5, "weekly", WEEKLY_QUOTA)
    assert set(sample.added) <= set(written)
    assert not set(queue(world)) & {*old, by_tool.record_id, *summaries}
    assert sorted(queue(world)) == sorted(sample.added)
    (event,) = world.events("audit.sampled")
    assert event["payload"]["records"] == list(sample.added)


def test_sampling_again_adds_nothing_and_a_new_week_tops_up_to_its_own_quota(world: World) -> None:
    extract_facts(world, "monday", WEEKLY_QUOTA + 2)
    assert len(sample_for_audit(world.rt.store, 0.0).added) == WEEKLY_QUOTA
    world.clock.advance(days=2)
    wednesday = extract_facts(world, "wednesday", 4, first=200)
    assert sample_for_audit(world.rt.store, 0.0).added == ()  # the week's twenty are taken
    assert len(world.events("audit.sampled")) == 1
    world.clock.advance(days=6)  # monday's writes leave the window, wednesday's stay
    later = extract_facts(world, "next-week", 3, first=300)

    again = sample_for_audit(world.rt.store, 0.0)

    assert again.written == 7 and sorted(again.added) == sorted(wednesday + later)
    assert len(queue(world)) == WEEKLY_QUOTA + 7


def test_a_rate_samples_the_records_the_activation_policy_picks_once(world: World) -> None:
    written = extract_facts(world, "busy-day", 40)

    sample = sample_for_audit(world.rt.store, 0.5)

    assert sample.rule == "rate"
    assert sorted(sample.added) == sorted(rid for rid in written if sampled(rid, 0.5))
    assert 0 < len(sample.added) < 40
    assert sample_for_audit(world.rt.store, 0.5).added == ()


def test_the_pack_rate_is_what_the_weekly_task_samples_with(tmp_path: Path, store_target: str) -> None:
    pack = tmp_path / "packs.yaml"
    pack.write_text("tenants:\n  acme:\n    write_policy:\n      review_sample_rate: 0.25\n",
                    encoding="utf-8")
    world = make_world(tmp_path, store=store_target, tenant="acme", pack=pack)
    try:
        written = extract_facts(world, "busy-day", 30)
        sample = world.rt.operations.audit_sample("beat")
        assert (sample.rule, sample.rate) == ("rate", 0.25)
        assert sorted(sample.added) == sorted(rid for rid in written if sampled(rid, 0.25))
        (event,) = world.events("audit.sampled")
        assert event["actor"] == "beat"
    finally:
        world.rt.close()


def test_a_tenants_queue_never_holds_another_tenants_records(world: World, other: World) -> None:
    mine = extract_facts(world, "s-mine", 5)
    theirs = extract_facts(other, "s-mine", 5)  # the same session ids in the other tenant

    assert sorted(sample_for_audit(world.rt.store, 0.0).added) == sorted(mine)
    assert queue(other) == []
    assert sorted(sample_for_audit(other.rt.store, 0.0).added) == sorted(theirs)
    assert sorted(queue(world)) == sorted(mine) and sorted(queue(other)) == sorted(theirs)
    with pytest.raises(AuditError, match="never sampled"):
        answer_audit(world.rt.store, theirs[0], Verdicts(YES, YES, YES), "ops")
    assert audit_summary(other.rt.store).open == 5
    with pytest.raises(AuditError, match="serves tenant"):
        audit_summary(world.rt.store, "acme")


def test_answers_move_the_rates_and_the_queue_age(world: World) -> None:
    extract_facts(world, "s2", 4)
    sample_for_audit(world.rt.store, 0.0)
    before = audit_summary(world.rt.store)
    assert (before.answered, before.true_rate, before.open) == (0, None, 4)
    assert before.queue_age_seconds == 0.0
    world.clock.advance(days=2)

    first, second, third, _ = queue(world)
    answer_audit(world.rt.store, first, Verdicts(YES, YES, YES), "ops")
    answer_audit(world.rt.store, second, Verdicts(NO, YES, NO), "ops")
    answer_audit(world.rt.store, third, Verdicts(YES, NO, NO), "ops")
    answer_audit(world.rt.store, third, Verdicts(YES, NO, YES), "lead")  # a second look replaces the first

    summary = audit_summary(world.rt.store)
    assert (summary.answered, summary.open) == (3, 1)
    assert (summary.true_rate, summary.atomic_rate, summary.keep_rate) == (0.6667, 0.6667, 0.6667)
    assert summary.queue_age_seconds == 2 * 86400
    answered = world.rt.store.audit_item(third)
    assert answered is not None
    assert (answered.answered_by, answered.answered_at) == ("lead", world.clock.now())
    assert [e["actor"] for e in world.events("audit.answered")] == ["ops", "ops", "ops", "lead"]
    # The rates read the last four weekly samples' answers only.
    world.clock.advance(days=RATE_WINDOW_DAYS)
    assert audit_summary(world.rt.store).answered == 0


def test_the_latest_answer_is_listed_first(world: World) -> None:
    extract_facts(world, "s6", 3)
    sample_for_audit(world.rt.store, 0.0)
    first, second, third = queue(world)
    for record_id in (second, third, first):
        world.clock.advance(minutes=5)
        answer_audit(world.rt.store, record_id, Verdicts(YES, YES, YES), "ops")

    assert [e.record.id for e in audit_entries(world.rt.store, answered=True)] == [first, third, second]
    assert audit_entries(world.rt.store) == []


def test_an_erased_record_leaves_the_queue_and_cannot_be_answered(world: World) -> None:
    extract_facts(world, "s3", 2)
    sample_for_audit(world.rt.store, 0.0)
    gone, kept = queue(world)
    world.rt.operations.erase_record(gone, "the user asked")

    assert [e.record.id for e in audit_entries(world.rt.store)] == [kept]
    assert audit_summary(world.rt.store).open == 1
    with pytest.raises(AuditError, match="erased"):
        answer_audit(world.rt.store, gone, Verdicts(YES, YES, YES), "ops")


def test_each_entry_shows_the_turn_its_evidence_was_quoted_from(world: World) -> None:
    extract_facts(world, "s4", 3)
    sample_for_audit(world.rt.store, 0.0)

    entries = audit_entries(world.rt.store)

    assert len(entries) == 3
    for entry in entries:
        assert entry.turn is not None and entry.turn.role == "user"
        assert entry.record.evidence is not None and entry.record.evidence in entry.turn.content


def test_the_metrics_carry_the_audit(world: World) -> None:
    extract_facts(world, "s5", 2)
    sample_for_audit(world.rt.store, 0.0)
    world.clock.advance(hours=6)
    answer_audit(world.rt.store, queue(world)[0], Verdicts(YES, NO, YES), "ops")

    metrics = collect_metrics(world.rt.store, world.clock.now(), timedelta(minutes=30))

    assert metrics.audit is not None
    assert (metrics.audit.answered, metrics.audit.true_rate, metrics.audit.atomic_rate) == (1, 1.0, 0.0)
    assert (metrics.audit.open, metrics.audit.queue_age_seconds) == (1, 6 * 3600)
