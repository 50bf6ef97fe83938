"""Activator: runs the activation policy after a write commits, and applies a person's
decisions from the review queue.

The policy runs outside the write's transaction, on what the write committed, and fails
closed: whatever goes wrong leaves the record ``conditional`` (found by search only), the
write standing, and a ``record.activation_skipped`` event naming the error. Every change
of activation appends its own event in the same transaction as the change. A record a
person decided is not judged again by the policy. See docs/decisions.md, "The ambient
profile".
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from retold.activation.policy import ActivationDecision, ActivationFacts, ActivationPolicy, SourceTurn
from retold.clock import Clock
from retold.errors import RetoldError
from retold.ingest.evidence import turn_of
from retold.models import ACTIVE_STATUSES, Activation, Principal, Record, Scope
from retold.names import normalize_alias
from retold.store import NewEvent, Store
from retold.store.activation import ActivationRow

__all__ = ["ActivationError", "ActivationOutcome", "Activator", "Resolution"]

log = logging.getLogger(__name__)

Resolution = Literal["ambient", "conditional", "reject"]
_SKIPPED_REASON = "the activation policy could not run; the record is found by search only"


class ActivationError(RetoldError):
    """A refused manual decision; ``code`` says why (``not_found``, ``history``,
    ``not_in_review``, ``refused``). Nothing was written."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class ActivationOutcome:
    """A record's activation after a write, and whether the policy failed (``skipped``)."""

    record_id: str
    activation: Activation
    reason: str
    category: str | None = None
    skipped: bool = False


