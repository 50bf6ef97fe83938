"""The relevance gate, and its offline replay from a search_log row.

Step 1 keeps a candidate that clears any absolute floor (entity match, per-type dense
floor, lexical term fraction with its matched-term rule). Step 2 drops survivors below
``relative_floor`` times the best fused score among survivors with the same number of
contributing channels (entity hits exempt; see ``docs/decisions.md``, "The relative floor
compares records with the same channel count"). Step 3 names the best candidate's missed
floors when nothing survives. Every dropped candidate carries the step and floor that
dropped it, so a logged search can be re-decided with other floors.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from retold.config import AutoGateConfig, DenseFloors, GateConfig
from retold.models import Candidate, GeneratorHit, LexicalMatch, LexicalTerm

__all__ = ["GateFloors", "GateResult", "RecordKind", "floors_for", "gate", "replay_gate"]


@dataclass(frozen=True)
class RecordKind:
    """What the gate needs to know about a candidate's record."""

    type: str
    source_kind: str


@dataclass(frozen=True)
class GateFloors:
    """One complete set of floors: the normal gate or the ``auto`` gate."""

    dense_floor: DenseFloors
    lexical_min_term_fraction: float
    lexical_min_matched_terms: int
    relative_floor: float
    exclude_source_kinds: tuple[str, ...] = ()

    def dense_for(self, kind: RecordKind) -> tuple[float, str]:
        """The dense floor and its label: session summaries, long and broad, have their own."""
        if kind.source_kind == "session_summary":
            return self.dense_floor.session_summary, "session_summary"
        return float(getattr(self.dense_floor, kind.type)), kind.type

    def as_dict(self) -> dict[str, Any]:
        return {
            "dense_floor": {k: getattr(self.dense_floor, k)
                            for k in ("semantic", "episodic", "procedural", "session_summary")},
            "lexical_min_term_fraction": self.lexical_min_term_fraction,
            "lexical_min_matched_terms": self.lexical_min_matched_terms,
            "relative_floor": self.relative_floor,
            "exclude_source_kinds": list(self.exclude_source_kinds),
        }


def floors_for(cfg: GateConfig, trigger: str) -> GateFloors:
    """The floors a search uses: ``gate.auto`` replaces every floor for host-issued searches."""
    source: GateConfig | AutoGateConfig = cfg.auto if trigger == "auto" else cfg
    excluded = cfg.auto.exclude_source_kinds if trigger == "auto" else ()
    return GateFloors(source.dense_floor, source.lexical_min_term_fraction,
                      source.lexical_min_matched_terms, source.relative_floor, tuple(excluded))


@dataclass
class GateResult:
    kept: list[Candidate]
    gated_out: list[tuple[str, str]]  # (record_id, reason)
    empty_reason: str | None


def _channels(c: Candidate) -> int:
    return sum(hit is not None for hit in (c.dense, c.lexical, c.entity))


def _step1(c: Candidate, kind: RecordKind, floors: GateFloors) -> tuple[str | None, list[str]]:
    """(why it passed, or None) and the floors it missed."""
    missed: list[str] = []
    if c.entity is not None:
        return f"entity match {c.entity_id}", missed
    floor, label = floors.dense_for(kind)
    if c.dense is not None:
        if c.dense.score >= floor:
            return f"dense {c.dense.score:.3f} >= {floor:.2f} ({label})", missed
        missed.append(f"dense {c.dense.score:.3f} < {floor:.2f} ({label})")
    else:
        missed.append(f"no dense match >= {floor:.2f} ({label})")
    match = c.lexical_terms
    if c.lexical is not None and match is not None and match.total_terms:
        matched = len(match.terms)
        fraction = matched / match.total_terms
        precise = any(t.is_identifier or t.is_entity_alias for t in match.terms)
        enough = matched >= floors.lexical_min_matched_terms or precise
        if fraction >= floors.lexical_min_term_fraction and enough:
            why = "identifier or alias" if precise and matched < floors.lexical_min_matched_terms else "terms"
            return f"lexical {matched}/{match.total_terms} {why}", missed
        detail = f"lexical {matched}/{match.total_terms} terms"
        if fraction < floors.lexical_min_term_fraction:
            detail += f" < {floors.lexical_min_term_fraction:.2f}"
        if not enough:
            detail += f", {matched} matched < {floors.lexical_min_matched_terms}"
        missed.append(detail)
    else:
        missed.append("no lexical match")
    missed.append("no entity match")
    return None, missed


