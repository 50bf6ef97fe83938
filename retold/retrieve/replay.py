"""The gate's offline replay: a logged search re-decided from its search_log row alone.

Calibration sweeps and ``replay_gate`` rebuild the candidates, their record kinds and the
query shape from the logged columns and run :func:`retold.retrieve.gate.gate` on them with
other floors, so what a sweep measures is the decision the retriever makes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from retold.models import Candidate, GeneratorHit, LexicalMatch, LexicalTerm, QueryShape
from retold.retrieve.gate import GateFloors, GateResult, RecordKind, gate

__all__ = ["logged_candidates", "replay_gate"]


def replay_gate(log_row: Mapping[str, Any], floors: GateFloors) -> GateResult:
    """Re-decide a logged search's gate with other floors, from its logged scores alone.

    Uses the ``fused`` column (rank order, score, record type and source kind), the
    ``freshness`` multipliers, the per-channel hits, and the query shape and the records
    reached on links logged with the lexical hits; nothing is read from the store.
    """
    candidates, kinds, shape = logged_candidates(log_row)
    return gate(candidates, kinds, floors, shape)


def logged_candidates(
    log_row: Mapping[str, Any],
) -> tuple[list[Candidate], dict[str, RecordKind], QueryShape]:
    """A logged search's fused candidates in score order, their kinds and the query shape:
    what :func:`gate` needs, rebuilt from the row (a sweep parses each row once)."""
    def col(name: str) -> list[Any]:
        value = log_row[name]
        return json.loads(value) if isinstance(value, str) else list(value)

    # A dense row is [record, rank, cosine], with the cosine beyond the question's names
    # fourth where the retriever computed it.
    dense_rows = col("dense")
    dense = {row[0]: GeneratorHit(row[1], row[2]) for row in dense_rows}
    beyond = {row[0]: row[3] for row in dense_rows if len(row) > 3}
    logged = log_row["lexical"]
    logged = json.loads(logged) if isinstance(logged, str) else logged
    # Rows written before the gate judged asked terms hold a bare list of hits.
    hits, shape = (logged, QueryShape()) if isinstance(logged, list) else (
        logged["hits"], QueryShape(bool(logged["asks"]), tuple(logged["unknown_names"]),
                                   tuple(tuple(group) for group in logged.get("name_groups", ()))))
    lexical = {row[0]: row for row in hits}
    entity = {rid: (rank, eid) for rid, rank, eid in col("entity")}
    multipliers = dict(col("freshness"))
    flags = log_row.get("config_flags")
    flags = json.loads(flags) if isinstance(flags, str) else (flags or {})
    rrf_k = int(flags.get("rrf_k", 60))  # rows logged before the flag was: the default k
    candidates: list[Candidate] = []
    kinds: dict[str, RecordKind] = {}
    for rid, fused_rank, rrf_score, type_, source_kind in col("fused"):
        lex = lexical.get(rid)
        match = None
        if lex is not None:
            match = LexicalMatch(_logged_terms(lex[3]), lex[4], lex[5] if len(lex) > 5 else 0)
        multiplier = multipliers.get(rid)
        candidates.append(Candidate(
            record_id=rid, dense=dense.get(rid),
            lexical=GeneratorHit(lex[1], lex[2]) if lex else None, lexical_terms=match,
            entity=GeneratorHit(entity[rid][0], 0.0) if rid in entity else None,
            entity_id=entity[rid][1] if rid in entity else None, rrf_score=rrf_score,
            fused_rank=fused_rank, freshness_multiplier=multiplier, beyond_names=beyond.get(rid),
            score=rrf_score * (multiplier if multiplier is not None else 1.0),
            dense_vote=1.0 / (rrf_k + dense[rid].rank) if rid in dense else 0.0,
        ))
        kinds[rid] = RecordKind(type_, source_kind)
    candidates.sort(key=lambda c: -c.score)
    # Records reached on a link: after the fused ones, in the order they were fetched.
    by_id = {c.record_id: c for c in candidates}
    for rid, via, terms, total, names, type_, source_kind in (
            logged.get("linked", ()) if isinstance(logged, dict) else ()):
        linked = by_id.get(rid)
        if linked is None:
            linked = by_id[rid] = Candidate(record_id=rid)
            candidates.append(linked)
            kinds[rid] = RecordKind(type_, source_kind)
        linked.via = via
        linked.via_terms = LexicalMatch(_logged_terms(terms), total, names)
    return candidates, kinds, shape


def _logged_terms(rows: list[list[Any]]) -> tuple[LexicalTerm, ...]:
    """Matched terms from the log's ``[value, identifier, entity alias, proper]`` rows (the
    retriever writes them); rows logged before names were flagged lack the last field."""
    return tuple(LexicalTerm(t[0], bool(t[1]), bool(t[2]), bool(t[3:4] and t[3])) for t in rows)
