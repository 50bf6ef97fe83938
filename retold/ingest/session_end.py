"""The session end: claim -> extract -> review -> apply, resumable.

:meth:`SessionEnd.run` is the whole path of an ended session, read straight down: it
claims the session (:mod:`retold.ingest.attempts`), then runs three steps, each a method
that takes the values the step before it returned and returns its own: :meth:`~SessionEnd.extract`
gives :class:`Extracted`, :meth:`~SessionEnd.review` gives :class:`Reviewed` and
:meth:`~SessionEnd.apply` gives :class:`Applied`.

Each stage's output is persisted before the next starts and model calls never run inside
a transaction, so a crash never pays for a hosted call twice and writers never wait on a
model. The apply step commits every candidate write, the session summary, ``extracted_at``
and the ``extraction.run`` event in ONE transaction. A failing model fails the run closed:
nothing is written, the attempt is counted (see :mod:`retold.ingest.attempts` for when it
is tried again), and ``extraction.failed`` says why. The claim is a lease the run renews
while it works, and every write it makes (a stage, the apply) first checks that its claim
still holds (docs/architecture.md, "The session path").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from retold.clock import Clock, Timer
from retold.config import IngestionConfig
from retold.config.pack import BUILTIN_PACK, MemoryPack
from retold.hosted.spend import Spend, counting
from retold.index.embedder import Embedder
from retold.index.vector import VectorIndex
from retold.ingest import extractor as schema  # the JSON form of the extract stage
from retold.ingest.attempts import (
    MALFORMED,
    Attempts,
    Claim,
    ConfigNotice,
    ExtractionOutcome,
    ModelSetup,
    RecoverTerms,
    StageStop,
)
from retold.ingest.envelope import Envelope, Rejected
from retold.ingest.evidence import normalize_ws
from retold.ingest.extractor import Extractor
from retold.ingest.ingestor import WriteRequest, WriteResult
from retold.ingest.reviewer import CandidateReviewer, decision_from_json, decision_to_json
from retold.ingest.screening import screen_decisions, screen_output
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
from retold.policy.secrets import screen
from retold.policy.sensitivity import SensitivityRules
from retold.store import Store
from retold.store.claims import ResumeStage
from retold.store.sessions import SessionRow, Stage

__all__ = [
    "ACTOR", "FAILED_OUTCOMES", "Applied", "Checked", "Extracted", "ExtractionResult", "Models", "Parts",
    "Reviewed", "Rules", "SessionEnd", "Tally",
]

ACTOR = "extractor"  # the actor of extraction events
FAILED_OUTCOMES: frozenset[ExtractionOutcome] = frozenset({"failed", "not_configured", "parked"})
"""Outcomes of a run that applied nothing because something is wrong (a worker task fails)."""


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


# -- what a session end is built from ----------------------------------------------------------


@dataclass(frozen=True)
class Parts:
    """What a run reads and writes through: the store, ``write`` (the explicit-write path
    each accepted candidate goes through), the embedder and this process's vector index,
    the clock, and ``activate``, the activation policy run on each record the run wrote or
    reinforced once the apply has committed (with its own events; it never fails the run)."""

    store: Store
    write: Callable[[Principal, WriteRequest], WriteResult]
    embedder: Embedder
    index: VectorIndex
    clock: Clock
    activate: Callable[[Principal, Sequence[str], str], object] | None = None


@dataclass(frozen=True)
class Rules:
    """What a run holds candidates and itself to: the ingestion config (caps, evidence,
    claims and retries), the lifecycle's source ranks, the tenant pack's redaction (the
    models read the transcript and stored records masked, and summaries are embedded
    masked) and its classes, the recover sweep's terms, and how many changed records the
    index reloads by delta after a run."""

    ingestion: IngestionConfig
    lifecycle: Lifecycle
    sensitivity: SensitivityRules = field(default_factory=SensitivityRules)
    pack: MemoryPack = BUILTIN_PACK
    recover: RecoverTerms = field(default_factory=RecoverTerms)
    reload_max: int = 512


@dataclass(frozen=True)
class Models:
    """The hosted models a run calls, None where none is configured (the run then ends
    ``not_configured``, naming ``setup.missing``), and the setup they come from.
    ``notice`` is shared by the runners :meth:`SessionEnd.using` makes, so a process warns
    once per setup."""

    extractor: Extractor | None = None
    reviewer: CandidateReviewer | None = None
    setup: ModelSetup = field(default_factory=ModelSetup)
    notice: ConfigNotice = field(default_factory=ConfigNotice)


# -- what each step hands the next -------------------------------------------------------------


@dataclass(frozen=True)
class Checked:
    """A proposed candidate whose envelope passed, with the scope and about entity the
    reviewer saw (``primary`` is "" when the entity is created at apply)."""

    index: int
    candidate: CandidateRecord
    scope: Scope
    primary: str


@dataclass
class Tally:
    """What the run decided about its candidates, logged in ``extraction.run``: each step
    adds to the tally the step before it handed on."""

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


@dataclass(frozen=True)
class Extracted:
    """The extract step's result: the session as read under the claim, its transcript as
    the models see it (masked), the summary the extractor wrote, the candidates whose
    envelope passed, the tally so far, and the stage's provenance and hosted spend."""

    session: SessionRow
    principal: Principal
    turns: list[Turn]
    summary: SessionSummary
    candidates: list[Checked]
    tally: Tally
    meta: dict[str, Any]
    spend: Spend