def gate(
    candidates: Sequence[Candidate], kinds: Mapping[str, RecordKind], floors: GateFloors
) -> GateResult:
    """Apply steps 1-3 to candidates in score order; sets ``gate_reason``."""
    gated_out: list[tuple[str, str]] = []
    step1: list[Candidate] = []
    best_missed: list[str] | None = None
    for c in candidates:
        kind = kinds[c.record_id]
        if kind.source_kind in floors.exclude_source_kinds:
            c.gate_reason = f"excluded source kind {kind.source_kind} (host-issued search)"
            gated_out.append((c.record_id, c.gate_reason))
            continue
        passed, missed = _step1(c, kind, floors)
        if passed is None:
            c.gate_reason = "step 1: " + "; ".join(missed)
            gated_out.append((c.record_id, c.gate_reason))
            if best_missed is None:
                best_missed = missed  # candidates arrive best first
        else:
            c.gate_reason = f"passed on {passed}"
            step1.append(c)
    tops: dict[int, float] = {}
    for c in step1:
        tops[_channels(c)] = max(tops.get(_channels(c), 0.0), c.score)
    kept: list[Candidate] = []
    for c in step1:
        top = tops[_channels(c)]
        if c.entity is None and c.score < floors.relative_floor * top:
            c.gate_reason = (f"step 2: fused {c.score:.5f} < {floors.relative_floor:.2f} x "
                             f"{top:.5f} ({_channels(c)}-channel top)")
            gated_out.append((c.record_id, c.gate_reason))
        else:
            kept.append(c)
    empty_reason = None
    if not kept:
        if best_missed is not None:
            empty_reason = "best candidate missed every floor: " + "; ".join(best_missed)
        elif gated_out:
            empty_reason = "every candidate was dropped: " + gated_out[0][1]
        else:
            empty_reason = "no candidate from any channel among readable records"
    return GateResult(kept, gated_out, empty_reason)


def replay_gate(log_row: Mapping[str, Any], floors: GateFloors) -> GateResult:
    """Re-decide a logged search's gate with other floors, from its logged scores alone.

    Uses the ``fused`` column (rank order, score, record type and source kind), the
    ``freshness`` multipliers and the per-channel hits; nothing is read from the store.
    """
    def col(name: str) -> list[Any]:
        value = log_row[name]
        return json.loads(value) if isinstance(value, str) else list(value)

    dense = {rid: GeneratorHit(rank, cos) for rid, rank, cos in col("dense")}
    lexical = {row[0]: row for row in col("lexical")}
    entity = {rid: (rank, eid) for rid, rank, eid in col("entity")}
    multipliers = dict(col("freshness"))
    candidates: list[Candidate] = []
    kinds: dict[str, RecordKind] = {}
    for rid, fused_rank, rrf_score, type_, source_kind in col("fused"):
        lex = lexical.get(rid)
        match = None
        if lex is not None:
            terms = tuple(LexicalTerm(v, bool(i), bool(a)) for v, i, a in lex[3])
            match = LexicalMatch(terms, lex[4])
        multiplier = multipliers.get(rid)
        candidates.append(Candidate(
            record_id=rid, dense=dense.get(rid),
            lexical=GeneratorHit(lex[1], lex[2]) if lex else None, lexical_terms=match,
            entity=GeneratorHit(entity[rid][0], 0.0) if rid in entity else None,
            entity_id=entity[rid][1] if rid in entity else None, rrf_score=rrf_score,
            fused_rank=fused_rank, freshness_multiplier=multiplier,
            score=rrf_score * (multiplier if multiplier is not None else 1.0),
        ))
        kinds[rid] = RecordKind(type_, source_kind)
    candidates.sort(key=lambda c: -c.score)
    return gate(candidates, kinds, floors)
