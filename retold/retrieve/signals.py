"""The signals a search reads to decide whether the store holds an answer.

Four measurements of the fused candidates, each with a plain meaning, so a user can see
why a search answered or came back empty (the dense channel's best score, ``dense``, is
reported beside them but does not count: a shared name lifts it whatever is asked):

* ``beyond_names``: the best cosine between the question and a readable record once the
  question's names are taken out of both sides (:mod:`retold.retrieve.beyond_names`). A
  shared name lifts every record about that person or account alike, whatever is asked;
  what is left says whether a record is about what is asked. A question that names
  nothing the store knows has the plain best cosine here.
* ``asked_coverage``: the largest share of the question's asked words (the words that are
  not names) held by one record that also carries the question's names. A question about
  someone's website, where no record about them holds "website", finds nothing stored.
* ``unknown_name``: the question names something (a person, an account, an identifier)
  that no readable record or entity carries: it is about something the store never heard of.
* ``lead``: how far the closest record stands out from the next one (beyond the names
  where the question has some). A question with an answer picks one record out; one
  without leaves the nearest records bunched together.

:mod:`retold.retrieve.gate` weighs them into one score.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from retold.models import Candidate, LexicalMatch, QueryShape

__all__ = ["SIGNAL_NAMES", "Signals", "measure"]

# The signals the answer score weighs, in the order of retrieval.gate.weights.
SIGNAL_NAMES = ("beyond_names", "asked_coverage", "unknown_name", "lead")


@dataclass(frozen=True)
class Signals:
    """One search's signals (module docstring); ``unknown_name`` is 1.0 or 0.0, ``dense``
    the dense channel's best score, reported only."""

    dense: float = 0.0
    beyond_names: float = 0.0
    asked_coverage: float = 0.0
    unknown_name: float = 0.0
    lead: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {name: round(float(getattr(self, name)), 6) for name in ("dense", *SIGNAL_NAMES)}

    def describe(self) -> str:
        """The signals as a user reads them."""
        text = (f"best dense score {self.dense:.2f}, "
                f"cosine {self.beyond_names:.2f} beyond the question's names, "
                f"leading the next record by {self.lead:.2f}, "
                f"{self.asked_coverage:.0%} of the asked words held by one record")
        return text + ("; the question names something no readable record carries"
                       if self.unknown_name else "")


def _covers_names(c: Candidate, match: LexicalMatch) -> bool:
    """Whether the record carries every name of the question (or its resolved entity)."""
    return c.entity is not None or match.names_matched >= match.name_terms


def _coverage(match: LexicalMatch) -> float:
    """Share of the asked words the record holds; of the names when only names are asked."""
    if match.asked_terms:
        return match.asked_matched / match.asked_terms
    return match.names_matched / match.name_terms if match.name_terms else 0.0


def measure(candidates: Sequence[Candidate], shape: QueryShape) -> Signals:
    """The signals of one search's fused candidates (``beyond_names`` already set on the
    dense ones where the question names something)."""
    cosines = sorted((c.dense.score for c in candidates if c.dense is not None), reverse=True)
    beyond = sorted((c.beyond_names for c in candidates if c.beyond_names is not None), reverse=True)
    closest = beyond or cosines
    coverage = max((_coverage(c.lexical_terms) for c in candidates
                    if c.lexical_terms is not None and _covers_names(c, c.lexical_terms)), default=0.0)
    return Signals(dense=float(cosines[0]) if cosines else 0.0,
                   beyond_names=float(closest[0]) if closest else 0.0,
                   asked_coverage=float(coverage), unknown_name=1.0 if shape.unknown_names else 0.0,
                   lead=float(closest[0] - closest[1]) if len(closest) > 1 else 0.0)
