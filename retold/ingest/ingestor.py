"""The write path: authorize the request, prepare the claim, decide, apply.

``Ingestor.write`` reads straight down. It authorizes the request (type, content, no
credential, source kind, grants, attribute), prepares the claim outside any transaction
(evidence and entailment, the sensitivity class, the vector), then, inside ONE
``atomic()`` transaction, builds the candidate record (:mod:`retold.ingest.candidate`),
decides what the write does (:mod:`retold.ingest.decider`) under the write lock
(:mod:`retold.ingest.write_lock`) and applies the decision (:mod:`retold.ingest.applier`):
entity creation, the same-entity scan, the nearby search, the judge and every row (record,
embedding, FTS, links, conflicts, event) see one locked state, so two writers cannot both
supersede the same incumbent. Nothing is written on any error. The in-memory vector index
is updated only after the commit.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Literal, cast

import numpy as np

from retold.clock import Clock, Timer
from retold.config import IngestionConfig
from retold.config.pack import BUILTIN_PACK, MemoryPack, RecordClass
from retold.index.embedder import Embedder
from retold.index.vector import VectorIndex
from retold.ingest.applier import Applied, Applier
from retold.ingest.candidate import CandidateBuilder
from retold.ingest.decider import Decided, Decider
from retold.ingest.entities import EntityResolver
from retold.ingest.equivalence import EquivalenceJudge
from retold.ingest.evidence import normalize_ws, source_ref, validate_evidence
from retold.ingest.promotion import Promotion
from retold.ingest.subject import normalize_attribute
from retold.ingest.write_lock import WriteLock
from retold.ingest.write_request import (
    Admission,
    Claim,
    Provenance,
    Refusal,
    WriteError,
    WriteRequest,
    WriteResult,
)
from retold.ingest.write_vector import WriteVector
from retold.models import RECORD_TYPES, Principal, Scope
from retold.policy import grants
from retold.policy.lifecycle import Lifecycle
from retold.policy.secrets import screen
from retold.policy.sensitivity import SensitivityRules
from retold.store import Store

__all__ = ["Ingestor", "Provenance", "WriteError", "WriteRequest", "WriteResult"]

Origin = Literal["tool", "extraction", "host"]
# Tools and the extractor never write system or session_summary rows: only the host
# vouches for a system fact, and summaries come from extraction's own apply stage.
_ALLOWED_SOURCES: dict[str, tuple[str, ...]] = {
    "tool": ("user_statement", "tool_result", "agent_inference"),
    "extraction": ("user_statement", "tool_result", "agent_inference"),
    "host": ("user_statement", "system", "tool_result", "agent_inference"),
}
_DIRECT = ("user_statement", "tool_result")


class Ingestor:
    """The explicit-write path shared by memory_write, the host and extraction."""

    def __init__(
        self,
        store: Store,
        index: VectorIndex,
        embedder: Embedder,
        judge: EquivalenceJudge,
        lifecycle: Lifecycle,
        config: IngestionConfig,
        clock: Clock,
        *,
        incremental_reload_max: int = 512,
        write_timeout_ms: int = 2000,
        sensitivity: SensitivityRules | None = None,
        pack: MemoryPack = BUILTIN_PACK,
        promotion: Promotion | None = None,
    ) -> None:
        self.store, self.index, self.embedder = store, index, embedder
        # A pack's classes.procedural.promote_after_repeats: what a counted reinforcement
        # may turn into a procedural record (None: the pack promotes nothing).
        self.promotion = promotion
        self.lifecycle, self.config, self.clock = lifecycle, config, clock
        self.resolver = EntityResolver(store)
        self._vector = WriteVector(embedder, write_timeout_ms)
        self._candidates = CandidateBuilder(store, self.resolver, lifecycle)
        self._decider = Decider(store, index, judge, lifecycle, config, pack,
                                reload_max=incremental_reload_max)
        self._lock = WriteLock(store, embedder, config, self._decider)
        # The tenant pack's sensitivity classes: each record's class, and the masked text
        # that is embedded and indexed in place of what a redacted class matches.
        self._applier = Applier(store, index, embedder, lifecycle, sensitivity or SensitivityRules(), pack)

    # The judge, the sensitivity rules and the pack belong to the steps that use them; the
    # judge can be swapped here (a test, a reconfigured host) for every step at once.

    @property
    def judge(self) -> EquivalenceJudge:
        """The equivalence judge: entailment of the evidence and the decision's verdicts."""
        return self._decider.judge

    @judge.setter
    def judge(self, judge: EquivalenceJudge) -> None:
        self._decider.judge = judge

    @property
    def sensitivity(self) -> SensitivityRules:
        """The tenant pack's sensitivity classes (classifying, masking)."""
        return self._applier.sensitivity

    @property
    def pack(self) -> MemoryPack:
        """The memory pack: the record classes kept and what a disagreeing write does."""
        return self._decider.pack

    def vector_for(self, content: str) -> tuple[np.ndarray | None, str | None]:
        """The content's vector within ``embedding.write_timeout_ms``, or None with why it is
        late (:class:`~retold.ingest.write_vector.WriteVector`): every write path keeps the
        memory and lets the backfill embed it rather than refusing it."""
        return self._vector(content)

    def write(self, principal: Principal, request: WriteRequest, *, origin: Origin = "tool") -> WriteResult:
        """Write one memory; never raises for bad input: a refusal is a WriteResult with
        an error, and nothing is written."""
        timer = Timer()
        try:
            admission = self._authorize(principal, request, origin)
            timer.mark("permission")
            claim = self._prepare(principal, request, origin, timer)
            now = self.clock.now()
            # Inside a caller's transaction (extraction's apply) the store may hold writes
            # that are not committed yet: nothing read there is kept for later writes.
            keep = not self.store.in_transaction
            # On PostgreSQL the decision is made before the write lock and checked under
            # it (WriteLock); on SQLite the lock is held from the start.
            with self.store.atomic(late_lock=True):
                decided = self._lock.decide(lambda: self._decide(principal, request, admission, claim, now,
                                                                 timer, keep), timer)
                applied = self._applier.apply(principal, claim, decided, timer)
            timer.mark("transaction")
            self._applier.update_index(applied)
            timer.mark("index_update")
        except Refusal as refusal:
            timer.mark("refused")
            return WriteResult(refusal.error.code, None, None, refusal.error.message,
                               timer.as_dict(), refusal.error)
        return self._promoted(self._result(decided, applied, timer), principal)

    # -- authorize: request, permission ----------------------------------------------------

    def _authorize(self, principal: Principal, request: WriteRequest, origin: Origin) -> Admission:
        if request.type not in RECORD_TYPES:
            raise Refusal("invalid_input", f"type must be one of {', '.join(RECORD_TYPES)}")
        if not self.pack.classes.of(cast(RecordClass, request.type)).enabled:
            key = f"classes.{request.type}.enabled"
            raise Refusal("invalid_input", f"{request.type} memories are not kept here (memory pack "
                                           f"{key}: false); nothing was written", pack_key=key)
        if not request.content or not request.content.strip():
            raise Refusal("invalid_input", "content must not be blank")
        if request.evidence is not None and not request.evidence.strip():
            raise Refusal("invalid_input", "evidence must not be blank; omit it instead")
        if found := screen(content=request.content, evidence=request.evidence):  # never stored
            raise Refusal("secret_detected", found.message, kind=found.kind, field=found.field)
        if request.source_kind not in _ALLOWED_SOURCES[origin]:
            raise Refusal(
                "invalid_source_kind",
                f"source_kind {request.source_kind!r} cannot be written here; use one of "
                + ", ".join(_ALLOWED_SOURCES[origin]),
            )
        if isinstance(request.target, str):  # a symbolic label the model chose
            offered = grants.resolve_write_target(self.store, principal, request.target)
            if offered is None:
                raise Refusal("invalid_write_target",
                               f"write_target {request.target!r} is not offered in this session")
            scope = offered
        else:
            scope = request.target or Scope("user", principal.user_id)
        if not grants.can_write(self.store, principal, scope):
            raise Refusal("scope_not_writable", f"scope {scope} is not writable for this agent and user")
        attribute: str | None = None
        if request.type != "episodic":
            if not request.attribute or not request.attribute.strip():
                raise Refusal("invalid_subject", "attribute required for semantic and procedural memories")
            attribute = normalize_attribute(request.attribute)
            if not attribute:
                raise Refusal("invalid_subject", "attribute normalizes to nothing")
        return Admission(scope, attribute)

    def provenance(self, principal: Principal, request: WriteRequest) -> Provenance:
        """Locate the evidence quote in the session, settle the source kind, check entailment.

        A claim whose quote is not found, or not entailed by it, is kept as an
        ``agent_inference`` with a note rather than refused."""
        if request.source_kind == "system":  # the host's own API vouches for it
            return Provenance("system", None, request.evidence, [], None)
        said = self.store.turns(principal.session_id) if principal.session_id else []
        # A quote may come from the transcript as said or as the tenant's pack masks it (what
        # the extractor reads): the masked turns are searched after the raw ones.
        turns = [*said, *(t for t, raw in zip(self.sensitivity.transcript(said), said, strict=True)
                          if t.content != raw.content)]
        check = validate_evidence(
            turns, request.evidence, request.source_kind, turn_hint=request.evidence_turn,
            min_characters=self.config.evidence.min_characters,
            min_words=self.config.evidence.min_words, source_rank=self.lifecycle.ranks,
        )
        notes = [check.note] if check.note else []
        if not check.found or check.turn is None or principal.session_id is None:
            return Provenance("agent_inference", None, None, notes, None)
        ref = source_ref(principal.session_id, check.turn)
        quote = normalize_ws(request.evidence or "")
        kind: str = check.source_kind
        entailment: float | str | None = None
        if kind in _DIRECT and check.note is None:  # only a claim still direct is scored
            score = self.judge.entails(quote, request.content)
            if score is None:
                entailment = "not_checked"
            else:
                entailment = round(float(score), 4)
                if score < self.config.evidence.entail_floor:
                    kind = "agent_inference"
                    notes.append("evidence does not support claim")
        return Provenance(kind, ref, quote, notes, entailment)

    # -- prepare: evidence, sensitivity, vector (outside any transaction) ------------------

    def _prepare(self, principal: Principal, request: WriteRequest, origin: Origin, timer: Timer) -> Claim:
        provenance = self.provenance(principal, request)
        timer.mark("evidence")
        # A label is the extractor's reading of the session under the tenant's own prompt,
        # which asked it for one of the pack's classes; a model's tool call (or the host)
        # was asked for nothing of the kind, and letting it name a class would let the
        # model decide which records count as sensitive.
        label = request.sensitivity_label if origin == "extraction" else None
        sensitivity = self.sensitivity.classify(request.content.strip(), evidence=request.evidence,
                                                attribute=request.attribute, label=label)
        vector, pending = self.vector_for(
            request.content if sensitivity.redacted_content is None else sensitivity.redacted_content)
        timer.mark("embed")
        if pending is not None:
            provenance.notes.append(f"stored without its vector ({pending}): found by its words"
                                    " and entities until the backfill embeds it")
        return Claim(provenance, sensitivity, vector, pending)

    # -- decide (inside the transaction; run again under the write lock if stale) ----------

    def _decide(self, principal: Principal, request: WriteRequest, admission: Admission, claim: Claim,
                now: datetime, timer: Timer, keep: bool) -> Decided:
        candidate = self._candidates.build(principal, request, admission, claim, now)
        timer.mark("entities")
        return self._decider.decide(candidate, claim.vector, now, timer, keep=keep)

    # -- result ----------------------------------------------------------------------------

    def _result(self, decided: Decided, applied: Applied, timer: Timer) -> WriteResult:
        final = self.store.get_record(applied.record_id)
        target = decided.decision.target
        rejudge = ((target.id,) if target is not None
                   and decided.audit.get("held_by") == "write_policy.contradiction_action" else ())
        return WriteResult(applied.outcome, applied.record_id, final.status if final else None,
                           "; ".join(applied.notes) or None, timer.as_dict(), None, applied.event_id, rejudge)

    def _promoted(self, result: WriteResult, principal: Principal) -> WriteResult:
        """A counted reinforcement the pack promotes answers with the procedural record."""
        if self.promotion is None or result.outcome != "reinforced" or not result.record_id:
            return result
        promoted = self.promotion.after_reinforce(result.record_id, principal.agent_id)
        if promoted is None:
            return result
        note = (f"repeated in {len(promoted.sessions)} sessions: promoted to procedural record "
                f"{promoted.record_id}")
        return replace(result, outcome=f"promoted:{promoted.from_id}", record_id=promoted.record_id,
                       status=promoted.status, note="; ".join(n for n in (result.note, note) if n))
