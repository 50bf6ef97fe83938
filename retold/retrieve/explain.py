"""Per-result explanations and the rendered tool text."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from retold.clock import to_iso
from retold.models import Candidate, Explanation, GeneratorHit, LexicalMatch, Record, RewriteStatus
from retold.plain import to_plain
from retold.policy.validity import describe, holds_at

__all__ = ["explain", "explanation_dict", "explanation_plain", "render", "short_id"]

Channel = Literal["dense", "lexical", "entity"]


def short_id(record_id: str) -> str:
    """The id shown to the model: the last eight hex digits of the UUIDv7.

    The leading digits of a UUIDv7 are a timestamp shared by records written close
    together; the trailing ones are random, so they tell records apart.
    """
    return record_id.replace("-", "")[-8:]


def _matched(c: Candidate) -> tuple[list[Channel], str]:
    channels: list[Channel] = []
    parts = []
    if c.dense is not None:
        channels.append("dense")
        parts.append(f"dense {c.dense.score:.2f} (rank {c.dense.rank})")
    if c.lexical is not None:
        channels.append("lexical")
        terms = c.lexical_terms
        fraction = f"{len(terms.terms)}/{terms.total_terms}" if terms else "?"
        parts.append(f"lexical {fraction} (rank {c.lexical.rank})")
    if c.entity is not None:
        channels.append("entity")
        parts.append(f"entity (rank {c.entity.rank})")
    if c.via is not None:
        parts.append(f"a link from {short_id(c.via)}")
    return channels, ", ".join(parts) or "authority counterpart of a provisional conflict"


def explain(
    placements: Sequence[tuple[Candidate, Record, str, str]],
    raw_queries: list[str],
    rewritten: list[str] | None,
    rewrite_status: RewriteStatus,
    conflicts: Mapping[str, list[str]],
    *,
    as_of: datetime | None = None,
) -> list[Explanation]:
    """One Explanation per returned record; ``placements`` carry (candidate, record,
    dedup note, budget note) in response order, ``conflicts`` the eligible conflicting
    ids of each record. With ``as_of`` the summary also says each record's validity
    window, and that a conflict leaves it open."""
    out = []
    for candidate, record, dedup, budget in placements:
        channels, matched = _matched(candidate)
        gate = candidate.gate_reason or "admitted as the authority counterpart of a conflict"
        rerank = None
        if candidate.rerank_score is not None and candidate.rank_after_rerank is not None:
            rerank = (candidate.fused_rank, candidate.rank_after_rerank, candidate.rerank_score)
        conflicts_with = list(conflicts.get(record.id, []))
        summary = f"matched: {matched}"
        if candidate.fused_rank:
            summary += f"; fused rank {candidate.fused_rank}"
        summary += f"; {gate}"
        if conflicts_with:
            summary += "; conflicts with " + ", ".join(short_id(i) for i in conflicts_with)
        if as_of is not None:
            summary += f"; {describe(record)}"
            if conflicts_with and record.valid_until is None:
                summary += ", left open while the conflict stands"
        out.append(Explanation(
            raw_queries=raw_queries, rewritten_queries=rewritten, rewrite_status=rewrite_status,
            matched_by=channels, dense=candidate.dense, lexical=candidate.lexical,
            lexical_terms=candidate.lexical_terms, entity=candidate.entity,
            fused_rank=candidate.fused_rank, freshness_multiplier=candidate.freshness_multiplier,
            rerank=rerank, gate=gate, dedup=dedup, budget=budget,
            source_kind=record.source_kind, status=record.status, created_at=record.created_at,
            event_at=record.event_at, entity_ids=list(record.entity_ids),
            conflicts_with=conflicts_with, summary=summary,
        ))
    return out


def render(
    results: Sequence[tuple[Record, Explanation]],
    raw_queries: list[str],
    rewritten: list[str] | None,
    empty_reason: str | None,
    *,
    as_of: datetime | None = None,
) -> str:
    """The text the model sees: a header, then one block per result.

    A result with a validity window says it on its first line; with ``as_of`` every
    result does, and the ones valid at that time are marked."""
    searched = ", ".join(f'"{q}"' for q in (rewritten or raw_queries))
    header = f"searched for: {searched}"
    if rewritten:
        header += " (rewritten from " + ", ".join(f'"{q}"' for q in raw_queries) + ")"
    if as_of is not None:
        header += f" as of {_moment(as_of)}"
    if not results:
        return f"{header}\nno memory found: {empty_reason or 'nothing relevant is stored'}"
    blocks = [header]
    for record, explanation in results:
        window = ""
        if as_of is not None or record.valid_from is not None or record.valid_until is not None:
            window = f" · {describe(record)}"
            if as_of is not None and holds_at(record, as_of):
                window += f" (valid at {_moment(as_of)})"
        blocks.append(
            f"[{short_id(record.id)}] {record.type} · {record.status} · {record.source_kind}"
            f" · event {record.event_at.date().isoformat()} · scope {record.scope}{window}\n"
            f"{record.content}\n{explanation.summary}"
        )
    return "\n\n".join(blocks)


def _moment(at: datetime) -> str:
    """A date, or a date and time when the moment is not midnight UTC."""
    text = to_iso(at)
    return text[:10] if text[10:] == "T00:00:00.000000Z" else text[:16].replace("T", " ") + " UTC"


def explanation_dict(ex: Explanation) -> dict[str, Any]:
    """An Explanation as plain JSON-ready data (``dataclasses.asdict`` deep-copies and
    was the costliest part of writing the search log)."""
    out = dict(vars(ex))
    for name in ("dense", "lexical", "entity"):
        hit = out[name]
        out[name] = None if hit is None else {"rank": hit.rank, "score": hit.score}
    terms = ex.lexical_terms
    out["lexical_terms"] = None if terms is None else {
        "terms": [{"value": t.value, "is_identifier": t.is_identifier,
                   "is_entity_alias": t.is_entity_alias} for t in terms.terms],
        "total_terms": terms.total_terms,
    }
    out["created_at"], out["event_at"] = ex.created_at.isoformat(), ex.event_at.isoformat()
    for name in ("raw_queries", "rewritten_queries", "matched_by", "entity_ids", "conflicts_with"):
        value = out[name]
        out[name] = None if value is None else list(value)
    out["rerank"] = None if ex.rerank is None else list(ex.rerank)
    return out


def explanation_plain(ex: Explanation) -> dict[str, Any]:
    """``to_plain(ex)`` written out field by field, for the tool result.

    The generic walk visits some forty values per explanation and was half of the tool
    layer's own time; this builds the same dict (same keys, same order, same values).
    A test holds the two equal, so a field added to Explanation must be added here.
    """
    return {
        "raw_queries": list(ex.raw_queries),
        "rewritten_queries": None if ex.rewritten_queries is None else list(ex.rewritten_queries),
        "rewrite_status": ex.rewrite_status,
        "matched_by": list(ex.matched_by),
        "dense": _plain_hit(ex.dense),
        "lexical": _plain_hit(ex.lexical),
        "lexical_terms": _plain_terms(ex.lexical_terms),
        "entity": _plain_hit(ex.entity),
        "fused_rank": ex.fused_rank,
        "freshness_multiplier": to_plain(ex.freshness_multiplier),
        "rerank": to_plain(ex.rerank),  # a reranker may score with numpy floats
        "gate": ex.gate,
        "dedup": ex.dedup,
        "budget": ex.budget,
        "source_kind": ex.source_kind,
        "status": ex.status,
        "created_at": to_iso(ex.created_at),
        "event_at": to_iso(ex.event_at),
        "entity_ids": list(ex.entity_ids),
        "conflicts_with": list(ex.conflicts_with),
        "summary": ex.summary,
    }


def _plain_hit(hit: GeneratorHit | None) -> dict[str, Any] | None:
    return None if hit is None else {"rank": hit.rank, "score": to_plain(hit.score)}


def _plain_terms(match: LexicalMatch | None) -> dict[str, Any] | None:
    if match is None:
        return None
    return {
        "terms": [{"value": t.value, "is_identifier": t.is_identifier,
                   "is_entity_alias": t.is_entity_alias, "is_proper": t.is_proper}
                  for t in match.terms],
        "total_terms": match.total_terms,
        "name_terms": match.name_terms,
    }
