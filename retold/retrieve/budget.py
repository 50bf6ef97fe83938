"""Budget fill with conflict-authority pairs.

Walks ranked survivors and admits whole records until ``k`` primary results or the token
budget. A provisional record with an eligible authority counterpart (a confirmed record,
or one with more authority, that it conflicts with) is admitted or rejected together with
it, so the caller never sees one half of a disagreement. A counterpart that already ranks
above keeps its own position; one that ranks below (or did not survive) is pulled forward
to sit immediately before the provisional record and does not take a primary slot.

A record type can hold a reserved share of the budget (a memory pack's
``retrieval_budget_pct``): tokens only records of that type may spend, so a flood of
another type cannot crowd it out. Every type also draws on the shared rest once its own
share is spent; with no shares, the whole budget is shared, as it always was.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from retold.models import Candidate, Record

__all__ = ["BudgetResult", "Placement", "fill_budget", "record_tokens"]

ENVELOPE_TOKENS = 30  # one rendered header line per result


def record_tokens(record: Record) -> int:
    """A record's token cost: len(content) // 4 plus the envelope line."""
    return len(record.content) // 4 + ENVELOPE_TOKENS


@dataclass
class Placement:
    candidate: Candidate
    primary: bool  # False for a counterpart pulled in beside its provisional conflict
    tokens_used: int  # running total after this record
    position: int  # 1-based position in the response


@dataclass
class BudgetResult:
    chosen: list[Placement]
    budget_out: list[str]


def fill_budget(
    ranked: Sequence[Candidate],
    records: Mapping[str, Record],
    k: int,
    token_budget: int,
    counterpart_of: Callable[[Record], Record | None],
    reserved: Mapping[str, int] | None = None,
) -> BudgetResult:
    """Choose the response records; ``counterpart_of`` returns a provisional record's
    eligible authority counterpart (or None). Content is never truncated: a record that
    does not fit is skipped and the next one tried. ``reserved`` maps a record type to
    the tokens set aside for it within ``token_budget``."""
    reserved = reserved or {}
    shared = token_budget - sum(reserved.values())
    by_type: dict[str, int] = {}
    by_id = {c.record_id: c for c in ranked}
    # Counterparts that were not candidates; ``records`` is only read, one key at a time,
    # so a mapping that reads records from the store as they are asked for works too.
    pulled: dict[str, Record] = {}

    def record_of(record_id: str) -> Record:
        found = pulled.get(record_id)
        return found if found is not None else records[record_id]

    chosen: list[Placement] = []
    placed: set[str] = set()
    rejected: set[str] = set()
    budget_out: list[str] = []
    used = primaries = 0

    def admit(unit: list[tuple[Candidate, bool]]) -> None:
        nonlocal used, primaries
        for candidate, primary in unit:
            record = record_of(candidate.record_id)
            used += record_tokens(record)
            by_type[record.type] = by_type.get(record.type, 0) + record_tokens(record)
            primaries += primary
            placed.add(candidate.record_id)
            chosen.append(Placement(candidate, primary, used, len(chosen) + 1))

    def fits_shares(unit_records: list[Record]) -> bool:
        # Each type spends its reserved share first; what it spends beyond comes out of
        # the shared rest, which every type's overflow together may not exceed.
        if not reserved:
            return True
        after = dict(by_type)
        for record in unit_records:
            after[record.type] = after.get(record.type, 0) + record_tokens(record)
        overflow = sum(max(0, spent - reserved.get(t, 0)) for t, spent in after.items())
        return overflow <= shared

    for candidate in ranked:
        if primaries >= k:
            if candidate.record_id not in placed:
                budget_out.append(candidate.record_id)
            continue
        if candidate.record_id in placed or candidate.record_id in rejected:
            continue
        record = record_of(candidate.record_id)
        unit: list[tuple[Candidate, bool]] = [(candidate, True)]
        counterpart = counterpart_of(record) if record.status == "provisional" else None
        if counterpart is not None and counterpart.id not in placed:
            if counterpart.id in rejected:  # its authority half did not fit: neither shows
                rejected.add(candidate.record_id)
                budget_out.append(candidate.record_id)
                continue
            pulled[counterpart.id] = counterpart
            partner = by_id.get(counterpart.id) or Candidate(record_id=counterpart.id)
            unit.insert(0, (partner, False))
        cost = sum(record_tokens(record_of(c.record_id)) for c, _ in unit)
        if used + cost > token_budget or not fits_shares([record_of(c.record_id) for c, _ in unit]):
            for c, _ in unit:
                rejected.add(c.record_id)
                budget_out.append(c.record_id)
            continue
        admit(unit)
    return BudgetResult(chosen, list(dict.fromkeys(budget_out)))