@dataclass(frozen=True)
class Reviewed:
    """The review step's result: each accepted candidate as it will be written (revised
    where the review narrowed it), the tally, and both stages' provenance and spend."""

    accepted: list[tuple[Checked, CandidateRecord]]
    tally: Tally
    meta: dict[str, Any]


@dataclass(frozen=True)
class Applied:
    """The apply step's result: the ``extraction.run`` event, the run's counts, and the
    records the activation policy looks at next (written or reinforced, and incumbents
    that a contradiction sent to review)."""

    event_id: str
    counts: dict[str, int]
    touched: list[str]


def masked_output(output: ExtractionOutput, mask: Callable[[str], str]) -> ExtractionOutput:
    """``output`` with every text that becomes a record, an entity or a summary masked."""
    def mentions(found: list[EntityMention]) -> list[EntityMention]:
        return [replace(m, text=mask(m.text)) for m in found]
    return ExtractionOutput(
        [replace(c, content=mask(c.content), evidence=mask(c.evidence),
                 attribute=None if c.attribute is None else mask(c.attribute),
                 entity_mentions=mentions(c.entity_mentions)) for c in output.candidates],
        replace(output.summary, content=mask(output.summary.content),
                decisions=[mask(d) for d in output.summary.decisions],
                entity_mentions=mentions(output.summary.entity_mentions)))


