"""``retold retain``: search-log rows and the text in event payloads go after their ages,
while what is kept still replays (the gate from a log row, reinforcement counting from
events) and the removed text is gone from the file's bytes (on PostgreSQL: from every
live row)."""

from __future__ import annotations

import json
from pathlib import Path

from retold.clock import to_iso
from retold.models import SearchRequest
from retold.retrieve.replay import replay
from retold.testing import World, make_world
from tests.sql import execute, rows, stored_bytes

CANARY = "zq-retain-5c1d"


def _search(world: World, text: str) -> str:
    response = world.rt.retriever.search(world.p, SearchRequest(queries=[text])).response
    world.rt.flush_search_log()
    return response.search_id


def test_search_logs_past_their_age_are_deleted_and_younger_ones_still_replay(world: World) -> None:
    old = _search(world, "short technical answers")
    world.clock.advance(days=world.rt.config.retention.search_log_days + 1)
    world.write(content="Aditya prefers short technical answers.", attribute="answer_style")
    young = _search(world, "short technical answers")

    result = world.rt.operations.retain()
    assert result.search_logs_deleted == 1
    assert world.rt.store.search_log_row(old) is None
    kept = world.rt.store.search_log_row(young)
    assert kept is not None
    replayed = replay(kept, world.rt.config.retrieval.gate)
    assert replayed.kept == json.loads(kept["returned"])
    assert replayed.decision.answered
    [pruned] = world.events("search_log.pruned")
    assert pruned["payload"]["rows"] == 1
    assert world.rt.operations.retain().search_logs_deleted == 0  # a re-run changes and logs nothing
    assert len(world.events("search_log.pruned")) == 1


def test_old_event_payloads_keep_ids_outcomes_and_counts_but_no_text(world: World) -> None:
    first = world.write(content="Aditya prefers short technical answers.", attribute="answer_style",
                        source_kind="user_statement", evidence="keep every answer short and technical")
    assert first.record_id is not None
    world.say("user", "Again: keep every answer short and technical please.")
    again = world.write(content="Aditya prefers short technical answers.", attribute="answer_style",
                        source_kind="user_statement", evidence="keep every answer short and technical")
    assert again.outcome.startswith("reinforced")
    counted = world.rt.store.counted_refs(first.record_id)
    note = world.rt.store.append_event("test.note", "tester", {"quote": CANARY, "session_id": "s1",
                                                               "counts": {"turns": 2}})
    days = world.rt.config.retention.event_payload_days
    world.clock.advance(days=days + 1)
    recent = world.rt.store.append_event("test.note", "tester", {"quote": CANARY})

    result = world.rt.operations.retain()
    assert result.event_payloads_thinned >= 3  # the note, the creation and the reinforcement
    notes = {e["id"]: e["payload"] for e in world.events("test.note")}
    assert notes[note] == {"session_id": "s1", "counts": {"turns": 2}, "retention_days": days}
    assert notes[recent] == {"quote": CANARY}  # younger than the age: untouched
    [reinforced] = world.events("record.reinforced")
    assert reinforced["payload"]["counted"] and reinforced["payload"]["source_ref"]
    assert "incoming_evidence" not in reinforced["payload"] and "notes" not in reinforced["payload"]
    # The reinforcement rule reads counted references from events: unchanged by retention.
    assert world.rt.store.counted_refs(first.record_id) == counted
    assert world.rt.operations.retain().event_payloads_thinned == 0
    assert len(world.events("events.payloads_thinned")) == 1


def test_transcript_retention_also_deletes_the_stages_that_quote_it(world: World) -> None:
    store = world.rt.store
    world.say("user", f"My codename is {CANARY}.")
    store.end_session("s1", world.clock.now())
    store.save_stage("s1", "extract", {"quote": CANARY}, "fake", "v1")
    execute(store, "UPDATE sessions SET extracted_at = ? WHERE id = 's1'", to_iso(world.clock.now()))
    world.clock.advance(days=world.rt.config.sessions.retain_days + 1)

    assert world.rt.operations.retain().sessions_blanked == 1
    assert store.stage_row("s1", "extract") is None
    [blanked] = world.events("session.transcript_blanked")
    assert blanked["payload"]["stages"] == 1


def test_retention_leaves_no_removed_text_in_the_file_or_wal(tmp_path: Path, store_target: str) -> None:
    world = make_world(tmp_path, store=store_target)
    try:
        _search(world, f"what is the codename {CANARY}")
        world.rt.store.append_event("test.note", "tester", {"quote": CANARY})
        assert world.rt.store.truncate_wal()  # rows this old live in the main file, not the WAL
        path = store_target
        assert CANARY.encode() in stored_bytes(path)
        world.clock.advance(days=max(world.rt.config.retention.search_log_days,
                                     world.rt.config.retention.event_payload_days) + 1)
        result = world.rt.operations.retain()
        assert result.search_logs_deleted == 1 and result.event_payloads_thinned >= 1
        assert result.wal_truncated
        assert CANARY.encode() not in stored_bytes(path)
        assert rows(path, "SELECT count(*) FROM events WHERE kind = 'test.note'") == [(1,)]  # the row stays
    finally:
        world.rt.close()
