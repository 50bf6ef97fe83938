"""A logged search decided again, from its search_log row alone.

The fit of the gate, an operator comparing thresholds, and tests rebuild a search's fused
candidates from the row's named columns and run the same code the retriever ran (fusion,
freshness, signals, decision, tail cut) under other settings. Nothing is read from the
store. Rows written before the decision was logged hold an older, positional shape and
are refused with :class:`NotReplayable`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from retold.config import FusionConfig, GateConfig
from retold.errors import RetoldError
from retold.models import Candidate, LexicalMatch, LexicalTerm, QueryShape
from retold.retrieve.confidence import apply_confidence
from retold.retrieve.fusion import Scale, add_links, floor_at, fuse, scaled
from retold.retrieve.gate import Decision, GateResult, decide, gate
from retold.retrieve.signals import Signals, measure
from retold.retrieve.trace import LOG_FORMAT, logged_dense_score

__all__ = ["NotReplayable", "Replayed", "logged_signals", "replay"]


class NotReplayable(RetoldError):
    """The row was logged in an older shape, before searches logged their decision."""


@dataclass(frozen=True)
class _Hit:
    record_id: str
    rank: int
    bm25: float
    match: LexicalMatch


@dataclass(frozen=True)
class _Logged:
    confidence: float


@dataclass
class Replayed:
    """What the search would have returned under the settings given (before duplicate
    collapse and the budget, which need the records themselves)."""

    decision: Decision
    result: GateResult

    @property
    def kept(self) -> list[str]:
        return [c.record_id for c in self.result.kept]


def _col(row: Mapping[str, Any], name: str) -> Any:
    value = row.get(name)
    return json.loads(value) if isinstance(value, str) else value


def _check(row: Mapping[str, Any]) -> None:
    flags = _col(row, "config_flags") or {}
    if _col(row, "decision") is None or flags.get("log_format") != LOG_FORMAT:
        raise NotReplayable(f"search {row.get('id')} was logged before searches recorded their decision; "
                            "it cannot be decided again")


def logged_signals(row: Mapping[str, Any]) -> Signals:
    """The signals the search measured, as logged."""
    _check(row)
    return Signals(**_col(row, "decision")["signals"])


def _terms(rows: list[dict[str, Any]]) -> tuple[LexicalTerm, ...]:
    return tuple(LexicalTerm(t["value"], bool(t["identifier"]), bool(t["alias"]), bool(t["proper"]))
                 for t in rows)


def _floors(row: Mapping[str, Any], dense: list[tuple[str, float]],
            hits: list[_Hit]) -> tuple[float | None, float | None]:
    """The channels' zeros as the search logged them; a row logged before they were kept
    scaled from the last of a full candidate list, which the row still holds."""
    flags = _col(row, "config_flags")
    if "scale_floors" in flags:
        return flags["scale_floors"]["dense"], flags["scale_floors"]["lexical"]
    depth = int(flags["per_generator_k"])
    return (floor_at([cos for _, cos in dense], depth),
            floor_at([-h.bm25 for h in sorted(hits, key=lambda h: h.rank)], depth))


def _candidates(row: Mapping[str, Any], fusion: FusionConfig,
                scale: Scale = scaled) -> tuple[list[Candidate], QueryShape]:
    """The search's candidates fused under ``fusion``, with the logged freshness and
    confidence."""
    dense_rows = _col(row, "dense")
    lexical = _col(row, "lexical")
    hits = [_Hit(h["id"], h["rank"], h["bm25"], LexicalMatch(_terms(h["terms"]), h["total_terms"],
                                                            h["name_terms"])) for h in lexical["hits"]]
    shape = QueryShape(bool(lexical["asks"]), tuple(lexical["unknown_names"]),
                       tuple(tuple(g) for g in lexical["name_groups"]))
    fused_rows = _col(row, "fused")
    known = {f["id"] for f in fused_rows}  # records still there when the search read them
    dense = [(d["id"], logged_dense_score(d)) for d in dense_rows]
    entity = [(e["id"], e["entity_id"]) for e in _col(row, "entity")]
    candidates = [c for c in fuse(dense, hits, entity, fusion, _floors(row, dense, hits), scale)
                  if c.record_id in known]
    candidates = add_links(candidates, [(f["id"], f["via"]) for f in fused_rows if f["via"]], fusion.link)
    beyond = {d["id"]: d["beyond_names"] for d in dense_rows if d.get("beyond_names") is not None}
    multipliers = {f["id"]: f["multiplier"] for f in _col(row, "freshness")}
    for c in candidates:
        c.beyond_names = beyond.get(c.record_id)
        c.freshness_multiplier = multipliers.get(c.record_id)
        c.score = c.fused_score * (c.freshness_multiplier if c.freshness_multiplier is not None else 1.0)
    # The search's own factor on the logged values, where it weighed (an empty table only
    # sorts). Rows logged before confidence weighed the order hold none, and a record without
    # one keeps its score: they rank as they ran.
    weighed = _col(row, "config_flags").get("confidence", True)
    apply_confidence(candidates, {f["id"]: _Logged(f["confidence"])
                                  for f in fused_rows if weighed and "confidence" in f})
    return candidates, shape


def replay(row: Mapping[str, Any], gate_cfg: GateConfig, fusion: FusionConfig | None = None,
           trigger: str | None = None, scale: Scale = scaled) -> Replayed:
    """Decide a logged search again under ``gate_cfg`` (and ``fusion``, the logged one when
    None), as a search of ``trigger`` (the logged one when None; a judged search reads as a
    tool search), each channel's scores
    scaled by ``scale``."""
    _check(row)
    flags = _col(row, "config_flags")
    fusion = fusion or FusionConfig(**flags["fusion"])
    candidates, shape = _candidates(row, fusion, scale)
    trigger = trigger or ("tool" if _col(row, "request").get("judged") else str(row["trigger"]))
    decision = decide(measure(candidates, shape), gate_cfg, trigger,
                      deferred=bool(_col(row, "decision").get("deferred")))
    kinds = {f["id"]: f["source_kind"] for f in _col(row, "fused")}
    tail = gate_cfg.tail_fraction.host if trigger == "host" else gate_cfg.tail_fraction.tool
    return Replayed(decision, gate(candidates, decision, kinds, tail))