class SessionEnd:
    """Extracts one ended session at a time: claim, extract, review, apply."""

    def __init__(self, parts: Parts, rules: Rules, models: Models) -> None:
        self.parts, self.rules, self.models = parts, rules, models
        self.envelope = Envelope(parts.store, rules.ingestion, rules.lifecycle, rules.pack)
        self.summaries = SummaryWriter(parts.store, parts.embedder, rules.lifecycle, parts.clock,
                                       rules.sensitivity)
        self.extractor_name, self.reviewer_name = _model_name(models.extractor), _model_name(models.reviewer)
        self.attempts = Attempts(parts.store, parts.clock, rules.ingestion, models.setup, rules.recover,
                                 models.notice, [self.extractor_name, self.reviewer_name], actor=ACTOR)

    def using(self, extractor: Extractor | None = None,
              reviewer: CandidateReviewer | None = None) -> SessionEnd:
        """This session end with other models (a replayed recording, a test double); a
        model left None stays this one's."""
        models = replace(self.models, extractor=extractor or self.models.extractor,
                         reviewer=reviewer or self.models.reviewer, setup=self.attempts.setup,
                         notice=self.attempts.notice)
        return SessionEnd(self.parts, replace(self.rules, recover=self.attempts.recover), models)

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
        return self.parts.store.reset_attempts(session_id)

    def run(self, session_id: str, *, force: bool = False) -> ExtractionResult:
        """Extract one ended session; a model or apply failure fails closed, never raises.

        ``force`` re-runs an extracted session from its persisted stages (a model is
        called only for a stage never persisted), so its writes report reinforcement; it
        also runs a parked, waiting or blocked session and starts its attempt count again.
        """
        timer = Timer()
        claim = self.attempts.claim(session_id, force=force)
        if claim.refused is not None:  # a run that never started: nothing recorded
            return ExtractionResult(session_id, claim.refused, reason=claim.reason)
        try:
            with self.attempts.lease(claim):
                extracted = self.extract(claim, timer)
                reviewed = self.review(claim, extracted, timer)
                applied = self.apply(claim, extracted, reviewed, timer)
                self.parts.index.refresh(self.parts.store, self.rules.reload_max)
                if self.parts.activate is not None:
                    self.parts.activate(extracted.principal, applied.touched, ACTOR)
        except Exception as exc:  # any model or apply failure fails the run closed
            stop = StageStop.of(exc)
            event_id = self.attempts.record(claim, stop, exc)
            return ExtractionResult(session_id, stop.outcome, reason=str(stop), event_id=event_id)
        return ExtractionResult(session_id, "extracted", applied.counts, None, applied.event_id)

    # -- the steps -----------------------------------------------------------------------------------

    def extract(self, claim: Claim, timer: Timer) -> Extracted:
        """Read the session's transcript, reuse its persisted extract stage or ask the
        extractor and persist the answer, then check each proposed candidate's envelope."""
        store, cfg, mask = self.parts.store, self.rules.ingestion, self.rules.sensitivity.mask
        session = store.get_session(claim.session_id)
        assert session is not None
        principal = Principal(session.agent_id, session.user_id, session.id, session.project_id)
        # Hosted models read the transcript masked, and their quotes are checked against it.
        turns = self.rules.sensitivity.transcript(store.turns(session.id))
        timer.mark("transcript_prep")
        with counting() as spend:  # this run's hosted answers and tokens, for its event
            row = store.stage_row(session.id, "extract")
            if row is not None:  # resume: never pay for the hosted call twice
                data = row.output
                meta = {"extractor": row.model, "extract_stage": "persisted",
                        "extractor_prompt_version": row.prompt_version}
            elif (extractor := self.models.extractor) is None:
                raise StageStop("not_configured", "extract", "not_configured",
                                f"no extractor is configured: {self.attempts.setup.missing}")
            else:
                # Known entities and subjects, capped by config, go to the model masked as the
                # transcript is (an id still links them).
                known = store.readable_entities(grants.readable_scopes(store, principal),
                                                cfg.extraction_context_max_entities)
                subjects = store.active_subjects(grants.writable_scopes(store, principal),
                                                 self.parts.clock.now(), cfg.extraction_context_max_subjects)
                context = ExtractionContext(principal, [(e, kind, mask(name)) for e, kind, name in known],
                                            [mask(s) for s in subjects], extractor.prompt_version)
                try:
                    answer = extractor.extract(list(turns), context)
                except Exception as exc:
                    raise StageStop.model_failed("extract", exc) from exc
                # A live model read the masked transcript and can only quote placeholders; a
                # replay recorded before the pack masked anything quotes the raw text. Masking
                # what came back makes both the same, so the quotes are found in the masked
                # transcript and no raw identifier reaches a stage, a record or an event.
                if self.rules.sensitivity.redacts:
                    answer = masked_output(answer, mask)
                answer, withheld = screen_output(schema.known_labels(answer, self.rules.sensitivity.labels))
                for item in withheld:  # recorded before anything holding them is stored
                    store.append_event("extraction.secret_withheld", ACTOR, item.payload(session.id))
                try:
                    data = schema.output_to_json(answer)
                except MALFORMED as exc:
                    raise StageStop.malformed("extract", exc) from exc
                meta = {"extractor": self.extractor_name, "extract_stage": "model",
                        "extractor_prompt_version": extractor.prompt_version}
            try:  # the run uses what the stage persisted, so a first run and a resumed run match
                output = schema.output_from_json(data, summary_required=False)
            except MALFORMED as exc:
                raise StageStop.malformed("extract", exc) from exc
            # Whatever extractor answered (a replay, a double, a stage persisted under an
            # older pack), a label the pack does not decide by the extractor means nothing:
            # it is dropped before the stage is persisted, and again from a persisted one.
            output = schema.known_labels(output, self.rules.sensitivity.labels)
            if row is None and not store.save_stage(session.id, "extract", data, self.extractor_name,
                                                    meta["extractor_prompt_version"],
                                                    claim_token=claim.token):
                raise StageStop.claim_lost("extract")
        timer.mark("extractor_model")
        tally = Tally()
        # A session with fewer than two turns has no exchange to learn from: summary only.
        proposed = output.candidates[: cfg.extraction_max_candidates] if len(turns) >= 2 else []
        tally.counts["proposed"] = len(proposed)
        scope = self.envelope.destination(principal)
        candidates: list[Checked] = []
        for index, cand in enumerate(proposed):
            try:
                primary = self.envelope.check(cand, principal, turns, scope)
            except Rejected as rej:
                tally.reject(index, cand, "envelope", rej.code, rej.message, rej.details)
            else:
                candidates.append(Checked(index, cand, scope, primary))
        timer.mark("validation")
        return Extracted(session, principal, turns, output.summary, candidates, tally, meta, spend)

    def review(self, claim: Claim, extracted: Extracted, timer: Timer) -> Reviewed:
        """ONE reviewer call for every checked candidate, persisted and keyed by candidate
        index (a resumed run reuses it without calling the model); then each candidate is
        accepted, rejected or, when the revision only narrows it, revised."""
        store, candidates, tally = self.parts.store, extracted.candidates, extracted.tally
        with counting() as spend:
            row = store.stage_row(claim.session_id, "review")
            if row is not None:
                stored: dict[str, Any] = row.output["decisions"]
                meta = {"review_stage": "persisted", "reviewer": row.model,
                        "reviewer_prompt_version": row.prompt_version}
            elif not candidates:
                stored, meta = {}, {"review_stage": "none"}
            elif (reviewer := self.models.reviewer) is None:
                raise StageStop("not_configured", "review", "not_configured",
                                f"no reviewer is configured: {self.attempts.setup.missing}")
            else:
                # The reviewer sees the evidence turn plus its neighbours, and live records for
                # the same entity in the destination scope only, masked as the pack redacts them.
                batch = []
                for item in candidates:
                    window = [t for t in extracted.turns if abs(t.turn - item.candidate.evidence_turn) <= 1]
                    live = store.find_records(
                        scopes=[item.scope], subject_entity_id=item.primary, statuses=ACTIVE_STATUSES,
                        limit=self.rules.ingestion.max_entity_attributes) if item.primary else []
                    live = [replace(r, content=self.rules.sensitivity.mask(r.content)) for r in live]
                    batch.append((item.candidate, ReviewContext(window, item.scope, item.primary, live,
                                                                reviewer.prompt_version)))
                try:
                    answers = reviewer.review_batch(batch)
                except Exception as exc:
                    raise StageStop.model_failed("review", exc) from exc
                if len(answers) != len(batch):
                    raise StageStop("failed", "review", "malformed",
                                    f"{len(answers)} decisions for {len(batch)}")
                answers, withheld = screen_decisions(answers, [item.index for item in candidates])
                for secret in withheld:
                    store.append_event("extraction.secret_withheld", ACTOR, secret.payload(claim.session_id))
                try:
                    stored = {str(item.index): decision_to_json(a)
                              for item, a in zip(candidates, answers, strict=True)}
                except MALFORMED as exc:
                    raise StageStop.malformed("review", exc) from exc
                if not store.save_stage(claim.session_id, "review", {"decisions": stored}, self.reviewer_name,
                                        reviewer.prompt_version, claim_token=claim.token):
                    raise StageStop.claim_lost("review")
                meta = {"review_stage": "model", "reviewer": self.reviewer_name,
                        "reviewer_prompt_version": reviewer.prompt_version}
            try:
                decisions: dict[int, ReviewDecision] = {
                    int(k): decision_from_json(v) for k, v in stored.items()}
            except MALFORMED as exc:
                raise StageStop.malformed("review", exc) from exc
        timer.mark("candidate_review")
        hosted = {"extract": extracted.spend.as_dict(), "review": spend.as_dict()}
        accepted: list[tuple[Checked, CandidateRecord]] = []
        for item in candidates:
            decision = decisions.get(item.index)
            if decision is None:  # the envelope changed since the persisted review: never unreviewed
                tally.reject(item.index, item.candidate, "review", "not_reviewed", "no persisted decision")
            elif decision.action == "reject":  # a rejection never reaches the ingestor
                tally.counts["review_rejected"] += 1
                tally.reject(item.index, item.candidate, "review", "review_rejected", decision.reason)
            elif decision.action == "revise":
                tally.counts["review_revised"] += 1
                problem = self.envelope.revision_problem(item.candidate, decision.candidate)
                if problem is not None or decision.candidate is None:
                    tally.reject(item.index, item.candidate, "review", "invalid_review_revision",
                                 problem or "", {"review_reason": decision.reason})
                else:  # the label stays the extractor's: the reviewer is not asked for one
                    label = item.candidate.sensitivity
                    accepted.append((item, replace(decision.candidate, sensitivity=label)))
            else:
                tally.counts["review_accepted"] += 1
                accepted.append((item, item.candidate))
        return Reviewed(accepted, tally, {**extracted.meta, **meta, "hosted": hosted})

    def apply(self, claim: Claim, extracted: Extracted, reviewed: Reviewed, timer: Timer) -> Applied:
        """Embed the summary, then in ONE transaction: check the claim still holds,
        revalidate each accepted candidate and write it through the explicit-write path,
        write the summary, mark the session extracted and append ``extraction.run``."""
        store, session, principal = self.parts.store, extracted.session, extracted.principal
        tally, mask = reviewed.tally, self.rules.sensitivity.mask
        try:
            # Embedding the summary is a model call: it runs before the transaction opens.
            text = normalize_ws(extracted.summary.content)[: self.rules.ingestion.summary_max_chars].strip()
            if screen(summary=text):  # a stage stored before the screen existed
                text = ""
            vector = self.parts.embedder.embed_documents([mask(text)])[0] if text else None
            with store.atomic():
                # Under the write lock the claim cannot change hands before this commits.
                if not store.holds_claim(session.id, claim.token):
                    raise StageStop.claim_lost("apply")
                # Revalidation reads the transcript and grants again under the write lock.
                scope = self.envelope.destination(principal)
                turns = self.rules.sensitivity.transcript(store.turns(session.id))
                timer.skip("writes")
                for item, cand in reviewed.accepted:
                    try:  # revalidate under the write lock, then use the explicit-write path
                        if scope != item.scope:
                            raise Rejected("scope_not_writable", f"{item.scope} is no longer writable")
                        self.envelope.check(cand, principal, turns, scope)
                    except Rejected as rej:
                        tally.reject(item.index, cand, "revalidation", rej.code, rej.message, rej.details)
                        continue
                    timer.mark("validation")
                    result = self.parts.write(principal, WriteRequest(
                        type=cand.type, content=cand.content, attribute=cand.attribute, target=scope,
                        source_kind=cand.source_kind, evidence=cand.evidence,
                        evidence_turn=cand.evidence_turn, event_at=cand.event_at,
                        valid_from=cand.valid_from, valid_until=cand.valid_until, review_at=cand.review_at,
                        entities=tuple(cand.entity_mentions), sensitivity_label=cand.sensitivity))
                    ms = result.timings_ms
                    tally.write_ms.append(ms.get("total", 0.0))
                    tally.dedup_ms += sum(ms.get(k, 0.0) for k in ("dedup_search", "judge", "supersession"))
                    if result.error is not None:  # rejects this candidate only; the run goes on
                        tally.reject(item.index, cand, "write", result.error.code, result.error.message,
                                     result.error.details)
                        continue
                    kind = result.outcome.split(":", 1)[0]
                    if kind not in ("reinforced", "already_reinforced"):
                        tally.counts["written"] += 1  # a new row, whatever it decided about others
                    if kind != "created":
                        tally.counts[kind] += 1
                    tally.outcomes.append({"index": item.index, "outcome": result.outcome,
                                           "note": result.note, "record_id": result.record_id,
                                           "status": result.status})
                    tally.rejudge.extend(result.rejudge)
                    timer.mark("writes")
                summary_outcome, summary_id = self.summaries.write(session, principal, scope,
                                                                   extracted.summary, text, vector)
                timer.mark("summary_write")
                if not store.finish_session(session.id, self.parts.clock.now(), token=claim.token):
                    raise StageStop.claim_lost("apply")
                timings: dict[str, Any] = {**timer.as_dict(), "per_record_writes": tally.write_ms,
                                           "dedup_and_contradiction": round(tally.dedup_ms, 3)}
                event_id = store.append_event("extraction.run", ACTOR, {
                    **reviewed.meta, "session_id": session.id, "counts": dict(tally.counts),
                    "timings_ms": timings, "rejection_reasons": dict(tally.reasons),
                    "rejected": tally.rejected, "outcomes": tally.outcomes,
                    "summary": {"outcome": summary_outcome, "record_id": summary_id}, "turns": len(turns),
                    "scope": str(scope), "replayed": bool(getattr(self.models.extractor, "replayed", False))})
        except BaseException as exc:
            # The ingestor updated this process's index inside the rolled-back transaction,
            # so the projection may hold rows and versions that never committed.
            self.parts.index.loaded_version = -1  # the next refresh reloads from the store
            if isinstance(exc, Exception) and not isinstance(exc, StageStop):
                raise StageStop.of(exc, "apply") from exc
            raise
        touched = [*(o["record_id"] for o in tally.outcomes if o["record_id"]), *tally.rejudge]
        return Applied(event_id, dict(tally.counts), touched)


def _model_name(model: Extractor | CandidateReviewer | None) -> str:
    return "none" if model is None else str(getattr(model, "model", None) or model.name)
