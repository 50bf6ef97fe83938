"""The session end: evidence checks, resumable stages, timed claims and review.

A real store file, the fake extractor and table reviewer at the model boundaries; the
models' own call logs (``FakeExtractor.calls``, ``TableReviewer.batches``) count how often
each model is paid for.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from retold import build_runtime
from retold.clock import to_iso
from retold.hosted import HostedError
from retold.ingest.extractor import FakeExtractor, ReplayExtractor, output_to_json
from retold.ingest.ingestor import WriteRequest, WriteResult
from retold.ingest.reviewer import TableReviewer
from retold.ingest.session_end import ExtractionResult
from retold.models import (
    CandidateRecord,
    EntityMention,
    ExtractionOutput,
    Principal,
    ReviewContext,
    ReviewDecision,
    Scope,
    SessionSummary,
)
from retold.store import Store
from retold.store.claims import ClaimTerms
from retold.testing import ADITYA, T0, World, make_world
from tests.sql import execute

USER_SAYS = "Please keep every answer short and technical, I read them on my phone."
ASSISTANT_SAYS = "I think you prefer short technical answers overall."
TOOL_SAYS = "timezone lookup result: Europe/Berlin for the account"
SUMMARY = "Aditya asked for short technical answers. The agent looked up the account time zone."


class Crash(BaseException):
    """A worker killed mid-run: nothing in the runner catches it, like SIGKILL."""


class FailingReviewer:
    """A reviewer whose hosted call fails (timeout, malformed answer, provider error)."""

    name = "failing"
    prompt_version = "review-test"

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.calls = 0

    def review_batch(self, items: list[tuple[CandidateRecord, ReviewContext]]) -> list[ReviewDecision]:
        self.calls += 1
        raise self.error


def cand(content: str, evidence: str, turn: int, *, type: str = "semantic",
         attribute: str | None = "answer_style", source_kind: str = "user_statement",
         about: str | None = None, **extra: Any) -> CandidateRecord:
    mentions = [EntityMention("project", about, "about")] if about else []
    return CandidateRecord(type=type, content=content, attribute=attribute,  # type: ignore[arg-type]
                           source_kind=source_kind, evidence=evidence,  # type: ignore[arg-type]
                           evidence_turn=turn, entity_mentions=mentions, **extra)


def output(*candidates: CandidateRecord, summary: str = SUMMARY) -> ExtractionOutput:
    return ExtractionOutput(list(candidates), SessionSummary(summary, ["answers stay short"], []))


PREFERS = cand("Aditya prefers short technical answers.", "keep every answer short and technical", 1)
TIMEZONE = cand("Aditya's account time zone is Europe/Berlin.", "result: Europe/Berlin for the account", 3,
                attribute="timezone", source_kind="tool_result")
PHONE = cand("Aditya reads answers on a phone.", "I read them on my phone", 1, type="episodic",
             attribute=None)


def ended_session(world: World, turns: tuple[tuple[str, str], ...] | None = None) -> str:
    for role, text in turns or (("user", USER_SAYS), ("assistant", ASSISTANT_SAYS), ("tool", TOOL_SAYS)):
        world.say(role, text)
    world.rt.hooks.on_session_end(world.p)
    assert world.p.session_id is not None
    return world.p.session_id


def run(world: World, extractor: Any, reviewer: Any = None, *, force: bool = False) -> ExtractionResult:
    return world.rt.session_end.using(extractor, reviewer or TableReviewer()).run("s1", force=force)


def last_run(world: World) -> dict[str, Any]:
    payload: dict[str, Any] = world.events("extraction.run")[-1]["payload"]
    return payload


def records_with(world: World, content: str) -> list[Any]:
    return world.rt.store.find_records(content=content)


def written(world: World, index: int = 0) -> Any:
    found = [o for o in last_run(world)["outcomes"] if o["index"] == index]
    assert found, last_run(world)["rejected"]
    return world.record(found[0]["record_id"])


def add_project(world: World, name: str) -> str:
    entity = world.rt.store.create_entity("project", name, ADITYA, status="confirmed")
    world.rt.store.add_alias(entity.id, name.lower())
    return entity.id


def stable(world: World) -> dict[str, int]:
    """Table counts that a failed run must not change (it may append events)."""
    counts = world.counts()
    counts.pop("events")
    return counts


# -- session extraction -------------------------------------------------------------------------------

def test_candidate_with_missing_evidence_is_rejected_and_logged(world: World) -> None:
    ended_session(world)
    absent = cand("Aditya loves long essays.", "I love long essays about history", 1, attribute="essays")
    wrong_turn = replace(PREFERS, content="Aditya wants short answers.", evidence_turn=2)
    reviewer = TableReviewer()
    result = run(world, FakeExtractor(output(absent, wrong_turn)), reviewer)
    assert result.outcome == "extracted"
    assert result.counts["rejected"] == 2 and result.counts.get("written", 0) == 0
    event = last_run(world)
    assert event["rejection_reasons"] == {"evidence_not_found": 2}
    assert [r["candidate"]["content"] for r in event["rejected"]] == [absent.content, wrong_turn.content]
    assert records_with(world, absent.content) == [] and records_with(world, wrong_turn.content) == []
    assert reviewer.batches == []  # rejected before any context reaches the reviewer


def test_reviewer_outcomes_are_logged_and_rejection_never_reaches_the_ingestor(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    ended_session(world)
    narrowed = replace(TIMEZONE, content="Aditya's time zone is Europe/Berlin.")
    reviewer = TableReviewer({
        PHONE.content: ReviewDecision("reject", None, "routine detail"),
        TIMEZONE.content: ReviewDecision("revise", narrowed, "narrower wording"),
    })
    requests: list[WriteRequest] = []
    real_write = world.rt.ingestor.write

    def counting(principal: Principal, request: WriteRequest, *, origin: Any = "tool") -> WriteResult:
        requests.append(request)
        return real_write(principal, request, origin=origin)

    monkeypatch.setattr(world.rt.ingestor, "write", counting)
    result = run(world, FakeExtractor(output(PREFERS, PHONE, TIMEZONE)), reviewer)
    assert len(reviewer.batches) == 1 and len(reviewer.batches[0]) == 3  # one call for all
    assert {k: result.counts.get(k) for k in ("review_accepted", "review_rejected", "review_revised")} == {
        "review_accepted": 1, "review_rejected": 1, "review_revised": 1}
    assert [r.content for r in requests] == [PREFERS.content, narrowed.content]
    event = last_run(world)
    assert event["rejected"][0]["code"] == "review_rejected"
    assert event["rejected"][0]["message"] == "routine detail"
    assert (event["reviewer"], event["reviewer_prompt_version"]) == ("table", "table-1")
    assert records_with(world, PHONE.content) == []
    assert records_with(world, narrowed.content)[0].source_kind == "tool_result"


@pytest.mark.parametrize("change", [
    {"source_kind": "user_statement"},
    {"evidence": "I read them on my phone"},
    {"evidence_turn": 2},
    {"entity_mentions": [EntityMention("project", "Atlas", "about")]},
    {"valid_until": T0 + timedelta(days=30)},
])
def test_revision_cannot_strengthen_authority_or_replace_evidence_scope_or_entity(
    world: World, change: dict[str, Any]
) -> None:
    ended_session(world)
    inferred = replace(PREFERS, source_kind="agent_inference")
    revised = replace(inferred, content="Aditya likes brevity.", **change)
    reviewer = TableReviewer({inferred.content: ReviewDecision("revise", revised, "tightened")})
    result = run(world, FakeExtractor(output(inferred)), reviewer)
    assert result.counts["rejected"] == 1 and result.counts.get("written", 0) == 0
    assert last_run(world)["rejected"][0]["code"] == "invalid_review_revision"
    assert records_with(world, revised.content) == [] and records_with(world, inferred.content) == []


def test_accepted_and_revised_candidates_are_revalidated_after_review(world: World) -> None:
    ended_session(world)
    add_project(world, "Atlas")
    about_atlas = cand("Atlas runs in the Europe/Berlin zone.", "result: Europe/Berlin for the account", 3,
                       attribute="zone", source_kind="tool_result", about="Atlas")
    bounded = cand("Aditya is in Berlin this month.", "Europe/Berlin for the account", 3,
                   attribute="location", source_kind="tool_result",
                   valid_from=T0, valid_until=T0 + timedelta(days=30))
    backwards = replace(bounded, valid_until=T0 - timedelta(days=1))

    def meanwhile(candidate: CandidateRecord) -> ReviewDecision:
        # While the model thinks, the transcript is erased and a second "Atlas" appears.
        execute(world.rt.store, "UPDATE session_turns SET content = 'erased' WHERE turn = 1")
        add_project(world, "Atlas")
        return ReviewDecision("accept", None, "fine")

    reviewer = TableReviewer({PREFERS.content: meanwhile,
                              bounded.content: ReviewDecision("revise", backwards, "narrowed")})
    result = run(world, FakeExtractor(output(PREFERS, about_atlas, bounded)), reviewer)
    assert result.counts["rejected"] == 3 and result.counts.get("written", 0) == 0
    rejected = {r["candidate"]["content"]: r for r in last_run(world)["rejected"]}
    assert rejected[PREFERS.content]["code"] == "evidence_not_found"
    assert rejected[PREFERS.content]["stage"] == "revalidation"
    assert rejected[about_atlas.content]["code"] == "entity_ambiguous"
    assert len(rejected[about_atlas.content]["details"]["candidates"]) == 2
    assert rejected[bounded.content]["code"] == "invalid_temporal"


@pytest.mark.parametrize("error", [
    HostedError("timeout", "review call exceeded 30000 ms"),
    HostedError("malformed", "answer does not match the review schema"),
])
def test_reviewer_failure_writes_nothing_and_permits_claim_recovery(world: World, error: HostedError) -> None:
    sid = ended_session(world)
    extractor = FakeExtractor(output(PREFERS, TIMEZONE))
    before = stable(world)
    result = run(world, extractor, FailingReviewer(error))
    assert result.outcome == "failed" and result.reason and error.kind in result.reason
    assert stable(world) == before  # no candidate, no summary, no entity
    session = world.rt.store.get_session(sid)
    assert session is not None and session.extracted_at is None and session.extraction_started_at is None
    failed = world.events("extraction.failed")[-1]["payload"]
    assert (failed["stage"], failed["kind"]) == ("review", error.kind)
    assert USER_SAYS not in json.dumps(failed) and PREFERS.content not in json.dumps(failed)
    assert world.rt.session_end.pending() == [(sid, "review")]
    assert run(world, extractor, TableReviewer()).outcome == "deferred"  # its backoff first
    world.clock.advance(seconds=world.rt.config.ingestion.extraction_retry_seconds)
    retried = run(world, extractor, TableReviewer())
    assert retried.outcome == "extracted" and retried.counts["written"] == 2
    assert len(extractor.calls) == 1  # the persisted extract stage was reused


def test_a_review_answer_of_the_wrong_length_fails_closed(world: World) -> None:
    ended_session(world)
    silent = TableReviewer()
    silent.review_batch = lambda items: []  # type: ignore[method-assign]
    before = stable(world)
    result = run(world, FakeExtractor(output(PREFERS)), silent)
    assert result.outcome == "failed"
    assert world.events("extraction.failed")[-1]["payload"]["kind"] == "malformed"
    assert stable(world) == before


def test_stale_claim_is_reclaimed_after_the_timeout(world: World) -> None:
    ended_session(world)
    extractor = FakeExtractor(output(PREFERS))
    with pytest.raises(Crash):
        run(world, extractor, FailingReviewer(Crash()))
    assert run(world, extractor).outcome == "busy"
    assert world.rt.session_end.pending() == []
    world.clock.advance(minutes=31)
    assert world.rt.session_end.pending() == [("s1", "review")]
    assert run(world, extractor).outcome == "extracted"
    reclaimed = world.events("extraction.reclaimed")
    assert len(reclaimed) == 1 and reclaimed[0]["payload"]["stale_claim"] == to_iso(T0)


def test_summary_is_written_even_without_candidates(tmp_path: Path, store_target: str) -> None:
    world = make_world(tmp_path, store=store_target, summary_ttl_days=7, summary_max_chars=60)
    try:
        sid = ended_session(world)
        result = run(world, FakeExtractor(output()))
        assert result.outcome == "extracted" and result.counts["proposed"] == 0
        summary_id = last_run(world)["summary"]["record_id"]
        record = world.record(summary_id)
        session = world.rt.store.get_session(sid)
        assert session is not None and session.extracted_at == T0
        person = world.rt.store.entities_by_alias("aditya", scopes=[ADITYA], kinds=["person"])[0]
        assert (record.type, record.source_kind) == ("episodic", "session_summary")
        assert record.status == "confirmed"
        assert (record.source_ref, record.attribute, record.confidence) == (f"session:{sid}", "-", 0.8)
        assert record.expires_at == T0 + timedelta(days=7)
        assert record.event_at == session.ended_at and record.scope == ADITYA
        assert record.subject_entity_id == person.id
        assert record.content == SUMMARY[:60].strip()
    finally:
        world.rt.close()


def test_ambiguous_about_entity_is_rejected_with_candidate_ids(world: World) -> None:
    ended_session(world)
    ids = sorted([add_project(world, "Atlas"), add_project(world, "Atlas")])
    about = cand("Atlas prefers short answers.", "keep every answer short and technical", 1,
                 attribute="style", about="Atlas")
    reviewer = TableReviewer()
    result = run(world, FakeExtractor(output(about)), reviewer)
    assert result.counts["rejected"] == 1
    rejected = last_run(world)["rejected"][0]
    assert rejected["code"] == "entity_ambiguous" and sorted(rejected["details"]["candidates"]) == ids
    assert reviewer.batches == []


def test_fewer_than_two_turns_writes_the_summary_only(world: World) -> None:
    ended_session(world, (("user", USER_SAYS),))
    extractor = FakeExtractor(output(PREFERS))
    result = run(world, extractor)
    assert result.outcome == "extracted" and result.counts["proposed"] == 0
    assert records_with(world, PREFERS.content) == []
    assert last_run(world)["summary"]["outcome"] == "created"


# -- evidence, through extraction ---------------------------------------------------------------------

@pytest.mark.parametrize(("candidate", "kind", "status", "ref_turn", "note"), [
    # A quote from an assistant turn cannot back a user statement.
    (replace(PREFERS, evidence="prefer short technical answers overall", evidence_turn=2),
     "agent_inference", "provisional", 2, "downgraded from user_statement"),
    # A tool turn backs tool_result but not user_statement.
    (TIMEZONE, "tool_result", "confirmed", 3, None),
    (replace(TIMEZONE, source_kind="user_statement"), "tool_result", "confirmed", 3, "downgraded"),
    # A caller may claim less than the turn supports.
    (replace(PREFERS, source_kind="agent_inference"), "agent_inference", "provisional", 1, None),
    (PREFERS, "user_statement", "confirmed", 1, None),
])
def test_evidence_rules_hold_through_extraction(
    world: World, candidate: CandidateRecord, kind: str, status: str, ref_turn: int, note: str | None
) -> None:
    ended_session(world)
    run(world, FakeExtractor(output(candidate)))
    record = written(world)
    assert (record.source_kind, record.status) == (kind, status)
    assert record.source_ref == f"session:s1<turn:{ref_turn}>"  # the matched turn
    outcome_note = last_run(world)["outcomes"][0]["note"]
    assert (note is None and outcome_note is None) or (note is not None and note in outcome_note)


def test_missing_quote_rejects_instead_of_downgrading(world: World) -> None:
    # Extraction rejects where memory_write downgrades.
    ended_session(world)
    run(world, FakeExtractor(output(replace(PREFERS, evidence="I never said anything like this"))))
    assert last_run(world)["rejection_reasons"] == {"evidence_not_found": 1}


# -- resumable stages -------------------------------------------------------------------------------------

def test_resume_after_the_extract_stage_calls_only_the_reviewer(world: World) -> None:
    ended_session(world)
    extractor, reviewer = FakeExtractor(output(PREFERS)), TableReviewer()
    with pytest.raises(Crash):
        run(world, extractor, FailingReviewer(Crash()))
    world.clock.advance(minutes=31)
    assert run(world, extractor, reviewer).outcome == "extracted"
    assert (len(extractor.calls), len(reviewer.batches)) == (1, 1)  # 0 new extractor calls
    assert last_run(world)["extract_stage"] == "persisted"


def test_resume_after_the_review_stage_calls_no_model(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    ended_session(world)
    extractor, reviewer = FakeExtractor(output(PREFERS)), TableReviewer()

    def crash(*args: Any, **kwargs: Any) -> bool:
        raise Crash()

    monkeypatch.setattr(world.rt.store, "finish_session", crash)
    with pytest.raises(Crash):
        run(world, extractor, reviewer)
    monkeypatch.undo()
    assert records_with(world, PREFERS.content) == []  # the apply transaction rolled back
    world.clock.advance(minutes=31)
    result = run(world, extractor, reviewer)
    assert result.outcome == "extracted" and result.counts["written"] == 1
    assert (len(extractor.calls), len(reviewer.batches)) == (1, 1)
    assert (last_run(world)["extract_stage"], last_run(world)["review_stage"]) == ("persisted", "persisted")


def test_a_finished_session_is_already_extracted(world: World) -> None:
    ended_session(world)
    extractor, reviewer = FakeExtractor(output(PREFERS)), TableReviewer()
    assert run(world, extractor, reviewer).outcome == "extracted"
    assert run(world, extractor, reviewer).outcome == "already_extracted"
    assert (len(extractor.calls), len(reviewer.batches)) == (1, 1)
    assert world.rt.session_end.pending() == []


def test_forced_rerun_reports_already_reinforced_and_duplicates_nothing(world: World) -> None:
    ended_session(world)
    extractor, reviewer = FakeExtractor(output(PREFERS, PHONE)), TableReviewer()
    assert run(world, extractor, reviewer).counts["written"] == 2
    before = stable(world)
    again = run(world, extractor, reviewer, force=True)
    assert again.outcome == "extracted"
    assert again.counts.get("written", 0) == 0 and again.counts["already_reinforced"] == 2
    assert last_run(world)["summary"]["outcome"] == "already_reinforced"
    after = stable(world)
    assert after["records"] == before["records"] and after["embeddings"] == before["embeddings"]
    assert len(world.rt.store.find_records(source_kind="session_summary")) == 1
    assert len(world.events("extraction.rerun")) == 1
    assert (len(extractor.calls), len(reviewer.batches)) == (1, 1)  # stages reused


def test_rerun_with_a_new_summary_supersedes_the_old_one(world: World) -> None:
    sid = ended_session(world)
    run(world, FakeExtractor(output()))
    first = last_run(world)["summary"]["record_id"]
    world.rt.store.clear_stages(sid)  # the operator asks the model again
    run(world, FakeExtractor(output(summary="A different account of the same session.")), force=True)
    summary = last_run(world)["summary"]
    assert summary["outcome"] == f"superseded:{first}"
    assert world.record(first).status == "superseded"
    assert world.record(summary["record_id"]).supersedes_id == first


# -- configuration, replay and atomicity ---------------------------------------------------------------

def test_not_configured_is_recorded_and_releases_the_claim(world: World) -> None:
    sid = ended_session(world)
    result = world.rt.session_end.run(sid)
    assert result.outcome == "not_configured"
    assert world.events("extraction.not_configured")[-1]["payload"]["stage"] == "extract"
    session = world.rt.store.get_session(sid)
    assert session is not None and session.extracted_at is None and session.extraction_started_at is None
    assert world.rt.session_end.pending() == [(sid, "extract")]
    # With an extractor but no reviewer the extract stage is kept for the next attempt.
    missing_reviewer = world.rt.session_end.using(FakeExtractor(output(PREFERS))).run(sid)
    assert missing_reviewer.outcome == "not_configured"
    assert world.rt.session_end.pending() == [(sid, "review")]


def test_replayed_runs_say_so(world: World, tmp_path: Path) -> None:
    ended_session(world)
    recording = tmp_path / "recorded.json"
    recording.write_text(json.dumps(output_to_json(output(PREFERS))))
    assert run(world, ReplayExtractor(recording)).outcome == "extracted"
    assert last_run(world)["replayed"] is True


def test_a_folder_of_recordings_replays_each_session_by_its_id(world: World, tmp_path: Path) -> None:
    sid = ended_session(world)
    folder = tmp_path / "recordings"
    folder.mkdir()
    replay = ReplayExtractor(folder)
    # No recording for this session: the run fails closed and says why.
    missing = run(world, replay)
    assert missing.outcome == "failed" and "ExtractionOutputError" in (missing.reason or "")
    assert world.rt.store.get_session(sid).extracted_at is None  # type: ignore[union-attr]
    (folder / f"{sid}.json").write_text(json.dumps(output_to_json(output(PREFERS))))
    assert run(world, replay).outcome == "deferred"  # the failed attempt backs off first
    assert run(world, replay, force=True).outcome == "extracted"
    assert last_run(world)["replayed"] is True


def test_the_apply_phase_is_atomic(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    sid = ended_session(world)
    new_project = cand("Orion favours terse replies.", "keep every answer short and technical", 1,
                       attribute="reply_style", about="Orion")
    extractor = FakeExtractor(output(new_project, PREFERS, TIMEZONE))
    before, version = stable(world), world.rt.store.records_version()
    real_write: Callable[..., Any] = world.rt.store.write_record
    inserts: list[str] = []

    def second_insert_fails(record: Any, **parts: Any) -> Any:
        inserts.append(record.id)
        if len(inserts) == 2:
            raise RuntimeError("disk on fire")
        return real_write(record, **parts)

    monkeypatch.setattr(world.rt.store, "write_record", second_insert_fails)
    result = run(world, extractor)
    monkeypatch.undo()
    assert result.outcome == "failed" and "apply" in (result.reason or "")
    assert stable(world) == before and world.rt.store.records_version() == version
    session = world.rt.store.get_session(sid)
    assert session is not None and session.extracted_at is None and session.extraction_started_at is None
    world.clock.advance(seconds=world.rt.config.ingestion.extraction_retry_seconds)
    assert run(world, extractor).counts["written"] == 3
    embedded = world.counts()["embeddings"]
    world.rt.refresh_index()
    assert len(world.rt.index) == embedded  # no phantom rows from the rolled-back attempt


# -- store claims (timed claims) ----------------------------------------------------------------------------

def test_claims_follow_the_session_lifecycle(world: World) -> None:
    store, terms = world.rt.store, ClaimTerms(timedelta(minutes=30))
    world.say("user", USER_SAYS)
    assert store.claim_session("nope", T0, terms, token="a") == "missing"
    assert store.claim_session("s1", T0, terms, token="a") == "open"
    world.rt.hooks.on_session_end(world.p)
    assert store.claim_session("s1", T0, terms, token="a") == "claimed"
    assert store.claim_session("s1", T0 + timedelta(minutes=5), terms, token="b") == "busy"
    assert store.claim_session("s1", T0 + timedelta(minutes=31), terms, token="b") == "reclaimed"
    assert store.finish_session("s1", T0 + timedelta(minutes=32), token="a") is False  # not a's any more
    assert store.finish_session("s1", T0 + timedelta(minutes=32), token="b") is True
    assert store.claim_session("s1", T0 + timedelta(minutes=33), terms, token="c") == "done"
    assert store.claim_session("s1", T0 + timedelta(minutes=33), terms, token="c", force=True) == "claimed"


# -- time-driven review -----------------------------------------------------------------------------------

def test_racing_temporal_workers_flag_each_due_record_once(world: World) -> None:
    ids = []
    for n in range(5):
        result = world.write(type="episodic", content=f"Aditya plans trip number {n} to Lisbon.",
                             review_at=T0 + timedelta(hours=1))
        assert result.record_id is not None
        ids.append(result.record_id)
    before = {rid: world.record(rid) for rid in ids}
    world.clock.advance(hours=2)
    other = build_runtime(world.rt.config, clock=world.clock, embedder=world.embedder, judge=world.judge)
    assert isinstance(other.store, Store) and other.store is not world.rt.store
    barrier, claimed = threading.Barrier(2), []

    def worker(runtime: Any) -> None:
        barrier.wait()
        claimed.append(runtime.operations.review_due())

    threads = [threading.Thread(target=worker, args=(rt,)) for rt in (world.rt, other)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    other.close()
    assert sum(claimed) == 5 and world.rt.operations.review_due() == 0
    events = world.events("record.review_due")
    assert sorted(e["record_id"] for e in events) == sorted(ids)
    assert {e["actor"] for e in events} == {"temporal_reviewer"}
    for rid, old in before.items():
        new = world.record(rid)
        assert new.review_flagged_at == T0 + timedelta(hours=2)
        assert (new.content, new.status, new.source_kind, new.evidence) == (
            old.content, old.status, old.source_kind, old.evidence)


def test_private_scope_is_the_destination_without_a_user_grant(tmp_path: Path, store_target: str) -> None:
    world = make_world(tmp_path, store=store_target, grant_personal=False)
    try:
        ended_session(world)
        episode = replace(PHONE, content="Aditya mentioned reading on a phone.")
        result = run(world, FakeExtractor(output(PREFERS, episode)))
        # A semantic candidate without an about entity is valid only in the user scope.
        assert last_run(world)["rejection_reasons"] == {"invalid_subject": 1}
        assert result.counts["written"] == 1
        assert written(world, 1).scope == Scope("agent", "research-agent/aditya")
        assert last_run(world)["scope"] == "agent:research-agent/aditya"
    finally:
        world.rt.close()
