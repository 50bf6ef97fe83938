"""The order of what passed the gate, where the fused score is not the whole story.

Three rules move a passing record: a companion closer to the question than every record
that passed goes right after the top record, a record reached on a link goes right after
the record it came from (the two answer the question together), and a record that passed
on asked words alone, about someone the question does not name, goes ahead of the passes
holding fewer of those words. All read only what a candidate carries, so replaying a
logged search orders it the same way (docs/decisions.md, "A companion closer than every
pass", "A second hop through entity links" and "Asked words need the question's names or
a cosine").
"""

from __future__ import annotations

from collections.abc import Mapping

from retold.models import Candidate

__all__ = ["after_anchors", "closer_up", "words_first"]


def after_anchors(kept: list[Candidate], linked: Mapping[str, str]) -> list[Candidate]:
    """``kept`` with each linked record moved right after the record it was reached from:
    the two answer the question together."""
    out: list[Candidate] = []
    for c in kept:
        if c.record_id not in linked:
            out.append(c)
            out += [x for x in kept if linked.get(x.record_id) == c.record_id]
    placed = {c.record_id for c in out}
    return out + [c for c in kept if c.record_id not in placed]


def _asked_held(c: Candidate) -> int:
    return c.lexical_terms.asked_matched if c.lexical_terms is not None else 0


def words_first(kept: list[Candidate], on_words: frozenset[str]) -> list[Candidate]:
    """``kept`` with each record that passed on asked words alone moved ahead of the records
    holding fewer of them, never between a record and the one linked after it.

    Those others passed on a modest cosine to a question whose asked words they lack (the
    named person's other outings); a record holding several of the words is about what is
    asked, if not about whom.
    """
    out = [c for c in kept if c.record_id not in on_words]
    for c in kept:
        if c.record_id in on_words:
            held = _asked_held(c)
            at = next((i for i, o in enumerate(out) if o.via is None and _asked_held(o) < held), len(out))
            out.insert(at, c)
    return out


def closer_up(kept: list[Candidate], closer: frozenset[str]) -> list[Candidate]:
    """``kept`` with each companion in ``closer`` moved up to right after the top record,
    closest first; the top record stays where it is."""
    head, tail = kept[:1], kept[1:]
    moved = sorted((c for c in tail if c.record_id in closer),
                   key=lambda c: -(c.dense.score if c.dense is not None else 0.0))
    return head + moved + [c for c in tail if c.record_id not in closer]
