"""Session extraction: claim -> extract -> review -> apply, resumable.

Each stage's output is persisted before the next starts and model calls never run inside
a transaction, so a crash never pays for a hosted call twice and writers never wait on a
model. The apply stage commits every candidate write, the
session summary, ``extracted_at`` and the ``extraction.run`` event in ONE transaction.
A failing model fails the run closed: nothing is written, the attempt is counted (see
:mod:`retold.ingest.retries` for when it is tried again), and ``extraction.failed`` says
why. The claim is a lease the run renews while it works, and every write it makes (a
stage, the apply) first checks that its claim still holds (docs/architecture.md, "The
session path").
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from retold.clock import Clock, Timer, new_id
from retold.config import IngestionConfig
from retold.config.pack import BUILTIN_PACK, MemoryPack
from retold.hosted.spend import counting
from retold.index.embedder import Embedder
from retold.index.vector import VectorIndex
from retold.ingest import extractor as schema  # the JSON form of stage outputs
from retold.ingest.evidence import normalize_ws, validate_evidence
from retold.ingest.extractor import Extractor
from retold.ingest.ingestor import WriteRequest, WriteResult
from retold.ingest.retries import Attempts, ConfigNotice, ModelSetup, RecoverTerms, refusal_reason
from retold.ingest.reviewer import CandidateReviewer
from retold.ingest.screening import Withheld, candidate_secret, screen_decisions, screen_output
from retold.ingest.stage_stop import ExtractionOutcome, StageStop, call_model, parse_stage, stop_unless_held
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
from retold.names import normalize_alias
from retold.policy import grants
from retold.policy.lifecycle import Lifecycle
from retold.policy.secrets import screen
from retold.policy.sensitivity import SensitivityRules
from retold.store import Store
from retold.store.claims import ResumeStage
from retold.store.sessions import SessionRow, Stage

__all__ = ["ACTOR", "FAILED_OUTCOMES", "ExtractionOutcome", "ExtractionResult", "ExtractionRunner"]

log = logging.getLogger(__name__)

ACTOR = "extractor"  # the actor of extraction events
FAILED_OUTCOMES: frozenset[ExtractionOutcome] = frozenset({"failed", "not_configured", "parked"})
"""Outcomes of a run that applied nothing because something is wrong (a worker task fails)."""
_CLAIM_OUTCOMES: dict[str, ExtractionOutcome] = {
    "missing": "missing", "open": "not_ended", "done": "already_extracted", "busy": "busy",
    "parked": "parked", "waiting": "deferred", "blocked": "not_configured"}
_TIMES = ("event_at", "valid_from", "valid_until", "review_at")
_T = TypeVar("_T")


@dataclass(frozen=True)
class ExtractionResult:
    """What one run did; ``counts`` are the counts logged in ``extraction.run``."""

    session_id: str
    outcome: ExtractionOutcome
    counts: dict[str, int] = field(default_factory=dict)
    reason: str | None = None
    event_id: str | None = None

    @property
    def failed(self) -> bool:
        """True when the run applied nothing because something is wrong (not merely
        because the session was done, taken or not due)."""
        return self.outcome in FAILED_OUTCOMES


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
    rejudge: list[str] = field(default_factory=list)  # incumbents held contradictions sent to review

    def reject(self, index: int, cand: CandidateRecord, stage: str, code: str, message: str,
               details: dict[str, Any] | None = None) -> None:
        # Rejected content and reasons stay in extraction.run so extraction can be evaluated.
        if code != "review_rejected":
            self.counts["rejected"] += 1
            self.reasons[code] += 1
        shown = None if code == "secret_detected" else schema.candidate_to_json(cand)  # never the secret
        self.rejected.append({"index": index, "stage": stage, "code": code, "message": message,
                              "details": details or {}, "candidate": shown})


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
    run then ends ``not_configured``, naming ``setup.missing``). ``write`` applies each
    accepted candidate through the explicit-write path (the runtime passes its
    ingestor's, built on first use). ``recover`` bounds the recover sweep.
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
        setup: ModelSetup | None = None,
        recover: RecoverTerms | None = None,
        notice: ConfigNotice | None = None,
        activate: Callable[[Principal, Sequence[str], str], object] | None = None,
        sensitivity: SensitivityRules | None = None,
        pack: MemoryPack = BUILTIN_PACK,
    ) -> None:
        self.store, self.write, self.embedder, self.index = store, write, embedder, index
        self.pack = pack  # which record classes are kept, and each one's confidence floor
        # Runs after the apply transaction commits: the activation policy on each record
        # the run wrote or reinforced, with its own events (it never fails the run).
        self.activate = activate
        self.lifecycle, self.cfg, self.clock = lifecycle, config, clock
        self.extractor, self.reviewer = extractor, reviewer
        self.reload_max = incremental_reload_max
        # The tenant pack's redaction: the extractor and reviewer read the transcript and the
        # stored records masked, and summaries are embedded masked.
        self.sensitivity = sensitivity or SensitivityRules()
        self.summaries = SummaryWriter(store, embedder, lifecycle, clock, self.sensitivity)
        # The notice is shared with using()'s runners: one warning per process and setup.
        self.attempts = Attempts(store, clock, config, setup or ModelSetup(), recover or RecoverTerms(),
                                 notice or ConfigNotice(), [_model_name(m) for m in (extractor, reviewer)],
                                 actor=ACTOR)

    def using(self, extractor: Extractor | None = None,
              reviewer: CandidateReviewer | None = None) -> ExtractionRunner:
        """This runner with other models (a replayed recording, a test double); a model
        left None stays this runner's."""
        return ExtractionRunner(
            self.store, self.write, self.embedder, self.index, self.lifecycle, self.cfg,
            self.clock, extractor or self.extractor, reviewer or self.reviewer,
            incremental_reload_max=self.reload_max, setup=self.attempts.setup,
            recover=self.attempts.recover, notice=self.attempts.notice, activate=self.activate,
            sensitivity=self.sensitivity, pack=self.pack)

    def pending(self) -> list[ResumeStage]:
        """Ended sessions still to extract and not under a live claim (waiting, parked and
        blocked ones included), each with the stage it resumes at."""
        return self.attempts.pending()

    def enqueue_due(self, send: Callable[[str, Stage], None], broker: str | None = None,
                    waiting: frozenset[str] | None = None) -> list[str]:
        """The recover sweep: hand ``send`` the sessions due now and not already queued,
        at most ``queue.recover_batch_size``; return their ids. ``broker`` names the
        running broker instance: a new one means what was queued may be lost, and is due;
        ``waiting`` the sessions whose messages wait in the queue, so a queued session
        without one and without a claim is due too."""
        return self.attempts.enqueue_due(send, broker, waiting)

    def reset(self, session_id: str) -> bool:
        """Forget a session's failed attempts and its parked or blocked state, so it is due
        at once; False when it is not an ended, unextracted session."""
        return self.store.reset_attempts(session_id)

    def run(self, session_id: str, *, force: bool = False) -> ExtractionResult:
        """Extract one ended session; a model or apply failure fails closed, never raises.

        ``force`` re-runs an extracted session from its persisted stages (a model is
        called only for a stage never persisted), so its writes report reinforcement; it
        also runs a parked, waiting or blocked session and starts its attempt count again.
        """
        timer, token = Timer(), new_id()
        before = self.store.get_session(session_id)
        claim = self.attempts.claim(session_id, token, force=force)
        if before is None or claim in _CLAIM_OUTCOMES:  # a run that never started: nothing recorded
            return ExtractionResult(session_id, _CLAIM_OUTCOMES.get(claim, "missing"),
                                    reason=refusal_reason(claim, before))
        self.attempts.note_claim(claim, before, force=force)
        try:
            with self.attempts.lease(session_id, token):
                return self._run(session_id, token, timer)
        except Exception as exc:  # any model or apply failure fails the run closed
            stop = (exc if isinstance(exc, StageStop)
                    else StageStop("failed", "run", "error", type(exc).__name__))
            event = self.attempts.record(session_id, token, stop.outcome, stop.stage, stop.kind,
                                         stop.message, exc, forced=force)
            return ExtractionResult(session_id, stop.outcome, reason=str(stop), event_id=event)

    # -- the stages ----------------------------------------------------------------------------

    def _run(self, session_id: str, token: str, timer: Timer) -> ExtractionResult:
        session = self.store.get_session(session_id)
        assert session is not None
        principal = Principal(session.agent_id, session.user_id, session.id, session.project_id)
        # Hosted models read the transcript masked, and their quotes are checked against it.
        turns = self.sensitivity.transcript(self.store.turns(session.id))
        timer.mark("transcript_prep")
        with counting() as spend:  # this run's hosted answers and tokens, for its event
            output, extract_meta = self._extract(principal, turns, token)
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
        with counting() as review_spend:
            decisions, review_meta = self._review(session_id, turns, items, token)
        timer.mark("candidate_review")
        final = self._apply_review(items, decisions, run)
        try:
            event_id = self._apply(session, principal, final, output.summary, run, timer,
                                   {**extract_meta, **review_meta,
                                    "hosted": {"extract": spend.as_dict(), "review": review_spend.as_dict()}},
                                   token)
        except BaseException as exc:
            # The ingestor updated this process's index inside the rolled-back transaction,
            # so the projection may hold rows and versions that never committed.
            self.index.loaded_version = -1  # the next refresh reloads from the store
            if isinstance(exc, Exception) and not isinstance(exc, StageStop):
                raise StageStop("failed", "apply", "error", type(exc).__name__) from exc
            raise
        self.index.refresh(self.store, self.reload_max)
        if self.activate is not None:
            self.activate(principal, [*(o["record_id"] for o in run.outcomes if o["record_id"]),
                                      *run.rejudge], ACTOR)
        return ExtractionResult(session.id, "extracted", dict(run.counts), None, event_id)

    def _extract(self, principal: Principal, turns: list[Turn],
                 token: str) -> tuple[ExtractionOutput, dict[str, Any]]:
        assert principal.session_id is not None
        row = self.store.stage_row(principal.session_id, "extract")
        if row is not None:  # resume: never pay for the hosted call twice
            stored = row.output
            return parse_stage("extract", lambda: schema.output_from_json(stored, summary_required=False)), {
                "extractor": row.model, "extract_stage": "persisted",
                "extractor_prompt_version": row.prompt_version}
        extractor = self.extractor
        if extractor is None:
            raise StageStop("not_configured", "extract", "not_configured",
                        f"no extractor is configured: {self.attempts.setup.missing}")
        store, cfg = self.store, self.cfg  # known entities and subjects, capped by config
        known = store.readable_entities(grants.readable_scopes(store, principal),
                                        cfg.extraction_context_max_entities)
        subjects = store.active_subjects(grants.writable_scopes(store, principal), self.clock.now(),
                                         cfg.extraction_context_max_subjects)
        # Names and subjects go to the model masked as the transcript is (an id still links them).
        mask = self.sensitivity.mask
        context = ExtractionContext(principal, [(e, kind, mask(name)) for e, kind, name in known],
                                    [mask(s) for s in subjects], extractor.prompt_version)
        answer, withheld = screen_output(
            call_model("extract", lambda: extractor.extract(list(turns), context)))
        self._withheld(principal.session_id, withheld)  # before anything holding them is stored
        data = parse_stage("extract", lambda: schema.output_to_json(answer))
        # The run uses what the stage persisted, so a first run and a resumed run match.
        output = parse_stage("extract", lambda: schema.output_from_json(data, summary_required=False))
        stop_unless_held("extract", self.store.save_stage(
            principal.session_id, "extract", data, _model_name(extractor), extractor.prompt_version,
            claim_token=token))
        return output, {"extractor": _model_name(extractor), "extract_stage": "model",
                        "extractor_prompt_version": extractor.prompt_version}

    def _review(self, session_id: str, turns: list[Turn], items: list[_Item],
                token: str) -> tuple[dict[int, ReviewDecision], dict[str, Any]]:
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
                raise StageStop("not_configured", "review", "not_configured",
                            f"no reviewer is configured: {self.attempts.setup.missing}")
            batch = [(item.candidate, self._review_context(item, turns, reviewer.prompt_version))
                     for item in items]
            answers = call_model("review", lambda: reviewer.review_batch(batch))
            if len(answers) != len(batch):
                raise StageStop("failed", "review", "malformed", f"{len(answers)} decisions for {len(batch)}")
            answers, withheld = screen_decisions(answers, [item.index for item in items])
            self._withheld(session_id, withheld)
            stored = parse_stage("review", lambda: {
                str(item.index): _decision_json(a) for item, a in zip(items, answers, strict=True)})
            stop_unless_held("review", self.store.save_stage(session_id, "review", {"decisions": stored},
                                                   _model_name(reviewer), reviewer.prompt_version,
                                                   claim_token=token))
            meta = {"review_stage": "model", "reviewer": _model_name(reviewer),
                    "reviewer_prompt_version": reviewer.prompt_version}
        return parse_stage("review", lambda: {int(k): _decision_from(v) for k, v in stored.items()}), meta

    def _withheld(self, session_id: str, withheld: list[Withheld]) -> None:
        for item in withheld:
            self.store.append_event("extraction.secret_withheld", ACTOR, item.payload(session_id))

    def _review_context(self, item: _Item, turns: list[Turn], prompt_version: str) -> ReviewContext:
        # The reviewer sees the evidence turn plus its neighbours, and live records for the
        # same entity in the destination scope only.
        window = [t for t in turns if abs(t.turn - item.candidate.evidence_turn) <= 1]
        live = self.store.find_records(
            scopes=[item.scope], subject_entity_id=item.primary, statuses=ACTIVE_STATUSES,
            limit=self.cfg.max_entity_attributes,
        ) if item.primary else []
        # Stored records go to the hosted reviewer masked as the tenant's pack redacts them.
        live = [replace(r, content=self.sensitivity.mask(r.content)) for r in live]
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
        policy = self.pack.classes.of(cand.type)
        if not policy.enabled:  # refused before anything is looked up or written
            raise _Reject("class_disabled", f"{cand.type} memories are not kept here (memory pack "
                          f"classes.{cand.type}.enabled: false)")
        if cand.confidence < policy.extraction_confidence_floor:
            raise _Reject("below_confidence_floor",
                          f"confidence {cand.confidence:g} is below the memory pack's "
                          f"classes.{cand.type}.extraction_confidence_floor "
                          f"{policy.extraction_confidence_floor:g}",
                          confidence=cand.confidence, floor=policy.extraction_confidence_floor)
        if secret := candidate_secret(cand):
            raise _Reject("secret_detected", secret.message, kind=secret.kind, field=secret.field)
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
               summary: SessionSummary, run: _Log, timer: Timer, meta: dict[str, Any], token: str) -> str:
        # Embedding the summary is a model call: it runs before the transaction opens.
        text = normalize_ws(summary.content)[: self.cfg.summary_max_chars].strip()
        if screen(summary=text):  # a stage stored before the screen existed
            text = ""
        vector = self.embedder.embed_documents([self.sensitivity.mask(text)])[0] if text else None
        with self.store.atomic():
            # Under the write lock the claim cannot change hands before this commits.
            stop_unless_held("apply", self.store.holds_claim(session.id, token))
            # Revalidation reads the transcript and grants again under the write lock.
            scope = self._destination(principal)
            turns = self.sensitivity.transcript(self.store.turns(session.id))
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
                run.rejudge.extend(result.rejudge)
                timer.mark("writes")
            summary_outcome, summary_id = self.summaries.write(session, principal, scope, summary,
                                                               text, vector)
            timer.mark("summary_write")
            stop_unless_held("apply", self.store.finish_session(session.id, self.clock.now(), token=token))
            timings: dict[str, Any] = {**timer.as_dict(), "per_record_writes": run.write_ms,
                                       "dedup_and_contradiction": round(run.dedup_ms, 3)}
            return self.store.append_event("extraction.run", ACTOR, {
                **meta, "session_id": session.id, "counts": dict(run.counts), "timings_ms": timings,
                "rejection_reasons": dict(run.reasons), "rejected": run.rejected, "outcomes": run.outcomes,
                "summary": {"outcome": summary_outcome, "record_id": summary_id}, "turns": len(turns),
                "scope": str(scope), "replayed": bool(getattr(self.extractor, "replayed", False))})


def _model_name(model: Extractor | CandidateReviewer | None) -> str:
    return "none" if model is None else str(getattr(model, "model", None) or model.name)