class Activator:
    """Applies :class:`ActivationPolicy` to committed records and to people's decisions."""

    def __init__(self, store: Store, policy: ActivationPolicy, clock: Clock,
                 mask: Callable[[str], str] | None = None) -> None:
        self.store, self.policy, self.clock = store, policy, clock
        self.mask = mask  # the tenant pack's redaction, to find a quote of the masked transcript

    # -- after writes ------------------------------------------------------------------------

    def after_write(self, principal: Principal, record_id: str, *, origin: str = "tool",
                    actor: str | None = None) -> ActivationOutcome:
        """Judge one committed record for ``principal``; never raises."""
        try:
            return self._judge(principal, record_id, origin, actor or principal.agent_id)
        except Exception as exc:  # fail closed: the write stands, the record stays conditional
            log.warning("activation of record %s failed", record_id, exc_info=exc)
            self._skip(record_id, origin, actor or principal.agent_id, exc)
            return ActivationOutcome(record_id, "conditional", _SKIPPED_REASON, None, True)

    def after_extraction(self, principal: Principal, record_ids: Sequence[str],
                         actor: str) -> list[ActivationOutcome]:
        """Judge each record an extraction run committed, once each, in order.

        The judgements share one transaction (each record's own is a savepoint inside
        it), so a session's worth of records costs one commit rather than one each; if
        that transaction itself cannot start or commit, each record is judged on its own.
        """
        ids = list(dict.fromkeys(record_ids))
        try:
            with self.store.atomic():
                return [self.after_write(principal, rid, origin="extraction", actor=actor) for rid in ids]
        except Exception as exc:
            log.warning("activation of %d extracted records in one transaction failed (%s); "
                        "judging them one by one", len(ids), type(exc).__name__)
            return [self.after_write(principal, rid, origin="extraction", actor=actor) for rid in ids]

    def _judge(self, principal: Principal, record_id: str, origin: str, actor: str) -> ActivationOutcome:
        current = self.store.activation_of(record_id)
        if current is not None and current.manual:
            return ActivationOutcome(record_id, current.activation, current.reason, current.category)
        record = self.store.get_record(record_id)
        if record is None:
            return ActivationOutcome(record_id, "conditional", "no such record")
        decision = self.policy.decide(self.facts(record, principal))
        if current is None or (current.activation, current.rule, current.category) != (
                decision.activation, decision.rule, decision.category):
            self.store.set_activation(
                record_id, decision.activation, rule=decision.rule, reason=decision.reason,
                category=decision.category, decided_by="policy",
                event=NewEvent("record.activation", actor, self._payload(decision, current, origin),
                               record_id))
        return ActivationOutcome(record_id, decision.activation, decision.reason, decision.category)

    def _skip(self, record_id: str, origin: str, actor: str, exc: Exception) -> None:
        event = NewEvent("record.activation_skipped", actor,
                         {"origin": origin, "error": type(exc).__name__, "activation": "conditional"},
                         record_id)
        try:
            if self.store.get_record(record_id) is None:
                self.store.append_event(event.kind, event.actor, event.payload, record_id=record_id)
                return
            self.store.set_activation(record_id, "conditional", rule="policy_error", reason=_SKIPPED_REASON,
                                      category=None, decided_by="policy", event=event)
        except Exception:  # the store itself failed: the log line is all that is left
            log.exception("could not record the skipped activation of record %s", record_id)

    @staticmethod
    def _payload(decision: ActivationDecision, current: ActivationRow | None, origin: str) -> dict[str, Any]:
        return {"activation": decision.activation, "rule": decision.rule, "reason": decision.reason,
                "category": decision.category, "previous": current.activation if current else None,
                "origin": origin}

    # -- the facts the policy reads --------------------------------------------------------------

    def facts(self, record: Record, principal: Principal | None = None) -> ActivationFacts:
        """What the policy needs about ``record``. Without a principal (a person's decision
        from the command line) the principal is the record's user: its user scope's, or
        the user whose session its quote came from."""
        turn = self._source_turn(record)
        if principal is not None:
            user = principal.user_id
        elif record.scope.kind == "user":
            user = record.scope.id
        else:
            user = turn.session_user_id if turn is not None else ""
        entities = frozenset(e.id for e in self.store.entities_by_alias(
            normalize_alias(user), scopes=[Scope("user", user)], kinds=["person"])) if user else frozenset()
        return ActivationFacts(record, user, entities, turn, bool(self.store.conflicts_of(record.id)))

    def _source_turn(self, record: Record) -> SourceTurn | None:
        where = turn_of(record.source_ref)
        session = None if where is None else self.store.get_session(where[0])
        if where is None or session is None:
            return None
        found = next((t for t in self.store.turns(where[0]) if t.turn == where[1]), None)
        if found is None:
            return None
        masked = None if self.mask is None else self.mask(found.content)
        return SourceTurn(session.user_id, found.role, found.content,
                          masked if masked != found.content else None)

    # -- a person's decisions --------------------------------------------------------------------

    def set_manually(self, record_id: str, activation: Literal["ambient", "conditional"], *,
                     resolver: str, reason: str) -> ActivationRow:
        """A person sets a record's activation (``retold activation``): held to the hard
        rules for ``ambient``; audited with ``record.activation``."""
        record = self._live(record_id)
        current = self.store.activation_of(record_id)
        decision = self._manual(record, activation)
        payload = {**self._payload(decision, current, "manual"), "manual": True, "resolver": resolver,
                   "reason": reason, "policy_reason": decision.reason}
        return self.store.set_activation(record_id, activation, rule="manual", reason=reason,
                                         category=decision.category, decided_by=f"operator:{resolver}",
                                         event=NewEvent("record.activation", resolver, payload, record_id))

    def resolve(self, record_id: str, resolution: Resolution, *, resolver: str,
                reason: str | None = None) -> ActivationRow:
        """Close one review: make the record ambient or conditional, or reject it (the record
        is forgotten, as ``memory_forget`` would). One ``review.resolved`` event."""
        record = self._live(record_id)
        current = self.store.activation_of(record_id)
        if current is None or current.activation != "review":
            raise ActivationError("not_in_review", f"record {record_id} is not waiting for review")
        why = reason or f"review resolved as {resolution}"
        target: Activation = "conditional" if resolution == "reject" else resolution
        decision = self._manual(record, target)
        payload = {**self._payload(decision, current, "review"), "resolution": resolution,
                   "resolver": resolver, "reason": why, "rule": current.rule}
        with self.store.atomic():
            if resolution == "reject":
                forgotten = self.store.transition(
                    record_id, "deleted", from_statuses=ACTIVE_STATUSES, event=NewEvent(
                        "record.forgotten", resolver, {"reason": why, "previous_status": record.status,
                                                       "manual": True, "via": "review"}, record_id))
                if forgotten is None:
                    raise ActivationError("history", f"record {record_id} is no longer live")
            return self.store.set_activation(
                record_id, target, rule="review", reason=why, category=decision.category,
                decided_by=f"operator:{resolver}",
                event=NewEvent("review.resolved", resolver, payload, record_id))

    def _live(self, record_id: str) -> Record:
        record = self.store.get_record(record_id)
        if record is None:
            raise ActivationError("not_found", f"no record {record_id}")
        if record.status not in ACTIVE_STATUSES or (
                record.expires_at is not None and record.expires_at < self.clock.now()):
            raise ActivationError("history", f"record {record_id} is {record.status} and no longer live")
        return record

    def _manual(self, record: Record, activation: Activation) -> ActivationDecision:
        """The policy's view of a person's choice: refused when ``ambient`` breaks a hard rule."""
        facts = self.facts(record)
        if activation == "ambient":
            refusal = self.policy.manual_refusal(facts)
            if refusal is not None:
                raise ActivationError("refused", f"record {record.id} cannot be ambient: {refusal.reason}"
                                                 f" ({refusal.rule})")
        return self.policy.decide(facts)
