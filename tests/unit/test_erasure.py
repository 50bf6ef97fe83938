"""``retold erase --user``: a canary written everywhere a user's text can reach (stored
profile blocks included) must be gone from the raw bytes of the store file and its WAL
(on PostgreSQL: from every live row of every table), while another user's survives."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from retold.clock import new_id, to_iso
from retold.ingest.ingestor import WriteRequest
from retold.models import EntityMention, Principal, Scope, SearchRequest
from retold.store import open_store
from retold.testing import AGENT, World, make_world
from retold.utility.decision import Gap, TurnDecision, Verdict
from tests.sql import fts_ids, rows, stored_bytes

U_CANARY = "zq-canary-7f3a"
V_CANARY = "zq-canary-v9b2"
SHARED = Scope("project", "shared")


def _plant(world: World, user: str, canary: str) -> list[str]:
    """Put ``canary`` in a turn, records (own, private and shared scopes), evidence, an
    entity alias and canonical, a search query and an event payload; return record ids."""
    rt = world.rt
    rt.host.grant(AGENT, Scope("user", user), read=True, write=True)
    rt.host.provision_user(user, aliases=[f"{canary} display"])
    p = Principal(AGENT, user, f"sess-{user}", "shared")
    rt.hooks.on_session_start(p)
    said = f"My secret codename is {canary} and I drink green tea daily."
    p = rt.hooks.on_turn(p, "user", said)
    ids = []
    for target in (None, Scope("agent", f"{AGENT}/{user}"), SHARED):
        result = rt.ingestor.write(p, WriteRequest(
            type="semantic", content=f"{user} uses the codename {canary} ({target}).",
            attribute="codename", target=target, source_kind="user_statement",
            evidence=f"codename is {canary} and I drink green tea",
            # Erasure removes the entities of the user's own scopes; a shared scope's entity
            # is not the user's, so the shared record names a neutral one.
            entities=(EntityMention("person", "Shared Topic" if target == SHARED else f"{canary} Friend",
                                    "about"),),
            tags=(canary,),
        ), origin="tool")
        assert result.ok and result.record_id, result.note
        ids.append(result.record_id)
    rt.retriever.search(p, SearchRequest(queries=[f"what is the codename {canary}"]))
    rt.store.append_event("test.note", "tester", {"quote": canary}, record_id=ids[0])
    # A host-issued memory decision: its gap and verdict restate what the user said.
    rt.store.append_turn_decision(TurnDecision(
        new_id(), to_iso(rt.clock.now()), AGENT, user, p.session_id or "", 1, "0123456789abcdef",
        "shadow", gaps=[Gap(f"the codename {canary}", f"codename {canary}")],
        verdicts=[Verdict(ids[0], "fills", f"it names {canary}")], timings_ms={"total": 2.0}))
    # A standing preference that the next session's stored profile block shows.
    preference = rt.tools.call("memory_write", p, {
        "type": "semantic", "content": f"{user} wants replies signed {canary}.",
        "attribute": "reply_signature", "source_kind": "user_statement",
        "evidence": f"codename is {canary} and I drink green tea"})
    assert preference["activation"] == "ambient", preference
    rt.hooks.on_session_end(p)
    later = Principal(AGENT, user, f"sess-{user}-2", "shared")
    rt.hooks.on_session_start(later)
    assert canary in rt.profiles.for_session(later).text
    return ids


def test_erase_user_leaves_no_canary_in_the_file_or_wal(tmp_path: Path, store_target: str) -> None:
    world = make_world(tmp_path, store=store_target)
    world.rt.host.grant(AGENT, SHARED, read=True, write=True)
    u_ids = _plant(world, "uzz", U_CANARY)
    v_ids = _plant(world, "vyy", V_CANARY)
    world.rt.close()
    assert U_CANARY.encode() in stored_bytes(store_target)  # the plant reached the store

    config = tmp_path / "config.yaml"
    config.write_text("embedding:\n  model: fake\n  version: fake-1\n")  # the world's fake family
    idle = open_store(store_target)  # an open, idle connection must not keep the WAL alive
    try:
        result = subprocess.run(
            [sys.executable, "-m", "retold.cli", "erase", "--user", "uzz", "--reason", "test", "--yes",
             "--store", store_target, "--config", str(config)],
            capture_output=True, text=True, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
        assert result.returncode == 0, result.stderr
        assert "erased user uzz" in result.stdout
        raw = stored_bytes(store_target)
    finally:
        idle.close()

    assert U_CANARY.encode() not in raw
    assert V_CANARY.encode() in raw
    found = rows(store_target, "SELECT id, status, content, evidence, tags FROM records"
                               f" WHERE id IN ({','.join('?' * 6)})", *u_ids, *v_ids)
    by_id = {row[0]: row[1:] for row in found}
    for rid in u_ids:  # ids survive as tombstones
        assert by_id[rid] == ("deleted", "", None, "[]")
    for rid in v_ids:
        assert by_id[rid][0] != "deleted" and V_CANARY in by_id[rid][1]
    assert fts_ids(store_target, "7f3a") == set()
    assert len(fts_ids(store_target, "v9b2")) == len(v_ids) + 1  # and the profile's preference
    assert rows(store_target, "SELECT count(*) FROM session_turns WHERE session_id = 'sess-uzz'"
                ) == [(1,)]  # the turn row stays, blank
    assert rows(store_target, "SELECT count(*) FROM search_log WHERE user_id = 'uzz'") == [(0,)]
    assert rows(store_target, "SELECT count(*) FROM turn_decisions WHERE user_id = 'uzz'") == [(0,)]
    assert rows(store_target, "SELECT kind FROM events WHERE kind = 'user.erased'") == [("user.erased",)]


def test_erasing_a_user_after_retention_thinned_their_rows_still_leaves_no_canary(
    tmp_path: Path, store_target: str,
) -> None:
    world = make_world(tmp_path, store=store_target)
    try:
        world.rt.host.grant(AGENT, SHARED, read=True, write=True)
        _plant(world, "uzz", U_CANARY)
        _plant(world, "vyy", V_CANARY)
        ages = world.rt.config.retention
        world.clock.advance(days=max(ages.search_log_days, ages.event_payload_days) + 1)
        retained = world.rt.operations.retain()
        assert retained.search_logs_deleted == 2 and retained.event_payloads_thinned > 0

        def about_u(event: dict[str, object]) -> bool:
            payload = event["payload"]
            assert isinstance(payload, dict)
            return payload.get("user_id") == "uzz" or payload.get("session_id") == "sess-uzz"

        # Retention kept the ids erasure finds a user's events by.
        assert any(about_u(e) for e in world.rt.store.events())
        result = world.rt.operations.erase_user("uzz", "test")
        assert result.compacted
        raw = stored_bytes(store_target)
        assert U_CANARY.encode() not in raw
        assert V_CANARY.encode() in raw  # the other user's records are untouched
        assert [e["kind"] for e in world.rt.store.events() if about_u(e)] == ["user.erased"]
    finally:
        world.rt.close()
