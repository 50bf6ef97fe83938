"""The current-fact decision for a new record: reinforce, supersede, conflict or create.

Pure functions over records that the ingestor has already loaded and judged, so the
rule order can be read (and tested) in one place:

1. records under the candidate's own attribute: the authority incumbent is reinforced
   when judged ``same``, otherwise the supersession rule runs against it;
2. a record under another attribute judged ``same`` and close by cosine is reinforced;
3. a record under another attribute that contradicts and is close by cosine is one
   current fact under two names: supersession against it, keeping its attribute;
4. otherwise the nearby-record search decides between reinforce and create.

Rule 1 runs before rule 2 on purpose: a ``same`` verdict against a provisional sibling
must never pre-empt the decision the authority incumbent is owed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from retold.models import Record
from retold.policy.lifecycle import Lifecycle

__all__ = ["Action", "Decision", "decide_nearby", "decide_subject", "supersession"]

Action = Literal["create", "reinforce", "supersede", "superseded_on_arrival", "conflict"]


@dataclass
class Decision:
    action: Action
    target: Record | None = None  # the incumbent, or the record to reinforce
    attribute: str | None = None  # the new record's attribute (an alias keeps the incumbent's)
    attribute_aliased_from: str | None = None
    also_superseded: list[Record] = field(default_factory=list)


def supersession(new: Record, old: Record, lifecycle: Lifecycle) -> Decision:
    """The supersession rule against one incumbent.

    With authority the new record replaces the old one. An equal-rank record that lost on
    time is history on arrival, so a stale report cannot replace a newer fact. A lower
    rank is stored as a provisional conflict.
    """
    if lifecycle.has_authority(new, old):
        return Decision("supersede", old, new.attribute)
    if lifecycle.rank(new.source_kind) == lifecycle.rank(old.source_kind):
        return Decision("superseded_on_arrival", old, new.attribute)
    return Decision("conflict", old, new.attribute)


def decide_subject(
    candidate: Record,
    scanned: Sequence[Record],
    verdicts: Mapping[str, str],
    cosines: Mapping[str, float],
    lifecycle: Lifecycle,
    alias_cosine: float,
) -> Decision | None:
    """Rules 1-3 over the same-entity scan; None hands over to rule 4 (nearby dedup)."""
    authority = lifecycle.authority_key
    same_attribute = [r for r in scanned if r.attribute == candidate.attribute]
    if same_attribute:  # rule 1
        incumbent = max(same_attribute, key=authority)
        if verdicts[incumbent.id] == "same":
            return Decision("reinforce", incumbent, candidate.attribute)
        decision = supersession(candidate, incumbent, lifecycle)
        if decision.action == "supersede":
            decision.also_superseded = [
                r for r in same_attribute if r.id != incumbent.id and verdicts[r.id] == "same"
            ]
        return decision
    # Rules 2 and 3 need both signals: the verdict and a cosine saying the two
    # attributes talk about the same thing; a verdict alone collapses unrelated facts.
    aliased = [r for r in scanned if cosines.get(r.id, 0.0) >= alias_cosine]
    same = [r for r in aliased if verdicts[r.id] == "same"]
    if same:  # rule 2
        target = max(same, key=authority)
        return Decision("reinforce", target, target.attribute, candidate.attribute)
    contradicting = [r for r in aliased if verdicts[r.id] == "contradicts"]
    if contradicting:  # rule 3: the survivor keeps the incumbent attribute
        incumbent = max(contradicting, key=authority)
        decision = supersession(replace(candidate, attribute=incumbent.attribute), incumbent, lifecycle)
        decision.attribute = incumbent.attribute
        decision.attribute_aliased_from = candidate.attribute
        return decision
    return None


def decide_nearby(
    candidate: Record, nearby: Sequence[tuple[Record, float]], verdicts: Mapping[str, str]
) -> Decision:
    """Rule 4: the closest nearby record judged ``same`` is reinforced; otherwise create."""
    for record, _cosine in sorted(nearby, key=lambda pair: -pair[1]):
        if verdicts.get(record.id) == "same":
            return Decision("reinforce", record, record.attribute)
    return Decision("create", None, candidate.attribute)
