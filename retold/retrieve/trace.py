"""What one search did, stage by stage, and the search-log row it becomes.

Every JSON column of the row is a list of named objects (or one object), so whoever reads
a logged search (:mod:`retold.retrieve.replay`, an operator with ``retold search``) reads
fields by name; ``config_flags.log_format`` says which shape a row has. The columns are
built by the log writer, after the search has answered (:class:`LogJson`), from values
no later stage changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from retold.clock import to_iso
from retold.models import Candidate, LexicalTerm, Principal, QueryShape, RewriteStatus, SearchRequest
from retold.retrieve.explain import explanation_dict
from retold.retrieve.gate import Decision, GateResult
from retold.retrieve.generators import LexicalHit
from retold.retrieve.periods import NamedPeriod
from retold.retrieve.search_log import LogJson, log_json
from retold.store.search import RecordMeta

__all__ = ["LOG_FORMAT", "RerankLog", "SearchTrace", "logged_dense_score", "logged_terms"]

# The shape of the JSON columns: 2 = named objects and a decision. Rows without it hold the
# positional lists of an older gate and are not replayed.
LOG_FORMAT = 2
_PARTS = ("dense", "lexical", "entity", "link")  # a fused entry's parts, in Candidate's order


def logged_terms(terms: Sequence[LexicalTerm]) -> list[dict[str, Any]]:
    """Matched terms as the log holds them (``replay`` reads them back)."""
    return [{"value": t.value, "identifier": t.is_identifier, "alias": t.is_entity_alias,
             "proper": t.is_proper} for t in terms]


def logged_dense_score(entry: Mapping[str, Any]) -> float:
    """A logged dense hit's channel score; rows logged before the channel mixed in the
    cosine beyond the question's names called it the cosine."""
    return float(entry["score"] if "score" in entry else entry["cosine"])


@dataclass
class RerankLog:
    """What the optional cross-encoder did: its status, the scores it logged, the records
    it left out and why, and its error."""

    status: str
    logged: list[Any] | None
    omitted: list[list[Any]]
    error: str | None


@dataclass
class SearchTrace:
    """The stages' outputs, filled in by the retriever as it runs."""

    search_id: str
    started: datetime
    principal: Principal
    request: SearchRequest
    rewrite_status: RewriteStatus = "disabled"
    rewritten: list[str] | None = None
    scopes: list[str] = field(default_factory=list)
    dense: list[tuple[str, float]] = field(default_factory=list)
    lexical: list[LexicalHit] = field(default_factory=list)
    entity: list[tuple[str, str]] = field(default_factory=list)
    shape: QueryShape = field(default_factory=QueryShape)
    fused: list[Candidate] = field(default_factory=list)  # in fused order, before freshness and confidence
    meta: Mapping[str, RecordMeta] = field(default_factory=dict)
    freshness: list[tuple[str, float]] = field(default_factory=list)
    decision: Decision | None = None
    gated: GateResult | None = None
    deduped_out: list[tuple[str, str, float]] = field(default_factory=list)
    rerank: RerankLog | None = None
    budget_out: list[str] = field(default_factory=list)
    returned: list[tuple[Any, str]] = field(default_factory=list)  # (explanation, record id)
    empty_reason: str | None = None
    flags: dict[str, Any] = field(default_factory=dict)
    warm: bool = False
    periods: tuple[NamedPeriod, ...] = ()  # the periods the question names

    def log_row(self, timings: Mapping[str, float]) -> dict[str, Any]:
        """The search_log row; JSON columns as :class:`LogJson`, serialised by the writer."""
        request = self.request
        asked = {"queries": list(request.queries), "types": _copy(request.types),
                 "entities": _copy(request.entities), "since": request.since,
                 "until": request.until, "k": request.k, "include_history": request.include_history}
        if request.judged:
            asked["judged"] = True
        if request.as_of is not None:
            asked["as_of"] = request.as_of
        beyond = {c.record_id: c.beyond_names for c in self.fused if c.beyond_names is not None}
        # ``ranked`` is the score the tool returned and the order was made by (after
        # freshness and confidence); ``parts`` what each channel added to the fused sum.
        fused = [(c.record_id, c.fused_rank, c.fused_score, c.via, c.score,
                  (c.dense_part, c.lexical_part, c.entity_part, c.link_part)) for c in self.fused]
        meta, rerank, gated, decision = self.meta, self.rerank, self.gated, self.decision
        timings = dict(timings)
        return {
            "id": self.search_id, "at": to_iso(self.started), "agent_id": self.principal.agent_id,
            "user_id": self.principal.user_id, "session_id": self.principal.session_id,
            "trigger": request.trigger, "request": LogJson(lambda: asked), "context": request.context,
            "rewrite_status": self.rewrite_status,
            "rewritten_queries": log_json(self.rewritten) if self.rewritten is not None else None,
            "readable_scopes": LogJson(lambda: self.scopes),
            "dense": LogJson(lambda: [{"id": rid, "rank": rank, "score": round(score, 6),
                                       "beyond_names": beyond.get(rid)}
                                      for rank, (rid, score) in enumerate(self.dense, 1)]),
            "lexical": LogJson(lambda: {
                "hits": [{"id": h.record_id, "rank": h.rank, "bm25": h.bm25,
                          "terms": logged_terms(h.match.terms), "total_terms": h.match.total_terms,
                          "name_terms": h.match.name_terms} for h in self.lexical],
                "asks": self.shape.asks, "unknown_names": list(self.shape.unknown_names),
                "name_groups": [list(group) for group in self.shape.name_groups]}),
            "entity": LogJson(lambda: [{"id": rid, "rank": rank, "entity_id": eid}
                                       for rank, (rid, eid) in enumerate(self.entity, 1)]),
            "fused": LogJson(lambda: [{"id": rid, "rank": rank, "score": score, "via": via,
                                       "type": meta[rid].type, "source_kind": meta[rid].source_kind,
                                       "confidence": meta[rid].confidence, "ranked": ranked,
                                       "parts": dict(zip(_PARTS, parts, strict=True))}
                                      for rid, rank, score, via, ranked, parts in fused if rid in meta]),
            "freshness": LogJson(lambda: [{"id": rid, "multiplier": m} for rid, m in self.freshness]),
            "decision": LogJson(lambda: decision.as_dict() if decision is not None else None),
            "gated_out": LogJson(lambda: [{"id": rid, "why": why}
                                          for rid, why in (gated.cut if gated is not None else [])]),
            "deduped_out": LogJson(lambda: [{"id": d, "kept": k, "cosine": cos}
                                            for d, k, cos in self.deduped_out]),
            "reranked": LogJson(lambda: rerank.logged) if rerank is not None and rerank.logged is not None
            else None,
            "reranked_out": LogJson(lambda: rerank.omitted if rerank is not None else []),
            "rerank_status": rerank.status if rerank is not None else "disabled",
            "rerank_error": rerank.error if rerank is not None else None,
            "budget_out": LogJson(lambda: self.budget_out),
            "returned": LogJson(lambda: [rid for _, rid in self.returned]),
            "explanations": LogJson(lambda: [explanation_dict(ex) | {"record_id": rid}
                                             for ex, rid in self.returned]
                                    or [{"empty_reason": self.empty_reason}]),
            "config_flags": LogJson(lambda: self.flags | {"log_format": LOG_FORMAT}),
            "warm": int(self.warm), "timings_ms": LogJson(lambda: timings),
        }


def _copy(values: list[str] | None) -> list[str] | None:
    return None if values is None else list(values)
