"""Records a question picks out of the records carrying its names.

A question about an entity ("What is Oskar allergic to?") shares its name with every
record of that entity, and the name lifts all their cosines alike, so no single floor
tells the asked record from its neighbours. What does is how far one of them stands out:
by its cosine (:func:`standouts`), by its cosine once the names are taken out of both
sides (:func:`beyond_standouts`), or by being the only one to hold a word of what is
asked (:func:`asked_standouts`). The gate (:mod:`retold.retrieve.gate`) lets such a record
through although it missed the name-only floor (docs/decisions.md, "A record the
question picks out of its entity's records", "An asked word one record holds" and "What
a record says beyond the question's names").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from retold.models import Candidate, LexicalMatch
from retold.retrieve.stemmer import porter_stem

if TYPE_CHECKING:
    from retold.retrieve.gate import GateFloors

__all__ = ["asked_standouts", "asked_words", "beyond_standouts", "name_only", "standouts"]


def _carries_names(c: Candidate) -> bool:
    """Whether the record carries every name of the question (or its resolved entity)."""
    match = c.lexical_terms
    return c.entity is not None or (match is not None and match.name_terms > 0
                                    and match.names_matched >= match.name_terms)


def name_only(c: Candidate) -> bool:
    """Whether the record carries the question's names and none of its asked words."""
    match = c.lexical_terms
    return _carries_names(c) and (match is None or match.asked_matched == 0)


def standouts(candidates: Sequence[Candidate], failed: Sequence[Candidate],
              floors: GateFloors) -> dict[str, str]:
    """Name-only candidates that lead every other record carrying the question's names.

    A question about an entity asks for one of its records; which one, the cosine says
    better than any single floor can, because a shared name lifts every record of the
    entity alike. A record of the entity outside the dense list counts at the lowest
    logged cosine, which bounds it from above; a lone record has nothing to lead.
    """
    if floors.standout_margin <= 0:
        return {}
    lowest = min((c.dense.score for c in candidates if c.dense is not None), default=0.0)
    named = sorted(((c.dense.score if c.dense is not None else lowest, c.record_id)
                    for c in candidates if _carries_names(c)), reverse=True)
    leads: dict[str, str] = {}
    for c in failed:
        if (c.dense is None or len(named) < 2 or not name_only(c)
                or c.dense.score < floors.standout_floor):
            continue
        # The best of the others: the runner-up when this record is the best.
        rival = named[1][0] if named[0][1] == c.record_id else named[0][0]
        lead = c.dense.score - rival
        if lead >= floors.standout_margin:
            leads[c.record_id] = (f"dense {c.dense.score:.3f} leads the other {len(named) - 1} "
                                  f"records carrying the question's names by {lead:.3f} >= "
                                  f"{floors.standout_margin:.2f}")
    return leads


def beyond_standouts(candidates: Sequence[Candidate], failed: Sequence[Candidate],
                     floors: GateFloors) -> dict[str, str]:
    """Name-only candidates whose cosine beyond the question's names reaches
    ``beyond_names_floor`` and leads every other record carrying the names by
    ``beyond_names_margin``.

    With the names taken out, what is left of a record about the asked attribute stays
    close to the question and its entity's other records fall away; a question about an
    attribute the store lacks leaves every record of the entity low and close together.
    Only records in the dense list have the figure; a lone record leads by all of it.
    """
    if floors.beyond_names_floor >= 1.0:
        return {}
    named = sorted(((c.beyond_names, c.record_id) for c in candidates
                    if _carries_names(c) and c.beyond_names is not None), reverse=True)
    leads: dict[str, str] = {}
    for c in failed:
        if c.beyond_names is None or not name_only(c) or c.beyond_names < floors.beyond_names_floor:
            continue
        others = [score for score, rid in named if rid != c.record_id]
        rival = others[0] if others else 0.0
        lead = c.beyond_names - rival
        if lead >= floors.beyond_names_margin:
            leads[c.record_id] = (f"dense beyond the names {c.beyond_names:.3f} >= "
                                  f"{floors.beyond_names_floor:.2f}, leading the other {len(others)} "
                                  f"records carrying them by {lead:.3f} >= {floors.beyond_names_margin:.2f}")
    return leads


def asked_words(match: LexicalMatch | None) -> set[str]:
    """The words of what is asked that a record holds, those whose stem says something.

    A stem of one or two letters is shared by unrelated words ("use" and the "us" of
    prod-us-east both index as "us"), so it cannot single a record out.
    """
    if match is None:
        return set()
    return {term.value for term in match.terms if not term.is_name and len(porter_stem(term.value)) >= 3}


def _entity_records(candidates: Sequence[Candidate]) -> list[Candidate]:
    """The records the entity channel found for the one entity the question names, or none.

    Where it resolved the name, they are exactly that entity's records: "Redwood Capital 2"
    carries the words "Redwood Capital" too, but its billing contact is not the one asked
    about. Records of two entities ("Oskar" and "Tucson") are not one entity's records.
    """
    found = [c for c in candidates if c.entity is not None]
    return found if len({c.entity_id for c in found}) == 1 else []


def asked_standouts(candidates: Sequence[Candidate], failed: Sequence[Candidate],
                    floors: GateFloors) -> dict[str, str]:
    """The one record carrying the question's names that holds a word of what is asked.

    "Which person at Lumen Retail gets our bills?" shares "bills" with the account's
    billing contact and nothing with its plan or renewal; MiniLM ranks the three within a
    few hundredths, but the word picks the record out. When two or more of the entity's
    records hold asked words, none is picked: the word is not what tells them apart.
    """
    named = _entity_records(candidates)
    of = "records of the entity the question names"
    if not named:
        named, of = [c for c in candidates if _carries_names(c)], "records carrying the question's names"
    holders = [c for c in named if asked_words(c.lexical_terms)]
    if len(named) < 2 or len(holders) != 1:
        return {}
    c = holders[0]
    failed_ids = {f.record_id for f in failed}
    if c.record_id not in failed_ids or c.dense is None or c.dense.score < floors.standout_floor:
        return {}
    assert c.lexical_terms is not None  # it holds an asked word
    words = ", ".join(t.value for t in c.lexical_terms.terms if not t.is_name)
    return {c.record_id: (f"the only one of {len(named)} {of} "
                          f"to hold an asked word ({words}), dense {c.dense.score:.3f} >= "
                          f"{floors.standout_floor:.2f}")}
