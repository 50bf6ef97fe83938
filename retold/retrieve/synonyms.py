"""Words that name the same attribute, for lexical coverage.

The embedding model ranks "What subscription tier does Acme North have?" no closer to
"Acme North is on the Team plan" than to the account's billing contact, so neither the
dense floors nor the record's lead over its entity's other records can tell that the
question asks for the plan. A record holding any word of a group covers a query word of
the same group, compared by Porter stem like every plain word. The groups are few and
deliberately plain: common names of attributes that memories about people and accounts
carry, never a word that asks about something else ("employees" is not "job"). See
docs/decisions.md, "Synonyms of attribute names".
"""

from __future__ import annotations

import functools

from retold.retrieve.stemmer import porter_stem

__all__ = ["SYNONYM_GROUPS", "synonym_stems"]

SYNONYM_GROUPS: tuple[tuple[str, ...], ...] = (
    ("plan", "tier", "subscription", "package"),
    ("billing", "invoice", "invoices", "invoicing"),
    ("car", "vehicle"),
    ("job", "occupation", "profession"),
    ("allergy", "allergic", "intolerance", "intolerant"),
)


@functools.cache
def _by_stem() -> dict[str, frozenset[str]]:
    out: dict[str, frozenset[str]] = {}
    for group in SYNONYM_GROUPS:
        stems = frozenset(porter_stem(word) for word in group)
        for stem in stems:
            out[stem] = out.get(stem, frozenset()) | stems
    return out


def synonym_stems(stem: str) -> frozenset[str]:
    """The stems that count as ``stem`` (itself included; just itself outside every group)."""
    return _by_stem().get(stem, frozenset((stem,)))
