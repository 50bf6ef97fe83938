"""Whether a write decision made before the store's write lock still stands.

On PostgreSQL the ingestor decides (reads the subject's records, searches nearby text,
asks the judge) before its transaction takes the write lock, then reads what other
writers changed meanwhile (:class:`~retold.store.write_window.WriteWindow`). What it does
with each change follows from what the decision reads, which is confined to the
candidate's scope and type:

* a later change to a record the decision read (scanned, found nearby, or acted on), or
  a live record under the candidate's own subject and attribute (two writers of one
  attribute): the decision is made again under the lock;
* a live record close enough to the candidate to be an alias of its attribute (same
  subject, ``attribute_alias_cosine``) or a duplicate (``dedup_candidate_cosine``): a
  *suspect*, which changes the decision only if the judge calls it the same claim or a
  contradiction, so the caller judges the suspects and decides again only then;
* anything else was written about other things, and the decision is the one it would
  have been had the other write committed first.

A record the decision read in the very state the window reports (written after the
transaction began, but before the read) was taken into account. See docs/decisions.md,
"Writers decide before they take the write lock".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from retold.models import ACTIVE_STATUSES, Record
from retold.store.write_window import RecordChange, WriteWindow

__all__ = ["Staleness", "check_decision"]

# Verdicts under which a suspect takes part in a decision (alias or duplicate rules).
DECISIVE_VERDICTS = ("same", "contradicts")


@dataclass(frozen=True)
class Staleness:
    """``stale``: decide again under the lock. Otherwise the decision stands unless the
    judge finds one of ``suspects`` the same claim as the candidate or a contradiction."""

    stale: bool
    suspects: list[RecordChange] = field(default_factory=list)


def check_decision(window: WriteWindow, candidate: Record, vector: np.ndarray | None,
                   read: Mapping[str, int], *, alias_cosine: float, dedup_cosine: float) -> Staleness:
    """How the changes in ``window`` bear on the decision about ``candidate``; ``read``
    maps each record the decision read to the ``index_version`` it read it at."""
    if window.entity_gone:
        return Staleness(True)
    suspects: list[RecordChange] = []
    subject_rules = candidate.type != "episodic" and candidate.subject_entity_id is not None
    for change in window.changes:
        seen = read.get(change.record_id)
        if seen is not None:
            if change.index_version > seen:
                return Staleness(True)
            continue
        if (change.scope != candidate.scope or change.type != candidate.type
                or change.status not in ACTIVE_STATUSES):
            continue  # outside everything the decision reads, or no longer a live fact
        same_subject = subject_rules and change.subject_entity_id == candidate.subject_entity_id
        if same_subject and change.attribute == candidate.attribute:
            return Staleness(True)
        if change.vector is None or vector is None:
            if same_subject:
                return Staleness(True)  # closeness unknown: it may be an alias
            continue
        floor = alias_cosine if same_subject else dedup_cosine
        if float(np.dot(change.vector, vector)) >= floor:
            suspects.append(change)
    return Staleness(False, suspects)
