"""The retrieval gate on its own: floors, relative floor and the k cut."""

from __future__ import annotations

from retold.config import load_config
from retold.models import Candidate, GeneratorHit, LexicalMatch, LexicalTerm
from retold.retrieve.gate import RecordKind, floors_for, gate

FLOORS = floors_for(load_config(overrides={"retrieval": {"gate": {
    "dense_floor": {"semantic": 0.45, "episodic": 0.40, "procedural": 0.45, "session_summary": 0.50},
    "relative_floor": 0.5,
}}}).retrieval.gate, "tool")
SEMANTIC = RecordKind("semantic", "user_statement")
EPISODIC = RecordKind("episodic", "agent_inference")


def dense(rid: str, cosine: float, score: float = 0.016) -> Candidate:
    return Candidate(rid, dense=GeneratorHit(1, cosine), rrf_score=score, score=score, fused_rank=1)


def lexical(rid: str, terms: list[tuple[str, bool, bool]], total: int, score: float = 0.016) -> Candidate:
    match = LexicalMatch(tuple(LexicalTerm(*t) for t in terms), total)
    return Candidate(rid, lexical=GeneratorHit(1, -3.2), lexical_terms=match, rrf_score=score,
                     score=score, fused_rank=1)


def test_dense_floor_is_per_type_and_named_in_the_reason() -> None:
    result = gate([dense("ep", 0.42), dense("sem", 0.42)], {"ep": EPISODIC, "sem": SEMANTIC}, FLOORS)
    assert [c.record_id for c in result.kept] == ["ep"]
    ((rid, reason),) = result.gated_out
    assert rid == "sem" and "dense 0.420 < 0.45 (semantic)" in reason


def test_lexical_one_plain_word_is_dropped_an_identifier_or_two_words_pass() -> None:
    plain = lexical("plain", [("deployment", False, False)], 1)
    ident = lexical("ident", [("err42", True, False)], 1)
    two = lexical("two", [("deploy", False, False), ("staging", False, False)], 2)
    kinds = {"plain": SEMANTIC, "ident": SEMANTIC, "two": SEMANTIC}
    result = gate([plain, ident, two], kinds, FLOORS)
    assert {c.record_id for c in result.kept} == {"ident", "two"}
    assert "1 matched < 2" in dict(result.gated_out)["plain"]


def test_lexical_only_match_on_an_entity_alias_passes() -> None:
    alias = lexical("alias", [("atlas", False, True)], 1)
    assert [c.record_id for c in gate([alias], {"alias": SEMANTIC}, FLOORS).kept] == ["alias"]


def test_relative_floor_drops_a_weak_peer_of_its_channel_group_but_not_an_entity_hit() -> None:
    corroborated = Candidate("both", dense=GeneratorHit(1, 0.8), lexical=GeneratorHit(1, -5.0),
                             lexical_terms=LexicalMatch((LexicalTerm("a", False, False),
                                                         LexicalTerm("b", False, False)), 2),
                             rrf_score=0.0328, score=0.0328, fused_rank=1)
    strong_single = dense("strong", 0.9, score=0.0164)
    weak_single = dense("weak", 0.5, score=0.0070)  # below 0.5 x 0.0164
    entity = Candidate("entity", entity=GeneratorHit(1, 0.0), entity_id="ent_x",
                       rrf_score=0.0070, score=0.0070, fused_rank=4)
    kinds = dict.fromkeys(("both", "strong", "weak", "entity"), SEMANTIC)
    result = gate([corroborated, strong_single, weak_single, entity], kinds, FLOORS)
    # The two-channel record does not eliminate the strong single-channel one.
    assert [c.record_id for c in result.kept] == ["both", "strong", "entity"]
    assert dict(result.gated_out)["weak"].startswith("step 2:")


def test_relative_floor_is_a_no_op_for_a_single_survivor() -> None:
    lone = dense("lone", 0.5, score=0.0001)
    assert [c.record_id for c in gate([lone], {"lone": SEMANTIC}, FLOORS).kept] == ["lone"]


def test_empty_reason_names_every_missed_floor_of_the_best_candidate() -> None:
    best = Candidate("best", dense=GeneratorHit(1, 0.38), lexical=GeneratorHit(2, -1.0),
                     lexical_terms=LexicalMatch((LexicalTerm("deploy", False, False),), 4),
                     rrf_score=0.03, score=0.03, fused_rank=1)
    result = gate([best, dense("other", 0.1, score=0.01)], {"best": SEMANTIC, "other": SEMANTIC}, FLOORS)
    assert result.kept == []
    reason = result.empty_reason or ""
    assert "dense 0.380 < 0.45 (semantic)" in reason
    assert "lexical 1/4 terms < 0.50, 1 matched < 2" in reason
    assert "no entity match" in reason


def test_auto_gate_excludes_session_summaries_before_any_floor() -> None:
    auto = floors_for(load_config().retrieval.gate, "auto")
    summary = Candidate("sum", entity=GeneratorHit(1, 0.0), entity_id="e", rrf_score=0.1, score=0.1)
    result = gate([summary], {"sum": RecordKind("episodic", "session_summary")}, auto)
    assert result.kept == [] and "excluded source kind session_summary" in result.gated_out[0][1]
