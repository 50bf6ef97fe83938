"""The write path: validate (credentials are refused), check evidence, decide
reinforce/supersede/conflict, write.

``Ingestor.write`` validates, checks evidence and entailment, embeds, then decides and
writes inside ONE ``atomic()`` transaction: entity creation, the same-entity scan, the
nearby search, the judge and every row (record, embedding, FTS, links, conflicts, event)
see one locked state, so two writers cannot both supersede the same incumbent. Nothing is
written on any error. The in-memory vector index is updated only after the commit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any, Literal, cast

import numpy as np

from retold.clock import Clock, Timer, new_id
from retold.config import IngestionConfig
from retold.config.pack import BUILTIN_PACK, MemoryPack, RecordClass
from retold.index.embedder import Embedder
from retold.index.vector import VectorIndex
from retold.ingest.decision import Decision, decide_nearby, decide_subject
from retold.ingest.entities import EntityError, EntityResolver
from retold.ingest.equivalence import EquivalenceJudge
from retold.ingest.evidence import normalize_ws, source_ref, validate_evidence
from retold.ingest.promotion import Promotion
from retold.ingest.staleness import DECISIVE_VERDICTS, check_decision
from retold.ingest.subject import normalize_attribute, subject_of
from retold.ingest.summary import retire_superseded
from retold.ingest.write_request import Provenance, Refusal, WriteError, WriteRequest, WriteResult
from retold.ingest.write_scope import WriteScopes
from retold.ingest.write_vector import WriteVector
from retold.models import RECORD_TYPES, Principal, Record, Resolution, Scope
from retold.policy import grants
from retold.policy.lifecycle import Lifecycle
from retold.policy.secrets import screen
from retold.policy.sensitivity import Sensitivity, SensitivityRules
from retold.policy.validity import closed_at, starts
from retold.store import Embedding, NewEvent, Store
from retold.store.write_window import WriteWindow

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
# Stages whose timing the event cannot contain: they end after it is written.
_PENDING = ["event_log", "transaction", "index_update", "total"]
NEARBY_K = 10
# A change this process must apply to its own index after commit: record id, the
# records_version it committed under, and its new vector and seq (None: the vector is unchanged).
_IndexChange = tuple[str, int, np.ndarray | None, int | None]


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
        self.store, self.index, self.embedder, self.judge = store, index, embedder, judge
        # The tenant pack's sensitivity classes: each record's class, and the masked text
        # that is embedded and indexed in place of what a redacted class matches.
        self.sensitivity = sensitivity or SensitivityRules()
        self.pack = pack  # the record classes kept and what a disagreeing write does
        # A pack's classes.procedural.promote_after_repeats: what a counted reinforcement
        # may turn into a procedural record (None: the pack promotes nothing).
        self.promotion = promotion
        self.lifecycle, self.config, self.clock = lifecycle, config, clock
        self.resolver = EntityResolver(store)
        self._reload_max = incremental_reload_max
        self._vector = WriteVector(embedder, write_timeout_ms)
        # The eligible set of each scope the writes go to, kept by delta: read whole, it
        # cost every write in proportion to the scope.
        self._scopes = WriteScopes(store, incremental_reload_max)

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
            scope, attribute = self._authorize(principal, request, origin)
            timer.mark("permission")
            provenance = self.provenance(principal, request)
            timer.mark("evidence")
            # A label is the extractor's reading of the session under the tenant's own
            # prompt, which asked it for one of the pack's classes; a model's tool call (or
            # the host) was asked for nothing of the kind, and letting it name a class would
            # let the model decide which records count as sensitive.
            label = request.sensitivity_label if origin == "extraction" else None
            sensitivity = self.sensitivity.classify(request.content.strip(), evidence=request.evidence,
                                                    attribute=request.attribute, label=label)
            vector, pending = self.vector_for(
                request.content if sensitivity.redacted_content is None else sensitivity.redacted_content)
            timer.mark("embed")
            if pending is not None:
                provenance.notes.append(f"stored without its vector ({pending}): found by its words"
                                        " and entities until the backfill embeds it")
            result = self._decide_and_write(principal, request, scope, attribute, provenance, vector, timer,
                                            pending, sensitivity)
        except Refusal as refusal:
            timer.mark("refused")
            return WriteResult(refusal.error.code, None, None, refusal.error.message,
                               timer.as_dict(), refusal.error)
        if self.promotion is not None and result.outcome == "reinforced" and result.record_id:
            promoted = self.promotion.after_reinforce(result.record_id, principal.agent_id)
            if promoted is not None:  # the caller now holds the procedural record
                note = (f"repeated in {len(promoted.sessions)} sessions: promoted to procedural record "
                        f"{promoted.record_id}")
                result = replace(result, outcome=f"promoted:{promoted.from_id}", record_id=promoted.record_id,
                                 status=promoted.status, note="; ".join(n for n in (result.note, note) if n))
        return result

    # -- steps 1-3: request, permission, evidence ------------------------------------------

    def _authorize(
        self, principal: Principal, request: WriteRequest, origin: Origin
    ) -> tuple[Scope, str | None]:
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
        return scope, attribute

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

    # -- steps 4-8 inside one transaction ------------------------------------------------------

    def _decide_and_write(
        self,
        principal: Principal,
        request: WriteRequest,
        scope: Scope,
        attribute: str | None,
        prov: Provenance,
        vector: np.ndarray | None,
        timer: Timer,
        pending: str | None = None,
        sensitivity: Sensitivity | None = None,
    ) -> WriteResult:
        now = self.clock.now()
        notes = list(prov.notes)
        # Inside a caller's transaction (extraction's apply) the store may hold writes that
        # are not committed yet: nothing read there is kept for later writes.
        keep = not self.store.in_transaction
        # The decision is made before the store's write lock where the store allows it
        # (PostgreSQL), then checked against what other writers changed meanwhile and made
        # again under the lock if it may be stale (docs/decisions.md, "Writers decide
        # before they take the write lock"). On SQLite the lock is held from the start.
        with self.store.atomic(late_lock=True):
            for attempt in ("before_lock", "under_lock"):
                prov.notes[:] = notes
                payload: dict[str, Any] = {"judge": self.judge.name, "origin_scope": str(scope),
                                           "requested_source_kind": request.source_kind}
                candidate, links, ambiguous, decision, read = self._prepare(
                    principal, request, scope, attribute, prov, vector, now, payload, timer, sensitivity,
                    keep=keep)
                window = self.store.lock_for_write([e for e, _ in links], model=self.embedder.name,
                                                   version=self.embedder.version)
                timer.mark("write_lock")
                if attempt == "under_lock" or self._stands(window, candidate, vector, read, payload):
                    break
            if attempt == "under_lock":
                payload["decided_again"] = True

            def event(outcome: str, record_id: str) -> NewEvent:
                # Built once the rows are written, so it can report what writing cost.
                timer.mark("persistence")
                payload.update(
                    source_kind=prov.source_kind, source_ref=prov.source_ref, notes=prov.notes,
                    entailment=prov.entailment, outcome=outcome, ambiguous_mention=ambiguous,
                    timings_ms={k: v for k, v in timer.as_dict().items() if k != "total"},
                    timings_pending=_PENDING,
                )
                kind = "record.reinforced" if decision.action == "reinforce" else "record.created"
                return NewEvent(kind, principal.agent_id, payload, record_id)

            if pending is not None:
                payload["embedding_pending"] = pending
            outcome, record_id, changes, event_id = self._apply(candidate, decision, vector, links,
                                                                now, payload, event, pending)
            timer.mark("event_log")
        timer.mark("transaction")
        for changed_id, version, new_vector, seq in changes:
            if new_vector is None:
                self.index.acknowledge(changed_id, version)
            else:
                self.index.upsert(changed_id, new_vector, version, seq)
        timer.mark("index_update")
        final = self.store.get_record(record_id)
        rejudge = ((decision.target.id,) if decision.target is not None
                   and payload.get("held_by") == "write_policy.contradiction_action" else ())
        return WriteResult(outcome, record_id, final.status if final else None,
                           "; ".join(prov.notes) or None, timer.as_dict(), None, event_id, rejudge)

    def _prepare(
        self, principal: Principal, request: WriteRequest, scope: Scope, attribute: str | None,
        prov: Provenance, vector: np.ndarray | None, now: datetime, payload: dict[str, Any], timer: Timer,
        sensitivity: Sensitivity | None = None, *, keep: bool = True,
    ) -> tuple[Record, list[tuple[str, str]], list[dict[str, Any]], Decision, dict[str, int]]:
        """Resolve the entities, build the candidate record and decide what to do with it;
        also return every stored record the decision read, with the version it read."""
        primary, links, ambiguous = self._entities(principal, request, scope, prov.notes)
        timer.mark("entities")
        status = self.lifecycle.initial_status(prov.source_kind)
        candidate = Record(
            id=new_id(), type=request.type, version=1,  # type: ignore[arg-type]
            content=request.content.strip(), subject=subject_of(primary, attribute),
            subject_entity_id=primary, attribute=attribute, scope=scope,
            source_kind=prov.source_kind,  # type: ignore[arg-type]
            source_ref=prov.source_ref, creator_agent_id=principal.agent_id,
            evidence=prov.evidence, created_at=now, event_at=request.event_at or now,
            expires_at=self.lifecycle.initial_expiry(prov.source_kind, now),
            valid_from=request.valid_from, valid_until=request.valid_until,
            review_at=request.review_at, review_flagged_at=None,
            confidence=self.lifecycle.initial_confidence(prov.source_kind), status=status,
            supersedes_id=None, reinforcements=0, last_reinforced_at=None,
            tags=list(request.tags), entity_ids=[e for e, _ in links],
        )
        if sensitivity is not None:
            candidate.sensitivity, candidate.redacted_content = sensitivity.name, sensitivity.redacted_content
        read: dict[str, int] = {}
        decision = self._decide(candidate, vector, now, payload, timer, read, keep=keep)
        timer.mark("supersession")
        return candidate, links, ambiguous, decision, read

    def _stands(self, window: WriteWindow, candidate: Record, vector: np.ndarray | None, read: dict[str, int],
                payload: dict[str, Any]) -> bool:
        """Whether a decision made before the write lock survives what ``window`` shows;
        records written meanwhile that are close to the candidate are judged now."""
        check = check_decision(window, candidate, vector, read,
                               alias_cosine=self.config.attribute_alias_cosine,
                               dedup_cosine=self.config.dedup_candidate_cosine)
        if check.stale:
            return False
        verdicts = self._judge(candidate, [(c.record_id, c.content) for c in check.suspects])
        payload["verdicts"].update(verdicts)
        return not any(verdict in DECISIVE_VERDICTS for verdict in verdicts.values())

    def _entities(
        self, principal: Principal, request: WriteRequest, scope: Scope, notes: list[str]
    ) -> tuple[str | None, list[tuple[str, str]], list[dict[str, Any]]]:
        """Resolve mentions; return the primary entity, the links and ambiguities."""
        try:
            resolutions = self.resolver.resolve(list(request.entities), scope, principal)
        except EntityError as exc:
            # A missing and an unreadable entity id answer alike, as not_found.
            code = {"entity_not_readable": "not_found", "entity_kind_mismatch": "invalid_input"}
            raise Refusal(code.get(exc.code, exc.code), str(exc)) from None
        links: list[tuple[str, str]] = []
        ambiguous: list[dict[str, Any]] = []
        primary: str | None = None
        for res in resolutions:
            if res.outcome == "ambiguous":
                if res.mention.role == "about":
                    raise Refusal(
                        "entity_ambiguous",
                        f"{res.mention.text!r} names several entities; pass one entity_id",
                        candidates=self.resolver.describe_candidates(res.candidates),
                    )
                ambiguous.append({"text": res.mention.text, "candidates": res.candidates})
                notes.append(f"ambiguous mention {res.mention.text!r} not linked")
                continue
            assert res.entity is not None
            if res.mention.role == "about" and primary is None:
                primary = res.entity.id
            if all(res.entity.id != e for e, _ in links):
                links.append((res.entity.id, res.mention.role))
        if primary is None:
            primary = self._principal_subject(principal, request, scope)
            if primary is not None:
                links.insert(0, (primary, "about"))
        return primary, links, ambiguous

    def _principal_subject(self, principal: Principal, request: WriteRequest, scope: Scope) -> str | None:
        """A subject-less write is about the principal's person entity."""
        own_scope = scope == Scope("user", principal.user_id)
        if request.type != "episodic" and not own_scope:
            raise Refusal("invalid_subject", "about entity required")
        if request.type == "episodic" and not grants.can_read(
            self.store, principal, Scope("user", principal.user_id)
        ):
            return None
        res: Resolution = self.resolver.principal_entity(principal)
        if res.outcome == "ambiguous":
            raise Refusal(
                "entity_ambiguous",
                f"several person entities carry the alias of user {principal.user_id!r}",
                candidates=self.resolver.describe_candidates(res.candidates),
            )
        return res.entity.id if res.entity else None

    def _decide(
        self, candidate: Record, vector: np.ndarray | None, now: datetime, payload: dict[str, Any],
        timer: Timer, read: dict[str, int], *, keep: bool = True,
    ) -> Decision:
        """Decide against what is stored: the same entity's records first (reinforce,
        supersede, conflict), then nearby text (episodic records skip the subject rules:
        they never supersede). See docs/architecture.md, "The write path". Adds each
        record it read to ``read``, with the index_version it read; ``keep``: whether what
        it reads of the scope may be kept for later writes (:class:`WriteScopes`)."""
        self.index.refresh(self.store, self._reload_max)
        scanned: list[Record] = []
        if candidate.type != "episodic" and candidate.subject_entity_id:
            scanned = self._scan(candidate, now, payload)
        eligible = self._scopes.eligible(candidate.scope, candidate.type, now, keep=keep)
        # Without its vector a write is compared by subject and words only.
        nearby_ids = [] if vector is None else [
            (rid, cos) for rid, cos in self.index.search(vector, eligible, NEARBY_K)
            if cos >= self.config.dedup_candidate_cosine
        ]
        read.update((r.id, r.index_version) for r in scanned)
        scanned_ids = {r.id for r in scanned}
        nearby_records = {r.id: r for r in self.store.records([rid for rid, _ in nearby_ids])}
        # A nearby hit that is gone from the store reads as never seen (-1): any change to it counts.
        read.update((rid, nearby_records[rid].index_version if rid in nearby_records else -1)
                    for rid, _ in nearby_ids)
        nearby = [(nearby_records[rid], cos) for rid, cos in nearby_ids
                  if rid in nearby_records and rid not in scanned_ids
                  and (candidate.type == "episodic"
                       or nearby_records[rid].subject_entity_id != candidate.subject_entity_id)]
        cosines = {r.id: self._cosine(vector, r.id) for r in scanned}
        timer.mark("dedup_search")
        verdicts = self._judge(candidate, [(r.id, r.content) for r in [*scanned, *(r for r, _ in nearby)]])
        timer.mark("judge")
        payload["verdicts"] = verdicts
        decision = None
        if scanned:
            decision = decide_subject(candidate, scanned, verdicts, cosines, self.lifecycle,
                                      self.config.attribute_alias_cosine)
        decision = decision or decide_nearby(candidate, nearby, verdicts)
        policy = self.pack.write_policy
        if (policy.contradiction_action == "hold_and_flag" and decision.target is not None
                and decision.action in ("supersede", "superseded_on_arrival", "conflict")
                and verdicts.get(decision.target.id) == "contradicts"):
            # The pack wants a person to settle contradictions: neither record replaces the
            # other; the incoming one waits as a provisional conflict, and both are judged
            # with the conflict in view, which sends each to review where it could
            # otherwise enter the profile.
            payload["held_by"] = "write_policy.contradiction_action"
            return replace(decision, action="conflict", also_superseded=[])
        if decision.action == "supersede" and policy.conflict_rule == "hold":
            # The pack holds conflicting writes: the incumbent stays current and the
            # incoming record waits beside it as a provisional conflict, as a write from a
            # less trusted source does, until a person confirms it or it expires.
            payload["held_by"] = "write_policy.conflict_rule"
            decision = replace(decision, action="conflict", also_superseded=[])
        return decision

    def _scan(self, candidate: Record, now: datetime, payload: dict[str, Any]) -> list[Record]:
        """Active records about the same entity, capped in reinforced-first order with the
        same-attribute authority incumbent always kept."""
        assert candidate.subject_entity_id is not None
        cap = self.config.max_entity_attributes
        args = (candidate.scope, candidate.type, candidate.subject_entity_id, now)
        scanned = self.store.active_for_subject(*args, limit=cap + 1)
        if len(scanned) > cap:
            scanned = scanned[:cap]
            payload["attribute_scan_truncated"] = True
            same = self.store.active_for_subject(*args, attribute=candidate.attribute)
            if same:
                incumbent = max(same, key=self.lifecycle.authority_key)
                if all(r.id != incumbent.id for r in scanned):
                    scanned.append(incumbent)
        return scanned

    def _judge(self, candidate: Record, records: list[tuple[str, str]]) -> dict[str, str]:
        """Every scanned ``(record id, content)`` is judged before anything is decided.
        Identical text is the same claim without asking the judge."""
        verdicts: dict[str, str] = {}
        pending: list[tuple[str, str]] = []
        mine = normalize_ws(candidate.content).casefold()
        for record_id, content in records:
            if normalize_ws(content).casefold() == mine:
                verdicts[record_id] = "same"
            else:
                pending.append((record_id, content))
        if pending:
            judged = self.judge.judge_many([(content, candidate.content) for _, content in pending])
            verdicts.update({rid: v for (rid, _), v in zip(pending, judged, strict=True)})
        return verdicts

    def _cosine(self, vector: np.ndarray | None, record_id: str) -> float:
        other = self.index.vector_for(record_id)
        return float(other @ vector) if other is not None and vector is not None else 0.0

    # -- persistence --------------------------------------------------------------------------

    def _apply(
        self,
        candidate: Record,
        decision: Decision,
        vector: np.ndarray | None,
        links: list[tuple[str, str]],
        now: datetime,
        payload: dict[str, Any],
        event: Callable[[str, str], NewEvent],
        pending: str | None = None,
    ) -> tuple[str, str, list[_IndexChange], str]:
        """Write the decision; return the outcome, the record id, the index changes and
        the event id."""
        store = self.store
        changes: list[_IndexChange] = []
        if decision.attribute_aliased_from:
            payload["attribute_aliased_from"] = decision.attribute_aliased_from
        if decision.action == "reinforce":
            assert decision.target is not None
            return self._reinforce(candidate, decision.target, payload, changes, event)
        target = decision.target
        if decision.attribute != candidate.attribute:
            candidate.attribute = decision.attribute
            candidate.subject = subject_of(candidate.subject_entity_id, decision.attribute)
        if decision.action == "supersede":
            assert target is not None
            candidate.supersedes_id, candidate.version = target.id, target.version + 1
            outcome = f"superseded:{target.id}"
        elif decision.action == "superseded_on_arrival":
            assert target is not None
            candidate.status = "superseded"
            # History that arrived late held until the current value started.
            candidate.valid_until = closed_at(candidate, starts(target)) or candidate.valid_until
            payload["superseded_on_arrival_by"] = target.id
            outcome = f"superseded_on_arrival:{target.id}"
        elif decision.action == "conflict":
            assert target is not None
            candidate.status = "provisional"
            candidate.expires_at = self.lifecycle.provisional_expiry(now)
            payload["conflict_with"] = target.id
            # Nobody has said which one holds, so neither window ends.
            payload["validity"] = "both windows left open: a conflict ends neither"
            outcome = f"conflict:{target.id}"
        else:
            outcome = "created"
        # A superseded incumbent must leave the live-summary and active sets before its
        # successor arrives, so retire it first, with the session summaries restating it.
        if decision.action == "supersede":
            assert target is not None
            # A pack that versions no instructions replaces the old one instead. The old
            # windows end where the new one starts: the change the write dated (valid_from,
            # event_at), else when it was recorded.
            keep = self.pack.classes.keeps_history(candidate.type)
            for old in [target, *decision.also_superseded]:
                retired = retire_superseded(store, old.id, candidate, NewEvent(
                    "record.superseded", candidate.creator_agent_id, {"by": candidate.id}, old.id),
                    ends_validity=starts(candidate), keep_history=keep)
                changes += [(rid, version, None, None) for rid, version in retired]
            payload["also_superseded"] = [r.id for r in decision.also_superseded]
        written = store.write_record(
            candidate, links=links,
            embedding=None if vector is None else Embedding(self.embedder.name, self.embedder.version,
                                                            vector),
            event=lambda: event(outcome, candidate.id))
        if pending is not None:
            store.mark_pending(candidate.id, pending)
        changes.append((candidate.id, written.index_version, vector, written.seq))
        if decision.action == "conflict":
            assert target is not None
            store.add_conflict(candidate.id, target.id)
        assert written.event_id is not None
        return outcome, candidate.id, changes, written.event_id

    def _reinforce(
        self,
        candidate: Record,
        target: Record,
        payload: dict[str, Any],
        changes: list[_IndexChange],
        event: Callable[[str, str], NewEvent],
    ) -> tuple[str, str, list[_IndexChange], str]:
        """Only an independent source reference counts as more support."""
        ref = candidate.source_ref
        independent = ref is not None and ref not in self.store.counted_refs(target.id)
        # The audit trail keeps the quote masked: the raw text stays in the record alone.
        incoming = None if candidate.evidence is None else self.sensitivity.mask(candidate.evidence)
        payload.update(counted=independent, incoming_evidence=incoming,
                       incoming_source_kind=candidate.source_kind)
        if not independent:
            payload["reason"] = ("source reference already counted" if ref
                                 else "an observation without a source reference is not independent")
            outcome = "already_reinforced"
        else:
            result = self.lifecycle.reinforce(target, candidate.created_at, source_kind=candidate.source_kind,
                                              source_ref=ref, evidence=candidate.evidence)
            payload.update(confirmed=result.confirmed, provenance_upgraded=result.provenance_upgraded)
            version = self.store.update_lifecycle(result.record)
            changes.append((target.id, version, None, None))
            outcome = "reinforced"
        done = event(outcome, target.id)
        event_id = self.store.append_event(done.kind, done.actor, done.payload, record_id=done.record_id)
        return outcome, target.id, changes, event_id
