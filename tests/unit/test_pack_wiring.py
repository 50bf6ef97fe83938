"""A tenant's memory pack changes what its runtime does; a tenant on the same store under
the default (built-in) pack behaves as before packs existed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from retold.clock import to_iso
from retold.ingest.extractor import FakeExtractor
from retold.ingest.reviewer import TableReviewer
from retold.models import CandidateRecord, ExtractionOutput, Record, SessionSummary
from retold.retrieve.budget import fill_budget
from retold.testing import World, make_record, make_world

Worlds = Callable[..., tuple[World, World]]

USER_SAYS = "Please keep every answer short and technical, I read them on my phone."
TOOL_SAYS = "timezone lookup result: Europe/Berlin for the account"


@pytest.fixture
def worlds(tmp_path: Path, store_target: str) -> Iterator[Worlds]:
    """``worlds(acme_yaml)``: tenants acme (under ``acme_yaml``, its block in the pack
    file) and beta (named nowhere, so under the default pack) on one store."""
    opened: list[World] = []

    def make(acme: str, **config: Any) -> tuple[World, World]:
        pack = tmp_path / "packs.yaml"
        body = "\n".join("    " + line for line in acme.strip().splitlines())
        pack.write_text(f"tenants:\n  acme:\n{body}\n", encoding="utf-8")
        made = (make_world(tmp_path, store=store_target, tenant="acme", pack=pack, config=config),
                make_world(tmp_path, store=store_target, tenant="beta", pack=pack, config=config))
        opened.extend(made)
        return made

    yield make
    for world in opened:
        world.rt.close()


def _write(world: World, **payload: Any) -> dict[str, Any]:
    answer: dict[str, Any] = world.rt.tools.call("memory_write", world.p, payload)
    return answer


def _search(world: World, query: str) -> list[dict[str, Any]]:
    found = world.rt.tools.call("memory_search", world.p, {"queries": [query]})
    results: list[dict[str, Any]] = found["results"]
    return results


# -- classes.<type>.enabled ------------------------------------------------------------------


def test_a_write_of_a_switched_off_class_is_refused_and_changes_nothing(worlds: Worlds) -> None:
    acme, beta = worlds("classes:\n  procedural: {enabled: false}")
    payload = {"type": "procedural", "content": "Always answer in English.", "attribute": "answer_language"}
    before = acme.counts()
    refused = _write(acme, **payload)
    assert refused["error"]["code"] == "invalid_input"
    assert "classes.procedural.enabled" in refused["error"]["message"]
    assert acme.counts() == before
    # The other classes still write in acme, and beta (the default pack) writes all of them.
    assert "error" not in _write(acme, type="semantic", content="Aditya lives in Berlin.", attribute="city")
    assert _write(beta, **payload)["outcome"] == "created"


def test_a_pack_cannot_switch_transcripts_off(tmp_path: Path) -> None:
    from retold.config.pack import load_pack_file
    from retold.errors import ConfigError

    pack = tmp_path / "packs.yaml"
    pack.write_text("default:\n  classes:\n    raw: {enabled: false}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="default.classes.raw.enabled: must be true"):
        load_pack_file(pack)


# -- extraction: switched-off classes and confidence floors -----------------------------------


def _candidates() -> list[CandidateRecord]:
    def cand(content: str, evidence: str, turn: int, type: str, attribute: str | None,
             confidence: float, source_kind: str = "user_statement") -> CandidateRecord:
        return CandidateRecord(type=type, content=content, attribute=attribute,  # type: ignore[arg-type]
                               source_kind=source_kind, evidence=evidence,  # type: ignore[arg-type]
                               evidence_turn=turn, entity_mentions=[], confidence=confidence)

    return [
        cand("Aditya prefers short technical answers.", "keep every answer short and technical", 1,
             "semantic", "answer_style", 0.6),
        cand("Aditya's account time zone is Europe/Berlin.", "result: Europe/Berlin for the account", 3,
             "semantic", "timezone", 0.9, "tool_result"),
        cand("Aditya reads answers on a phone.", "I read them on my phone", 1, "episodic", None, 0.9),
    ]


def _extract(world: World) -> dict[str, Any]:
    for role, text in (("user", USER_SAYS), ("assistant", "Noted."), ("tool", TOOL_SAYS)):
        world.say(role, text)
    world.rt.hooks.on_session_end(world.p)
    extractor = FakeExtractor(ExtractionOutput(_candidates(), SessionSummary("Short answers.", [], [])))
    result = world.rt.session_end.using(extractor, TableReviewer()).run("s1")
    assert result.outcome == "extracted", result
    payload: dict[str, Any] = world.events("extraction.run")[-1]["payload"]
    return payload


def test_extraction_drops_switched_off_classes_and_candidates_below_the_floor(worlds: Worlds) -> None:
    acme, beta = worlds("classes:\n  episodic: {enabled: false}\n"
                        "  semantic: {extraction_confidence_floor: 0.7}")
    run = _extract(acme)
    assert run["counts"]["rejected"] == 2 and run["counts"]["written"] == 1
    assert run["rejection_reasons"] == {"below_confidence_floor": 1, "class_disabled": 1}
    assert acme.rt.store.find_records(content="Aditya's account time zone is Europe/Berlin.")
    assert not acme.rt.store.find_records(content="Aditya reads answers on a phone.")
    # beta keeps every candidate, as extraction did before packs.
    assert _extract(beta)["counts"]["written"] == 3


# -- classes.<type>.half_life_days --------------------------------------------------------------


def test_each_class_decays_at_its_own_half_life(worlds: Worlds) -> None:
    acme, beta = worlds("classes:\n  semantic: {half_life_days: 10}\n  episodic: {half_life_days: null}")
    for world in (acme, beta):
        old = to_iso(world.clock.now() - timedelta(days=1))
        assert "error" not in _write(world, type="semantic", content="Aditya's favourite editor is Helix.",
                                     attribute="editor", event_at=old)
        assert "error" not in _write(world, type="episodic", content="Aditya switched his editor to Helix.",
                                     event_at=old)
    multipliers = {world.rt.tenant: {r["type"]: r["explanation"]["freshness_multiplier"]
                                     for r in _search(world, "Helix editor")} for world in (acme, beta)}
    # acme: semantic halves every 10 days, episodic is stable (a day old, above the 0.9 floor).
    assert multipliers["acme"]["semantic"] == pytest.approx(0.5 ** (1 / 10))
    assert multipliers["acme"]["episodic"] is None
    # beta: as before packs, only episodic decays, at 30 days.
    assert multipliers["beta"]["semantic"] is None
    assert multipliers["beta"]["episodic"] == pytest.approx(0.5 ** (1 / 30))


# -- retention ----------------------------------------------------------------------------------


def test_a_class_retention_expires_its_old_records_with_an_event(worlds: Worlds) -> None:
    acme, beta = worlds("classes:\n  semantic: {retention_days: 30}")
    ids = {}
    for world in (acme, beta):
        # A system fact: confirmed, with no expires_at of its own.
        written = world.write(origin="host", source_kind="system", content="Aditya's laptop is a ThinkPad.",
                              attribute="laptop")
        ids[world.rt.tenant] = written.record_id
        world.clock.advance(timedelta(days=31))
        world.rt.operations.expire()
    assert acme.record(ids["acme"]).status == "expired"
    event = [e for e in acme.events("record.status") if e["record_id"] == ids["acme"]][-1]
    assert event["payload"]["reason"] == "retention" and event["payload"]["days"] == 30
    assert beta.record(ids["beta"]).status == "confirmed"


def test_audit_retention_thins_payloads_sooner_for_its_tenant(worlds: Worlds) -> None:
    acme, beta = worlds("governance: {audit_retention_days: 5}")
    for world in (acme, beta):
        written = _write(world, type="semantic", content="Aditya lives in Berlin.", attribute="city")
        assert "error" not in written
        world.clock.advance(timedelta(days=6))
    assert acme.rt.operations.retain().event_payloads_thinned > 0
    assert beta.rt.operations.retain().event_payloads_thinned == 0


# -- which wins: a value a pack file sets, else the config ---------------------------------------


def test_a_value_the_pack_sets_wins_and_a_built_in_one_defers_to_the_config(worlds: Worlds) -> None:
    config = {"sessions": {"retain_days": 12}, "reranker": {"floor": 0.2},
              "retrieval": {"token_budget": 2500, "freshness": {"episodic_half_life_days": 45}}}
    acme, beta = worlds("classes:\n  raw: {retention_days: 3}\n"
                        "retrieval: {token_budget: 900, relevance_floor: 0.5}", **config)
    assert (acme.rt.config.sessions.retain_days, acme.rt.config.retrieval.token_budget) == (3, 900)
    assert acme.rt.config.reranker.floor == 0.5
    assert acme.rt.memory_pack.classes.episodic.half_life_days == 45  # built-in: the config's
    assert (beta.rt.config.sessions.retain_days, beta.rt.config.retrieval.token_budget) == (12, 2500)
    assert beta.rt.config.reranker.floor == 0.2
    assert beta.rt.memory_pack.classes.raw.retention_days == 12
    assert beta.rt.memory_pack.retrieval.token_budget == 2500


def test_transcript_retention_follows_the_tenant_pack(worlds: Worlds) -> None:
    acme, beta = worlds("classes:\n  raw: {retention_days: 1}")
    for world in (acme, beta):
        _extract(world)
        world.clock.advance(timedelta(days=2))
    assert acme.rt.operations.retain().sessions_blanked == 1
    assert {t.content for t in acme.rt.store.turns("s1")} == {""}
    assert beta.rt.operations.retain().sessions_blanked == 0  # sessions.retain_days, 90
    assert USER_SAYS in {t.content for t in beta.rt.store.turns("s1")}


# -- retrieval.token_budget and classes.<type>.retrieval_budget_pct ------------------------------


def test_a_record_over_the_tenant_token_budget_is_not_returned(worlds: Worlds) -> None:
    acme, beta = worlds("retrieval: {token_budget: 200}")
    long = "Aditya reviewed the release plan: " + " ".join(
        ["the tracker ships with offline sync and audit export."] * 16)
    for world in (acme, beta):  # about 260 tokens: over acme's 200, within the config's 3000
        assert "error" not in _write(world, type="episodic", content=long)
    assert _search(acme, "release plan tracker") == []
    assert [r["content"] for r in _search(beta, "release plan tracker")] == [long]


def test_only_the_tenant_with_shares_reserves_budget(worlds: Worlds) -> None:
    acme, beta = worlds("classes:\n  episodic: {retrieval_budget_pct: 40}\n  procedural: {enabled: false, "
                        "retrieval_budget_pct: 90}")
    assert acme.rt.retriever.reserved_pct == {"episodic": 40}  # a switched-off class holds no share
    assert beta.rt.retriever.reserved_pct == {}


def _ranked(*types: str) -> tuple[list[Any], dict[str, Record]]:
    from retold.models import Candidate

    records = {f"r{i}": make_record(id=f"r{i}", type=t, content="x" * 400) for i, t in enumerate(types)}
    return [Candidate(record_id=rid) for rid in records], records


def test_a_reserved_share_keeps_room_for_its_class() -> None:
    ranked, records = _ranked("semantic", "semantic", "semantic", "episodic")  # 130 tokens each
    shared = fill_budget(ranked, records, 8, 400, lambda r: None)
    assert [p.candidate.record_id for p in shared.chosen] == ["r0", "r1", "r2"]  # episodic crowded out
    kept = fill_budget(ranked, records, 8, 400, lambda r: None, {"episodic": 130})
    assert [p.candidate.record_id for p in kept.chosen] == ["r0", "r1", "r3"]


# -- write_policy.conflict_rule ------------------------------------------------------------------


def test_a_held_conflicting_write_waits_beside_the_current_fact(worlds: Worlds) -> None:
    acme, beta = worlds("write_policy: {conflict_rule: hold}")
    for world in (acme, beta):
        first = _write(world, type="semantic", content="Aditya lives in Berlin.", attribute="city")
        world.clock.advance(timedelta(minutes=5))
        second = _write(world, type="semantic", content="Aditya lives in Lisbon.", attribute="city")
        if world is acme:  # the incumbent stays current; the newer claim is a provisional conflict
            assert second["outcome"] == f"conflict:{first['record_id']}"
            assert world.record(first["record_id"]).status == first["status"] != "superseded"
            assert second["status"] == "provisional"
            assert world.rt.store.conflicts_of(second["record_id"]) == [first["record_id"]]
        else:  # beta, as before packs: the newer source supersedes
            assert second["outcome"] == f"superseded:{first['record_id']}"
            assert world.record(first["record_id"]).status == "superseded"


# -- write_policy.review_sample_rate -------------------------------------------------------------


def test_a_sampled_write_waits_in_review_before_it_enters_the_profile(worlds: Worlds) -> None:
    acme, beta = worlds("write_policy: {review_sample_rate: 1}")
    preference = {"type": "semantic", "content": "Aditya wants answers in British English.",
                  "attribute": "answer_language", "source_kind": "user_statement",
                  "evidence": "always answer me in British English"}
    answers = {}
    for world in (acme, beta):
        world.say("user", "Please always answer me in British English, whatever the topic.")
        answers[world.rt.tenant] = _write(world, **preference)
    assert answers["acme"]["activation"] == "review"
    assert "review_sample_rate" in answers["acme"]["activation_reason"]
    assert [record.id for _, record in acme.rt.store.review_queue(acme.clock.now())] == [
        answers["acme"]["record_id"]]
    assert answers["beta"]["activation"] == "ambient"  # as before packs


def test_sampling_is_by_record_id_and_takes_the_share_asked_for() -> None:
    from retold.activation.policy import sampled
    from retold.clock import new_id

    ids = [new_id() for _ in range(4000)]
    share = sum(sampled(i, 0.25) for i in ids) / len(ids)
    assert 0.22 < share < 0.28
    assert [sampled(i, 0.25) for i in ids[:50]] == [sampled(i, 0.25) for i in ids[:50]]
    assert not any(sampled(i, 0) for i in ids) and all(sampled(i, 1) for i in ids)


# -- write_policy.contradiction_action -----------------------------------------------------------


def test_a_held_contradiction_sends_both_records_to_review(worlds: Worlds) -> None:
    acme, beta = worlds("write_policy: {contradiction_action: hold_and_flag}")
    british = {"type": "semantic", "content": "Aditya wants answers in British English.",
               "attribute": "answer_language", "source_kind": "user_statement",
               "evidence": "always answer me in British English"}
    american = {**british, "content": "Aditya wants answers in American English.",
                "evidence": "always answer me in American English"}
    for world in (acme, beta):
        world.judge.table[(british["content"], american["content"])] = "contradicts"
        world.say("user", "Please always answer me in British English, whatever the topic.")
        first = _write(world, **british)
        assert first["activation"] == "ambient"
        world.clock.advance(timedelta(minutes=5))
        world.say("user", "Actually, always answer me in American English from now on.")
        second = _write(world, **american)
        if world is acme:  # neither replaces the other; a person settles it
            assert second["outcome"] == f"conflict:{first['record_id']}"
            assert world.record(first["record_id"]).status == "confirmed"
            queued = {record.id for _, record in world.rt.store.review_queue(world.clock.now())}
            assert queued == {first["record_id"], second["record_id"]}
        else:  # beta, as before packs: the newer statement supersedes
            assert second["outcome"] == f"superseded:{first['record_id']}"
            assert world.rt.store.review_queue(world.clock.now()) == []


# -- classes.procedural.versioned -----------------------------------------------------------------


def test_an_unversioned_instruction_is_replaced_not_kept_as_history(worlds: Worlds) -> None:
    acme, beta = worlds("classes:\n  procedural: {versioned: false}")
    for world in (acme, beta):
        first = _write(world, type="procedural", content="Always answer Aditya in English.",
                       attribute="answer_language")
        world.clock.advance(timedelta(minutes=5))
        second = _write(world, type="procedural", content="Always answer Aditya in French.",
                        attribute="answer_language")
        assert second["outcome"] == f"superseded:{first['record_id']}"
        found = world.rt.tools.call("memory_search", world.p,
                                    {"queries": ["Always answer Aditya in"], "include_history": True})
        contents = {r["content"] for r in found["results"]}
        if world is acme:  # the old instruction is forgotten, naming its successor
            assert contents == {"Always answer Aditya in French."}
            assert world.record(first["record_id"]).status == "deleted"
            forgotten = [e for e in world.events("record.forgotten") if e["record_id"] == first["record_id"]]
            assert forgotten[-1]["payload"]["by"] == second["record_id"]
            assert forgotten[-1]["payload"]["previous_status"] == first["status"]
            # Like any forget, it is erased once the restore window closes.
            world.clock.advance(timedelta(days=world.rt.config.lifecycle.restore_days + 1))
            assert world.rt.operations.retain().forgotten_erased == 1
            assert world.record(first["record_id"]).content == ""
        else:  # beta, as before packs: the old one stays as history
            assert contents == {"Always answer Aditya in English.", "Always answer Aditya in French."}
            assert world.record(first["record_id"]).status == "superseded"


def test_an_unversioned_pack_keeps_the_history_of_other_classes(worlds: Worlds) -> None:
    acme, _ = worlds("classes:\n  procedural: {versioned: false}")
    first = _write(acme, type="semantic", content="Aditya lives in Berlin.", attribute="city")
    acme.clock.advance(timedelta(minutes=5))
    second = _write(acme, type="semantic", content="Aditya lives in Lisbon.", attribute="city")
    assert second["outcome"] == f"superseded:{first['record_id']}"
    assert acme.record(first["record_id"]).status == "superseded"


# -- classes.procedural.promote_after_repeats -----------------------------------------------------

BRITISH = {"type": "semantic", "content": "Aditya wants replies in British English.",
           "attribute": "answer_language", "source_kind": "user_statement",
           "evidence": "always reply to me in British English"}


def _in_session(world: World, session: str, said: str, **payload: Any) -> dict[str, Any]:
    from retold.models import Principal
    from retold.testing import AGENT

    principal = Principal(AGENT, "aditya", session, None)
    if session != world.p.session_id:
        world.rt.hooks.on_session_start(principal)
    world.say("user", said, principal)
    answer: dict[str, Any] = world.rt.tools.call("memory_write", principal, payload)
    return answer


def test_an_instruction_repeated_in_separate_sessions_becomes_procedural(worlds: Worlds) -> None:
    acme, beta = worlds("classes:\n  procedural: {promote_after_repeats: 2}")
    said = "From now on, always reply to me in British English please."
    for world in (acme, beta):
        first = _in_session(world, "s1", said, **BRITISH)
        # A second turn of the same session is one more reference, not one more session.
        again = _in_session(world, "s1", "As I said: always reply to me in British English.",
                            **{**BRITISH, "evidence": "As I said: always reply to me in British English"})
        assert again["outcome"] == "reinforced" and again["record_id"] == first["record_id"]
        repeat = _in_session(world, "s2", said, **BRITISH)
        if world is beta:  # as before packs: one semantic record, reinforced
            assert repeat["outcome"] == "reinforced" and repeat["record_id"] == first["record_id"]
            continue
        assert repeat["outcome"] == f"promoted:{first['record_id']}"
        promoted = world.record(repeat["record_id"])
        assert (promoted.type, promoted.content, promoted.attribute) == (
            "procedural", BRITISH["content"], "answer_language")
        assert promoted.supersedes_id == first["record_id"] and promoted.evidence == BRITISH["evidence"]
        assert world.record(first["record_id"]).status == "superseded"
        created = [e for e in world.events("record.created") if e["record_id"] == promoted.id][-1]["payload"]
        assert created["sessions"] == ["s1", "s2"] and len(created["evidence_refs"]) == 3
        # A standing instruction the user gave: in the profile, found by search.
        assert repeat["activation"] == "ambient"
        assert [r["id"] for r in _search(world, "replies in British English")] == [promoted.id]


def test_a_repeated_fact_that_is_no_instruction_stays_semantic(worlds: Worlds) -> None:
    acme, _ = worlds("classes:\n  procedural: {promote_after_repeats: 2}")
    city = {"type": "semantic", "content": "Aditya lives in Berlin.", "attribute": "city",
            "source_kind": "user_statement", "evidence": "I live in Berlin"}
    first = _in_session(acme, "s1", "I live in Berlin these days.", **city)
    repeat = _in_session(acme, "s2", "I live in Berlin, as you know.", **city)
    assert repeat["outcome"] == "reinforced" and repeat["record_id"] == first["record_id"]
    assert acme.record(first["record_id"]).type == "semantic"
