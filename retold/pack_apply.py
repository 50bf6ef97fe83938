"""Re-applying a tenant's memory pack to the records it already holds.

A record is classified and masked once, when it is written, under the pack in force then
(:mod:`retold.policy.sensitivity`). After the pack's sensitivity classes or redaction
change, :func:`apply_pack` puts every stored record in the class the current pack gives
it, as the write path would (a session summary by its text alone, any other record by
its content, evidence, attribute and the extractor's label it keeps), and where the masked
text changes it rewrites the record's word-index row and embeds the new masked text again.
Without ``apply`` it only counts what would change. See docs/decisions.md, "A changed pack
is applied by command" and "The extractor's label is stored with the record".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from retold.index.embedder import Embedder
from retold.policy.sensitivity import Sensitivity, SensitivityRules
from retold.store import Store
from retold.store.reclassify import StoredClass

__all__ = ["PackApplyResult", "apply_pack"]

BATCH = 256  # records read, classified and embedded together


@dataclass(frozen=True)
class PackApplyResult:
    """What re-applying a pack changed (or, without ``applied``, would change): counts only."""

    records: int  # records classified again (every record that still holds text)
    changed_class: int
    newly_masked: int  # had no masked form, now has one
    unmasked: int  # had one, now nothing is masked
    remasked: int  # masked before and after, differently
    reembedded: int  # vectors made again from the new masked text (never in a dry run)
    applied: bool
    event_id: str | None = None

    @property
    def retexted(self) -> int:
        """Records whose indexed text (the masked form, else the content) changes."""
        return self.newly_masked + self.unmasked + self.remasked


def apply_pack(store: Store, embedder: Embedder, rules: SensitivityRules, *,
               apply: bool, actor: str = "admin", batch: int = BATCH) -> PackApplyResult:
    """Classify and mask every stored record under ``rules`` (the tenant's current pack).

    With ``apply``, write each changed class and mask, rewrite the FTS rows of records
    whose masked text changed and embed that text with ``embedder``, batch by batch (each
    batch is embedded before its transaction opens, so a failing encoder leaves that batch
    as it was and raises), then append one ``pack.applied`` event with the counts. Without
    it, nothing is written and nothing is embedded. The new vectors are stamped with a new
    ``records_version``, so every process's vector index, this one's included, loads them
    on its next refresh (a forgotten record's is dropped)."""
    counts = dict.fromkeys(("records", "changed_class", "newly_masked", "unmasked", "remasked",
                            "reembedded"), 0)
    after = 0
    while rows := store.classes_after(after, batch):
        after = rows[-1].seq
        counts["records"] += len(rows)
        changes: list[tuple[StoredClass, str, str | None]] = []
        for row in rows:
            found = _classify(rules, row)
            if (found.name, found.redacted_content) == (row.sensitivity, row.redacted_content):
                continue
            changes.append((row, found.name, found.redacted_content))
            counts["changed_class"] += found.name != row.sensitivity
            if found.redacted_content != row.redacted_content:
                key = ("newly_masked" if row.redacted_content is None
                       else "unmasked" if found.redacted_content is None else "remasked")
                counts[key] += 1
        if apply and changes:
            counts["reembedded"] += _write(store, embedder, changes)
    event_id = None
    if apply:
        event_id = store.append_event("pack.applied", actor, {"counts": counts})
    return PackApplyResult(**counts, applied=apply, event_id=event_id)


def _classify(rules: SensitivityRules, row: StoredClass) -> Sensitivity:
    """The class and mask the write path would give ``row`` today: a summary is judged by
    its text alone, as it is written; any other record also by the extractor's label it
    keeps, which decides only where the pack declares that class as a label's and no
    earlier class claims the record (no text says it again)."""
    if row.source_kind == "session_summary":
        return rules.classify(row.content)
    # A record written before labels were stored holds none; its class stands in for one,
    # as it did then, so upgrading takes no record out of a class its label decided.
    label = row.label if row.label is not None else row.sensitivity
    return rules.classify(row.content, evidence=row.evidence, attribute=row.attribute, label=label)


def _write(store: Store, embedder: Embedder,
           changes: Sequence[tuple[StoredClass, str, str | None]]) -> int:
    """Embed the new indexed text of the changes whose mask changed, then write the batch;
    returns how many vectors were made again."""
    retext = [(row.id, masked if masked is not None else row.content)
              for row, _, masked in changes if masked != row.redacted_content]
    vectors: list[tuple[str, np.ndarray]] = []
    if retext:
        made = embedder.embed_documents([text for _, text in retext])
        vectors = [(record_id, vector) for (record_id, _), vector in zip(retext, made, strict=True)]
    written = set(store.reclassify(changes, vectors, embedder.name, embedder.version))
    return sum(record_id in written for record_id, _ in vectors)
