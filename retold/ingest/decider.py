"""The write decision: what is stored about the candidate's subject, how the judge reads
each record against it, and what the write does (reinforce, supersede, conflict, create).

The decider reads: the active records about the candidate's entity (the same-subject
scan), and the nearby records by vector within the scope's eligible set. Every record
read is judged before anything is decided; the rules themselves are the pure functions of
:mod:`retold.ingest.decision`, and a tenant's memory pack may then hold a contradiction
or a conflicting write for a person. The decider writes nothing: what it returns is
applied by :class:`~retold.ingest.applier.Applier` once the write lock shows the decision
still stands (:class:`~retold.ingest.write_lock.WriteLock`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import numpy as np

from retold.clock import Timer
from retold.config import IngestionConfig
from retold.config.pack import MemoryPack
from retold.index.vector import VectorIndex
from retold.ingest.candidate import Candidate
from retold.ingest.decision import Decision, decide_nearby, decide_subject
from retold.ingest.equivalence import EquivalenceJudge
from retold.ingest.evidence import normalize_ws
from retold.ingest.write_scope import WriteScopes
from retold.models import Record
from retold.policy.lifecycle import Lifecycle
from retold.store import Store

__all__ = ["NEARBY_K", "Decided", "Decider"]

NEARBY_K = 10


@dataclass(frozen=True)
class Decided:
    """A decision about ``candidate`` made with ``vector`` (None: by subject and words
    only), with every stored record it read mapped to the ``index_version`` it read (the
    write lock's check needs them) and ``audit``: what the write's event reports of how it
    was decided (the judge, the verdicts, a pack's hold)."""

    candidate: Candidate
    vector: np.ndarray | None
    decision: Decision
    read: Mapping[str, int]
    audit: Mapping[str, Any]

    def with_audit(self, **entries: Any) -> Decided:
        """This decision with ``entries`` added to (or replacing keys of) its audit."""
        return replace(self, audit={**self.audit, **entries})


class Decider:
    """Decides a candidate against what is stored."""

    def __init__(self, store: Store, index: VectorIndex, judge: EquivalenceJudge, lifecycle: Lifecycle,
                 config: IngestionConfig, pack: MemoryPack, *, reload_max: int = 512) -> None:
        self.store, self.index, self.judge, self.lifecycle = store, index, judge, lifecycle
        self.config, self.pack, self._reload_max = config, pack, reload_max
        # The eligible set of each scope the writes go to, kept by delta: read whole, it
        # cost every write in proportion to the scope.
        self._scopes = WriteScopes(store, reload_max)

    def decide(self, candidate: Candidate, vector: np.ndarray | None, now: datetime, timer: Timer, *,
               keep: bool = True) -> Decided:
        """Decide against what is stored: the same entity's records first (reinforce,
        supersede, conflict), then nearby text (episodic records skip the subject rules:
        they never supersede). See docs/architecture.md, "The write path". ``keep``:
        whether what it reads of the scope may be kept for later writes (:class:`WriteScopes`)."""
        record = candidate.record
        audit: dict[str, Any] = {"judge": self.judge.name, "origin_scope": str(record.scope),
                                 "requested_source_kind": candidate.requested_source_kind}
        self.index.refresh(self.store, self._reload_max)
        scanned: list[Record] = []
        if record.type != "episodic" and record.subject_entity_id:
            scanned = self._scan(record, now, audit)
        nearby, read = self._nearby(record, vector, scanned, now, keep)
        cosines = {r.id: self._cosine(vector, r.id) for r in scanned}
        timer.mark("dedup_search")
        verdicts = self.judge_records(record, [(r.id, r.content)
                                               for r in [*scanned, *(r for r, _ in nearby)]])
        timer.mark("judge")
        audit["verdicts"] = verdicts
        decision = None
        if scanned:
            decision = decide_subject(record, scanned, verdicts, cosines, self.lifecycle,
                                      self.config.attribute_alias_cosine)
        decision = self._as_pack_holds(decision or decide_nearby(record, nearby, verdicts), verdicts, audit)
        timer.mark("supersession")
        return Decided(candidate, vector, decision, read, audit)

    def judge_records(self, candidate: Record, records: list[tuple[str, str]]) -> dict[str, str]:
        """The judge's verdict on each ``(record id, content)`` against the candidate.
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

    def _nearby(self, candidate: Record, vector: np.ndarray | None, scanned: list[Record], now: datetime,
                keep: bool) -> tuple[list[tuple[Record, float]], dict[str, int]]:
        """Records close to the candidate's vector in its scope and type, other than the
        scanned ones (and, for a current fact, other than its own subject's), with the
        ``index_version`` read of every record the decision reads."""
        eligible = self._scopes.eligible(candidate.scope, candidate.type, now, keep=keep)
        # Without its vector a write is compared by subject and words only.
        nearby_ids = [] if vector is None else [
            (rid, cos) for rid, cos in self.index.search(vector, eligible, NEARBY_K)
            if cos >= self.config.dedup_candidate_cosine
        ]
        read = {r.id: r.index_version for r in scanned}
        scanned_ids = {r.id for r in scanned}
        nearby_records = {r.id: r for r in self.store.records([rid for rid, _ in nearby_ids])}
        # A nearby hit that is gone from the store reads as never seen (-1): any change to it counts.
        read.update((rid, nearby_records[rid].index_version if rid in nearby_records else -1)
                    for rid, _ in nearby_ids)
        nearby = [(nearby_records[rid], cos) for rid, cos in nearby_ids
                  if rid in nearby_records and rid not in scanned_ids
                  and (candidate.type == "episodic"
                       or nearby_records[rid].subject_entity_id != candidate.subject_entity_id)]
        return nearby, read

    def _as_pack_holds(self, decision: Decision, verdicts: Mapping[str, str],
                       audit: dict[str, Any]) -> Decision:
        """The decision as the tenant's pack has it: a contradiction or a conflicting write
        the pack holds for a person becomes a provisional conflict."""
        policy = self.pack.write_policy
        if (policy.contradiction_action == "hold_and_flag" and decision.target is not None
                and decision.action in ("supersede", "superseded_on_arrival", "conflict")
                and verdicts.get(decision.target.id) == "contradicts"):
            # The pack wants a person to settle contradictions: neither record replaces the
            # other; the incoming one waits as a provisional conflict, and both are judged
            # with the conflict in view, which sends each to review where it could
            # otherwise enter the profile.
            audit["held_by"] = "write_policy.contradiction_action"
            return replace(decision, action="conflict", also_superseded=[])
        if decision.action == "supersede" and policy.conflict_rule == "hold":
            # The pack holds conflicting writes: the incumbent stays current and the
            # incoming record waits beside it as a provisional conflict, as a write from a
            # less trusted source does, until a person confirms it or it expires.
            audit["held_by"] = "write_policy.conflict_rule"
            return replace(decision, action="conflict", also_superseded=[])
        return decision

    def _scan(self, candidate: Record, now: datetime, audit: dict[str, Any]) -> list[Record]:
        """Active records about the same entity, capped in reinforced-first order with the
        same-attribute authority incumbent always kept."""
        assert candidate.subject_entity_id is not None
        cap = self.config.max_entity_attributes
        args = (candidate.scope, candidate.type, candidate.subject_entity_id, now)
        scanned = self.store.active_for_subject(*args, limit=cap + 1)
        if len(scanned) > cap:
            scanned = scanned[:cap]
            audit["attribute_scan_truncated"] = True
            same = self.store.active_for_subject(*args, attribute=candidate.attribute)
            if same:
                incumbent = max(same, key=self.lifecycle.authority_key)
                if all(r.id != incumbent.id for r in scanned):
                    scanned.append(incumbent)
        return scanned

    def _cosine(self, vector: np.ndarray | None, record_id: str) -> float:
        other = self.index.vector_for(record_id)
        return float(other @ vector) if other is not None and vector is not None else 0.0
