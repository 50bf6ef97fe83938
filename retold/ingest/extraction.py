"""Session extraction: claim -> extract -> review -> apply, resumable.

Each stage's output is persisted before the next starts and model calls never run inside
a transaction, so a crash never pays for a hosted call twice and writers never wait on a
model. The apply stage commits every candidate write, the
session summary, ``extracted_at`` and the ``extraction.run`` event in ONE transaction.
A failing model fails the run closed: nothing is written, the claim is released so
recovery may retry, and ``extraction.failed`` says why (docs/architecture.md, "The
session path").
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal, TypeVar

from retold.config import IngestionConfig
from retold.hosted import HostedError
from retold.index.embedder import Embedder
from retold.index.vector import VectorIndex
from retold.ingest import extractor as schema  # the JSON form of stage outputs
from retold.ingest.entities import normalize_alias
from retold.ingest.evidence import normalize_ws, validate_evidence
from retold.ingest.extractor import ExtractionOutputError, Extractor
from retold.ingest.ingestor import WriteRequest, WriteResult
from retold.ingest.reviewer import CandidateReviewer
from retold.ingest.summary import SummaryWriter
from retold.models import (
    ACTIVE_STATUSES,
    CandidateRecord,
    EntityMention,
    ExtractionContext,
    ExtractionOutput,
    Principal,
    ReviewContext,
    ReviewDecision,
    Scope,
    SessionSummary,
    Turn,
)
from retold.policy import grants
from retold.policy.lifecycle import Lifecycle
from retold.store import Store
from retold.store.sessions import SessionRow, Stage
from retold.util import Clock, Timer, to_iso

__all__ = ["ACTOR", "ExtractionOutcome", "ExtractionResult", "ExtractionRunner"]

log = logging.getLogger(__name__)

ACTOR = "extractor"  # the actor of extraction events
ExtractionOutcome = Literal[
    "extracted", "already_extracted", "not_configured", "failed", "busy", "missing", "not_ended"
]
_CLAIM_OUTCOMES: dict[str, ExtractionOutcome] = {
    "missing": "missing", "open": "not_ended", "done": "already_extracted", "busy": "busy"}
_TIMES = ("event_at", "valid_from", "valid_until", "review_at")
_STAGES: tuple[Stage, ...] = ("extract", "review")
_T = TypeVar("_T")


@dataclass(frozen=True)
class ExtractionResult:
    """What one run did; ``counts`` are the counts logged in ``extraction.run``."""

    session_id: str
    outcome: ExtractionOutcome
    counts: dict[str, int] = field(default_factory=dict)
    reason: str | None = None
    event_id: str | None = None


class _Stop(Exception):
    """Ends a run without writing: ``not_configured`` or ``failed`` (kind + message)."""

    def __init__(self, outcome: ExtractionOutcome, stage: str, kind: str, message: str) -> None:
        super().__init__(f"{stage} {kind}: {message}")
        self.outcome, self.stage, self.kind, self.message = outcome, stage, kind, message


class _Reject(Exception):
    def __init__(self, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code, self.message, self.details = code, message, details


@dataclass
class _Item:  # a candidate that passed the envelope, with the scope and entity the reviewer saw
    index: int
    candidate: CandidateRecord
    scope: Scope
    primary: str  # "" when the about entity does not exist yet (created at apply)


@dataclass
class _Log:
    counts: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    write_ms: list[float] = field(default_factory=list)
    dedup_ms: float = 0.0

    def reject(self, index: int, cand: CandidateRecord, stage: str, code: str, message: str,
               details: dict[str, Any] | None = None) -> None:
        # Rejected content and reasons stay in extraction.run so extraction can be evaluated.
        if code != "review_rejected":
            self.counts["rejected"] += 1
            self.reasons[code] += 1
        self.rejected.append({"index": index, "stage": stage, "code": code, "message": message,
                              "details": details or {}, "candidate": schema.candidate_to_json(cand)})


def _decision_json(d: ReviewDecision) -> dict[str, Any]:
    cand = d.candidate and schema.candidate_to_json(d.candidate)
    return {"action": d.action, "reason": d.reason, "candidate": cand}


def _decision_from(data: dict[str, Any]) -> ReviewDecision:
    cand = data["candidate"] and schema.candidate_from_json(data["candidate"])
    if data["action"] not in ("accept", "reject", "revise"):
        raise ValueError(f"unknown review action {data['action']!r}")
    return ReviewDecision(data["action"], cand, str(data["reason"]))


class ExtractionRunner:
    """Extracts one session at a time: claim, extract, review, apply.

    ``extractor`` and ``reviewer`` are the hosted models (None when not configured: a
    run then ends ``not_configured``). ``write`` applies each accepted candidate through
    the explicit-write path (the runtime passes its ingestor's, built on first use).
    """

    def __init__(
        self,
        store: Store,
        write: Callable[[Principal, WriteRequest], WriteResult],
        embedder: Embedder,
        index: VectorIndex,
        lifecycle: Lifecycle,
        config: IngestionConfig,
        clock: Clock,
        extractor: Extractor | None,
        reviewer: CandidateReviewer | None,
        *,
        incremental_reload_max: int = 512,
        activate: Callable[[Principal, Sequence[str], str], object] | None = None,
    ) -> None:
        self.store, self.write, self.embedder, self.index = store, write, embedder, index
        # Runs after the apply transaction commits: the activation policy on each record
        # the run wrote or reinforced, with its own events (it never fails the run).
        self.activate = activate
        self.lifecycle, self.cfg, self.clock = lifecycle, config, clock
        self.extractor, self.reviewer = extractor, reviewer
        self.reload_max = incremental_reload_max
        self.summaries = SummaryWriter(store, embedder, lifecycle, clock)
        self.timeout = timedelta(minutes=config.extraction_claim_timeout_minutes)

    def using(self, extractor: Extractor | None = None,
              reviewer: CandidateReviewer | None = None) -> ExtractionRunner:
        """This runner with other models (a replayed recording, a test double); a model
        left None stays this runner's."""
        return ExtractionRunner(
            self.store, self.write, self.embedder, self.index, self.lifecycle, self.cfg,
            self.clock, extractor or self.extractor, reviewer or self.reviewer,
            incremental_reload_max=self.reload_max, activate=self.activate)

    def pending(self) -> list[tuple[str, str]]:
        """Ended sessions still to extract and not under a live claim, each with the stage
        it resumes at: what the recovery task re-enqueues."""
        return self.store.pending_sessions(self.clock.now(), self.timeout)

    def run(self, session_id: str, *, force: bool = False) -> ExtractionResult:
        """Extract one ended session; a model or apply failure fails closed, never raises.

        ``force`` re-runs an extracted session from its persisted stages (a model is
        called only for a stage never persisted), so its writes report reinforcement.
        """
        timer, now = Timer(), self.clock.now()
        before = self.store.get_session(session_id)
        claim = self.store.claim_session(session_id, now, self.timeout, force=force)
        if before is None or claim in _CLAIM_OUTCOMES:
            return ExtractionResult(session_id, _CLAIM_OUTCOMES.get(claim, "missing"),
                                    reason=f"claim {claim}")
        if force and before.extracted_at is not None:
            self.store.append_event("extraction.rerun", ACTOR, {
                "session_id": session_id, "previous_extracted_at": to_iso(before.extracted_at)})
        if claim == "reclaimed":
            stale = before.extraction_started_at
            self.store.append_event("extraction.reclaimed", ACTOR, {
                "session_id": session_id, "stale_claim": None if stale is None else to_iso(stale),
                "claim_timeout_minutes": self.cfg.extraction_claim_timeout_minutes})
        try:
            return self._run(session_id, timer)
        except Exception as exc:  # any model or apply failure fails the run closed
            stop = exc if isinstance(exc, _Stop) else _Stop("failed", "run", "error", type(exc).__name__)
            if stop.outcome == "failed":
                log.warning("extraction of session %s failed at %s", session_id, stop.stage, exc_info=exc)
            self.store.release_claim(session_id, claimed_at=now)  # recovery may retry at once
            persisted = [s for s in _STAGES if self.store.stage_row(session_id, s) is not None]
            # The event names the failure, never transcript or candidate text.
            event = self.store.append_event(f"extraction.{stop.outcome}", ACTOR, {
                "session_id": session_id, "stage": stop.stage, "kind": stop.kind,
                "message": stop.message, "persisted_stages": persisted})
            return ExtractionResult(session_id, stop.outcome, reason=str(stop), event_id=event)

    # -- the stages ----------------------------------------------------------------------------

    def _run(self, session_id: str, timer: Timer) -> ExtractionResult:
        session = self.store.get_session(session_id)
        assert session is not None
        principal = Principal(session.agent_id, session.user_id, session.id, session.project_id)
        turns = self.store.turns(session.id)
        timer.mark("transcript_prep")
        output, extract_meta = self._extract(principal, turns)
        timer.mark("extractor_model")
        run = _Log()
        # A session with fewer than two turns has no exchange to learn from: summary only.
        proposed = output.candidates[: self.cfg.extraction_max_candidates] if len(turns) >= 2 else []
        run.counts["proposed"] = len(proposed)
        scope = self._destination(principal)
        items: list[_Item] = []
        for index, cand in enumerate(proposed):
            try:
                items.append(_Item(index, cand, scope, self._validate(cand, principal, turns, scope)))
            except _Reject as rej:
                run.reject(index, cand, "envelope", rej.code, rej.message, rej.details)
        timer.mark("validation")
        decisions, review_meta = self._review(session_id, turns, items)
        timer.mark("candidate_review")
        final = self._apply_review(items, decisions, run)
        try:
            event_id = self._apply(session, principal, final, output.summary, run, timer,
                                   {**extract_meta, **review_meta})
        except BaseException as exc:
            # The ingestor updated this process's index inside the rolled-back transaction,
            # so the projection may hold rows and versions that never committed.
            self.index.loaded_version = -1  # the next refresh reloads from the store
            if isinstance(exc, Exception):
                raise _Stop("failed", "apply", "error", type(exc).__name__) from exc
            raise
        self.index.refresh(self.store, self.reload_max)
        if self.activate is not None:
            self.activate(principal, [o["record_id"] for o in run.outcomes if o["record_id"]], ACTOR)
        return ExtractionResult(session.id, "extracted", dict(run.counts), None, event_id)

    def _extract(self, principal: Principal, turns: list[Turn]) -> tuple[ExtractionOutput, dict[str, Any]]:
        assert principal.session_id is not None
        row = self.store.stage_row(principal.session_id, "extract")
        if row is not None:  # resume: never pay for the hosted call twice
            stored = row.output
            return _parse("extract", lambda: schema.output_from_json(stored)), {
                "extractor": row.model, "extract_stage": "persisted",
                "extractor_prompt_version": row.prompt_version}
        extractor = self.extractor
        if extractor is None:
            raise _Stop("not_configured", "extract", "not_configured", "no extractor is configured")
        store, cfg = self.store, self.cfg  # known entities and subjects, capped by config
        context = ExtractionContext(principal, store.readable_entities(
            grants.readable_scopes(store, principal), cfg.extraction_context_max_entities),
            store.active_subjects(grants.writable_scopes(store, principal), self.clock.now(),
                                  cfg.extraction_context_max_subjects), extractor.prompt_version)
        answer = _call("extract", lambda: extractor.extract(list(turns), context))
        data = _parse("extract", lambda: schema.output_to_json(answer))
        # The run uses what the stage persisted, so a first run and a resumed run match.
        output = _parse("extract", lambda: schema.output_from_json(data))
        self.store.save_stage(principal.session_id, "extract", data, _model_name(extractor),
                              extractor.prompt_version)
        return output, {"extractor": _model_name(extractor), "extract_stage": "model",
                        "extractor_prompt_version": extractor.prompt_version}

    def _review(self, session_id: str, turns: list[Turn],
                items: list[_Item]) -> tuple[dict[int, ReviewDecision], dict[str, Any]]:
        """ONE reviewer call for every surviving candidate, persisted and
        keyed by candidate index (a resumed run reuses it without calling the model)."""
        row = self.store.stage_row(session_id, "review")
        if row is not None:
            stored: dict[str, Any] = row.output["decisions"]
            meta = {"review_stage": "persisted", "reviewer": row.model,
                    "reviewer_prompt_version": row.prompt_version}
        elif not items:
            return {}, {"review_stage": "none"}
        else:
            reviewer = self.reviewer
            if reviewer is None:
                raise _Stop("not_configured", "review", "not_configured", "no reviewer is configured")
            batch = [(item.candidate, self._review_context(item, turns, reviewer.prompt_version))
                     for item in items]
            answers = _call("review", lambda: reviewer.review_batch(batch))
            if len(answers) != len(batch):
                raise _Stop("failed", "review", "malformed", f"{len(answers)} decisions for {len(batch)}")
            stored = _parse("review", lambda: {
                str(item.index): _decision_json(a) for item, a in zip(items, answers, strict=True)})
            self.store.save_stage(session_id, "review", {"decisions": stored}, _model_name(reviewer),
                                  reviewer.prompt_version)
            meta = {"review_stage": "model", "reviewer": _model_name(reviewer),
                    "reviewer_prompt_version": reviewer.prompt_version}
        return _parse("review", lambda: {int(k): _decision_from(v) for k, v in stored.items()}), meta

    def _review_context(self, item: _Item, turns: list[Turn], prompt_version: str) -> ReviewContext:
        # The reviewer sees the evidence turn plus its neighbours, and live records for the
        # same entity in the destination scope only.
        window = [t for t in turns if abs(t.turn - item.candidate.evidence_turn) <= 1]
        live = self.store.find_records(
            scopes=[item.scope], subject_entity_id=item.primary, statuses=ACTIVE_STATUSES,
            limit=self.cfg.max_entity_attributes,
        ) if item.primary else []
        return ReviewContext(window, item.scope, item.primary, live, prompt_version)

    def _apply_review(self, items: list[_Item], decisions: dict[int, ReviewDecision],
                      run: _Log) -> list[tuple[_Item, CandidateRecord]]:
        final: list[tuple[_Item, CandidateRecord]] = []
        for item in items:
            decision = decisions.get(item.index)
            if decision is None:  # the envelope changed since the persisted review: never unreviewed
                run.reject(item.index, item.candidate, "review", "not_reviewed", "no persisted decision")
            elif decision.action == "reject":  # a rejection never reaches the ingestor
                run.counts["review_rejected"] += 1
                run.reject(item.index, item.candidate, "review", "review_rejected", decision.reason)
            elif decision.action == "revise":
                run.counts["review_revised"] += 1
                problem = self._revision_problem(item.candidate, decision.candidate)
                if problem is not None or decision.candidate is None:
                    run.reject(item.index, item.candidate, "review", "invalid_review_revision",
                               problem or "", {"review_reason": decision.reason})
                else:
                    final.append((item, decision.candidate))
            else:
                run.counts["review_accepted"] += 1
                final.append((item, item.candidate))
        return final

    def _revision_problem(self, old: CandidateRecord, new: CandidateRecord | None) -> str | None:
        """A review may narrow content, attribute or temporal metadata, never widen the
        claim: the evidence, entities and source stay what the extractor found."""
        if new is None:
            return "a revision must carry the revised candidate"
        rank = self.lifecycle.rank
        added = [k for k in _TIMES if getattr(old, k) is None and getattr(new, k) is not None]
        forbidden = [
            (new.type != old.type, "change the record type"),
            (normalize_ws(new.evidence) != normalize_ws(old.evidence)
             or new.evidence_turn != old.evidence_turn, "replace the evidence quote or turn"),
            (rank(new.source_kind) > rank(old.source_kind), "strengthen source_kind"),
            (new.entity_mentions != old.entity_mentions, "substitute entities"),
            (bool(added), f"introduce unsupported {', '.join(added)}"),
        ]
        return next((f"a revision may not {what}" for bad, what in forbidden if bad), None)

    # -- validation (before review, and again under the write lock) --------------------------------

    def _destination(self, principal: Principal) -> Scope:
        """The principal's user scope when writable, else the private scope."""
        user = Scope("user", principal.user_id)
        return user if grants.can_write(self.store, principal, user) else principal.private_scope

    def _validate(self, cand: CandidateRecord, principal: Principal, turns: list[Turn], scope: Scope) -> str:
        """Check a candidate's immutable envelope without writing anything; return the
        primary entity id ("" when apply will create it) or raise _Reject."""
        # Type, content, source kind and time zones were checked by the stage's JSON schema.
        check = validate_evidence(
            turns, cand.evidence, cand.source_kind, turn_hint=cand.evidence_turn,
            min_characters=self.cfg.evidence.min_characters, min_words=self.cfg.evidence.min_words,
            source_rank=self.lifecycle.ranks)
        if not check.found:  # extraction rejects where memory_write would downgrade
            raise _Reject("evidence_not_found", check.note or "evidence not found",
                          evidence_turn=cand.evidence_turn)
        if cand.valid_from and cand.valid_until and cand.valid_from > cand.valid_until:
            raise _Reject("invalid_temporal", "valid_from is after valid_until")
        readable = grants.readable_scopes(self.store, principal)
        found = [self._lookup(m, readable) for m in cand.entity_mentions if m.role == "about"]
        if found:
            return found[0]
        user = Scope("user", principal.user_id)
        if cand.type != "episodic" and scope != user:  # as for an explicit write
            raise _Reject("invalid_subject", "about entity required outside the user scope")
        person = self.store.entities_by_alias(normalize_alias(principal.user_id), scopes=[user],
                                              kinds=["person"])
        return person[0].id if len(person) == 1 else ""

    def _lookup(self, mention: EntityMention, readable: list[Scope]) -> str:
        """Resolve an about mention read-only: nothing is created before apply."""
        if mention.entity_id:  # the ingestor checks it is readable (not_found otherwise)
            return mention.entity_id
        norm = normalize_alias(mention.text)
        if not norm:
            raise _Reject("invalid_input", "an entity mention needs a name")
        hits = self.store.entities_by_alias(norm, scopes=readable, kinds=[mention.kind])
        if len(hits) > 1:  # never guess: reject and record the candidate entity ids
            raise _Reject("entity_ambiguous", f"{mention.text!r} names several entities",
                          candidates=[h.id for h in hits])
        return hits[0].id if hits else ""

    # -- apply: one transaction ------------------------------------------------------------------------

    def _apply(self, session: SessionRow, principal: Principal, final: list[tuple[_Item, CandidateRecord]],
               summary: SessionSummary, run: _Log, timer: Timer, meta: dict[str, Any]) -> str:
        # Embedding the summary is a model call: it runs before the transaction opens.
        text = normalize_ws(summary.content)[: self.cfg.summary_max_chars].strip()
        vector = self.embedder.embed_documents([text])[0] if text else None
        with self.store.atomic():
            # Revalidation reads the transcript and grants again under the write lock.
            scope, turns = self._destination(principal), self.store.turns(session.id)
            timer.skip("writes")
            for item, cand in final:
                try:  # revalidate under the write lock, then use the explicit-write path
                    if scope != item.scope:
                        raise _Reject("scope_not_writable", f"{item.scope} is no longer writable")
                    self._validate(cand, principal, turns, scope)
                except _Reject as rej:
                    run.reject(item.index, cand, "revalidation", rej.code, rej.message, rej.details)
                    continue
                timer.mark("validation")
                result = self.write(principal, WriteRequest(
                    type=cand.type, content=cand.content, attribute=cand.attribute, target=scope,
                    source_kind=cand.source_kind, evidence=cand.evidence, evidence_turn=cand.evidence_turn,
                    event_at=cand.event_at, valid_from=cand.valid_from, valid_until=cand.valid_until,
                    review_at=cand.review_at, entities=tuple(cand.entity_mentions)))
                ms = result.timings_ms
                run.write_ms.append(ms.get("total", 0.0))
                run.dedup_ms += sum(ms.get(k, 0.0) for k in ("dedup_search", "judge", "supersession"))
                if result.error is not None:  # rejects this candidate only; the run goes on
                    run.reject(item.index, cand, "write", result.error.code, result.error.message,
                               result.error.details)
                    continue
                kind = result.outcome.split(":", 1)[0]
                if kind not in ("reinforced", "already_reinforced"):
                    run.counts["written"] += 1  # a new row, whatever it decided about others
                if kind != "created":
                    run.counts[kind] += 1
                run.outcomes.append({"index": item.index, "outcome": result.outcome, "note": result.note,
                                     "record_id": result.record_id, "status": result.status})
                timer.mark("writes")
            summary_outcome, summary_id = self.summaries.write(session, principal, scope, summary,
                                                               text, vector)
            timer.mark("summary_write")
            self.store.finish_session(session.id, self.clock.now())
            timings: dict[str, Any] = {**timer.as_dict(), "per_record_writes": run.write_ms,
                                       "dedup_and_contradiction": round(run.dedup_ms, 3)}
            return self.store.append_event("extraction.run", ACTOR, {
                **meta, "session_id": session.id, "counts": dict(run.counts), "timings_ms": timings,
                "rejection_reasons": dict(run.reasons), "rejected": run.rejected, "outcomes": run.outcomes,
                "summary": {"outcome": summary_outcome, "record_id": summary_id}, "turns": len(turns),
                "scope": str(scope), "replayed": bool(getattr(self.extractor, "replayed", False))})


def _model_name(model: Extractor | CandidateReviewer) -> str:
    return str(getattr(model, "model", None) or model.name)


def _parse(stage: str, convert: Callable[[], _T]) -> _T:
    """A model answer or persisted stage that does not fit the schema fails closed."""
    try:
        return convert()
    except (ExtractionOutputError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise _Stop("failed", stage, "malformed", f"{type(exc).__name__}: {exc}"[:300]) from exc


def _call(stage: str, call: Callable[[], _T]) -> _T:
    """Run one model call outside any transaction; a failure becomes _Stop."""
    try:
        return call()
    except HostedError as exc:
        outcome: ExtractionOutcome = "not_configured" if exc.kind == "not_configured" else "failed"
        raise _Stop(outcome, stage, exc.kind, str(exc)) from exc
    except Exception as exc:  # an unexpected model failure is still closed, by type only
        raise _Stop("failed", stage, "error", type(exc).__name__) from exc
