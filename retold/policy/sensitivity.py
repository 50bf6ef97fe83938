"""A record's sensitivity class, and the redacted form of its text.

The tenant's memory pack declares the classes (``governance.sensitivity_classes``) and
which of them are masked before their text leaves the record
(``governance.redact_before_embedding``). A record is put in one class when it is
written: the first declared class whose rule claims it, in the order the pack lists
them, else ``none``. A ``pattern`` class claims a record whose content or evidence its
regular expression matches; a ``category`` class one whose category (the keyword
classifier of :mod:`retold.activation.categories`) is the class's name; an
``extractor_label`` class one the session extractor labelled with the name: the
extraction prompt lists these classes (:attr:`SensitivityRules.labels`) and each candidate
may name one, which the write path hands to :meth:`SensitivityRules.classify`. A label is
the extractor's reading of the session under the tenant's prompt, so only extraction gives
one. The record keeps the label beside its class (``Record.sensitivity_label``), whether
or not it decided the class: ``retold pack apply`` and an import classify again with it,
so a record an earlier class outranked falls back to its label's class once the pack drops
the earlier one (docs/decisions.md, "The extractor's label is stored with the record").

Redaction masks what the redacted classes' patterns match, in every text, whatever class
the record was put in: a record claimed first by a category class must not leak an
identifier a later pattern class masks. Only a ``pattern`` class can be redacted (the
pack check refuses any other), since a class decided by a category or a label names no
span of text to mask. The masked form is what the embedder, the word index and hosted
models get; the raw content stays in the record for the readers it is shown to.

Session extraction reads the transcript masked (:meth:`SensitivityRules.transcript`), so
what it writes can only hold a class's placeholder where the identifier was: a redacted
class claims a text that holds its placeholder as it claims one its pattern matches, and
such a text counts as masked already (docs/decisions.md, "Sensitive text is masked before
it leaves the record").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from retold.config.pack import BUILTIN_PACK, NO_CLASS, Governance
from retold.models import Record, Turn

__all__ = ["Sensitivity", "SensitivityRules", "placeholder"]

# (attribute, content) -> the record's category, None when no keyword matched.
Categorize = Callable[[str | None, str], str | None]


def placeholder(name: str) -> str:
    """What a masked span of class ``name`` reads as: ``[pii]``."""
    return f"[{name}]"


@dataclass(frozen=True, slots=True)
class Sensitivity:
    """The class a record was put in, its content masked (None: nothing was masked) and
    the extractor's label it was classified with, kept whether or not it decided."""

    name: str
    redacted_content: str | None
    label: str | None = None


@dataclass(frozen=True, slots=True)
class _Rule:
    name: str
    decided_by: str
    pattern: re.Pattern[str] | None
    shown: str | None  # the placeholder of a redacted class, None for one left as is


class SensitivityRules:
    """One tenant's classes and masks, compiled once from its pack's governance block."""

    def __init__(self, governance: Governance = BUILTIN_PACK.governance,
                 categorize: Categorize | None = None) -> None:
        redacted = set(governance.redact_before_embedding)
        self._rules = tuple(
            _Rule(c.name, c.decided_by, re.compile(c.pattern) if c.pattern is not None else None,
                  placeholder(c.name) if c.name in redacted and c.pattern is not None else None)
            for c in governance.sensitivity_classes if c.name != NO_CLASS)
        self._masks = tuple((r.pattern, r.shown) for r in self._rules
                            if r.pattern is not None and r.shown is not None)
        self._categorize = categorize

    @property
    def labels(self) -> tuple[str, ...]:
        """The classes decided by the extractor's label, in the pack's order: what the
        extraction prompt offers, and the only labels a candidate may keep."""
        return tuple(r.name for r in self._rules if r.decided_by == "extractor_label")

    @property
    def redacts(self) -> bool:
        """Whether any class is masked: a pack without redaction leaves every text as is."""
        return bool(self._masks)

    def mask(self, text: str) -> str:
        """``text`` with every span a redacted class's pattern matches replaced by the
        class's placeholder; for any text that may hold a record's content."""
        for pattern, shown in self._masks:
            text = pattern.sub(shown, text)
        return text

    def transcript(self, turns: Sequence[Turn]) -> list[Turn]:
        """Each turn with its content masked: the transcript a hosted model is shown, and
        the one a quote taken from it is found in."""
        if not self.redacts:
            return list(turns)
        return [replace(t, content=self.mask(t.content)) for t in turns]

    def apply(self, record: Record) -> Sensitivity:
        """Put ``record`` in its class and set its masked content, from its own text and
        the extractor's label it carries; the classification, for a caller that acts on it
        (an import drops a vector made from the raw text)."""
        found = self.classify(record.content, evidence=record.evidence, attribute=record.attribute,
                              label=record.sensitivity_label)
        record.sensitivity, record.redacted_content = found.name, found.redacted_content
        return found

    def classify(self, content: str, *, evidence: str | None = None, attribute: str | None = None,
                 label: str | None = None) -> Sensitivity:
        """The class of a record about to be written, and its content masked. ``label``
        decides only a class the pack declares as an extractor's label, and only where no
        earlier class claims the record; it is handed back either way, to be stored."""
        masked = self.mask(content)
        # Text written from the masked transcript is masked already, and says so.
        was_masked = masked != content or any(
            r.shown is not None and r.shown in content for r in self._rules)
        return Sensitivity(self._claimant(content, evidence, attribute, label),
                           masked if was_masked else None, label)

    def _claimant(self, content: str, evidence: str | None, attribute: str | None,
                  label: str | None) -> str:
        category: str | None = None
        categorized = False
        for rule in self._rules:
            if rule.pattern is not None:
                if any(text and (rule.pattern.search(text) or (rule.shown and rule.shown in text))
                       for text in (content, evidence)):
                    return rule.name
            elif rule.decided_by == "category":
                if not categorized and self._categorize is not None:
                    category, categorized = self._categorize(attribute, content), True
                if category == rule.name:
                    return rule.name
            elif label is not None and label == rule.name:
                return rule.name
        return NO_CLASS
