"""The retrieval gate on its own: what is asked, names, unknown names and the relative floor."""

from __future__ import annotations

from dataclasses import replace

from retold.config import load_config
from retold.models import Candidate, GeneratorHit, LexicalMatch, LexicalTerm, QueryShape
from retold.retrieve.gate import RecordKind, floors_for, gate

FLOORS = floors_for(load_config(overrides={"retrieval": {"gate": {
    "dense_floor": {"semantic": 0.45, "episodic": 0.40, "procedural": 0.45, "session_summary": 0.50},
    "relative_floor": 0.5, "name_only_margin": 0.2, "unknown_name_floor": 0.9,
    "lexical_min_term_fraction": 0.5, "lexical_min_matched_terms": 2,
    "standout_margin": 0.0, "companion_margin": 0.0,
}}}).retrieval.gate, "tool")
SEMANTIC = RecordKind("semantic", "user_statement")
EPISODIC = RecordKind("episodic", "agent_inference")
NAMES_ONLY = QueryShape(asks=False)


def dense(rid: str, cosine: float, score: float = 0.016) -> Candidate:
    return Candidate(rid, dense=GeneratorHit(1, cosine), rrf_score=score, score=score, fused_rank=1)


def term(value: str, *, name: bool = False) -> LexicalTerm:
    return LexicalTerm(value, False, False, name)


def lexical(rid: str, terms: list[LexicalTerm], total: int, names: int = 0, score: float = 0.016,
            cosine: float | None = None) -> Candidate:
    match = LexicalMatch(tuple(terms), total, names)
    return Candidate(rid, lexical=GeneratorHit(1, -3.2), lexical_terms=match,
                     dense=GeneratorHit(1, cosine) if cosine is not None else None,
                     rrf_score=score, score=score, fused_rank=1)


def kept(result_candidates: list[Candidate], shape: QueryShape | None = None) -> list[str]:
    kinds = {c.record_id: SEMANTIC for c in result_candidates}
    return [c.record_id for c in gate(result_candidates, kinds, FLOORS, shape).kept]


def test_dense_floor_is_per_type_and_named_in_the_reason() -> None:
    result = gate([dense("ep", 0.42), dense("sem", 0.42)], {"ep": EPISODIC, "sem": SEMANTIC}, FLOORS)
    assert [c.record_id for c in result.kept] == ["ep"]
    ((rid, reason),) = result.gated_out
    assert rid == "sem" and "dense 0.420 < 0.45 (semantic)" in reason


def test_a_one_word_question_passes_on_that_word() -> None:
    # "peanuts": one asked term, held by the record.
    assert kept([lexical("r", [term("peanuts")], 1)]) == ["r"]


def test_a_shared_generic_word_is_not_enough_when_more_is_asked() -> None:
    # "deploy staging cluster checklist": one of four asked terms.
    one = lexical("one", [term("deploy")], 4)
    two = lexical("two", [term("deploy"), term("staging")], 4)
    assert kept([one, two]) == ["two"]


def test_sharing_only_the_names_of_the_question_does_not_pass_the_lexical_floor() -> None:
    # "What is Acme North's stock ticker?": the record names Acme North, holds no ticker.
    named = lexical("named", [term("acme", name=True), term("north", name=True)], 4, names=2)
    result = gate([named], {"named": SEMANTIC}, FLOORS)
    assert result.kept == []
    assert "lexical 0/2 asked terms" in (result.empty_reason or "")


def test_a_shared_name_raises_the_dense_floor_by_the_margin() -> None:
    named = lexical("named", [term("acme", name=True)], 3, names=1, cosine=0.60)
    paraphrase = lexical("para", [term("acme", name=True)], 3, names=1, cosine=0.70)
    unnamed = dense("plain", 0.50)
    result = gate([named, paraphrase, unnamed], dict.fromkeys(("named", "para", "plain"), SEMANTIC), FLOORS)
    assert [c.record_id for c in result.kept] == ["para", "plain"]
    assert "< 0.65 (semantic, shares only a name)" in dict(result.gated_out)["named"]


def test_an_entity_match_passes_only_a_question_that_only_names_things() -> None:
    entity = Candidate("e", entity=GeneratorHit(1, 0.0), entity_id="ent_maya", rrf_score=0.01, score=0.01)
    assert kept([entity], NAMES_ONLY) == ["e"]  # "Who is Maya?"
    result = gate([entity], {"e": SEMANTIC}, FLOORS, QueryShape(asks=True))
    assert result.kept == [] and "entity match without what is asked" in (result.empty_reason or "")


def test_a_question_of_names_needs_the_names_matched() -> None:
    # "Acme North 2": the record of Acme North lacks the number.
    full = lexical("full", [term("acme", name=True), term("north", name=True), term("2", name=True)], 3, 3)
    prefix = lexical("prefix", [term("acme", name=True)], 3, 3)
    loose = replace(FLOORS, lexical_min_term_fraction=1.0)
    kinds = {"full": SEMANTIC, "prefix": SEMANTIC}
    assert [c.record_id for c in gate([full, prefix], kinds, loose, NAMES_ONLY).kept] == ["full"]


def test_an_unknown_name_keeps_only_near_duplicates() -> None:
    # "Who is the billing contact for Brightwater Labs?" with no Brightwater anywhere.
    shape = QueryShape(asks=True, unknown_names=("brightwater", "labs"))
    generic = lexical("generic", [term("billing"), term("contact")], 4, names=2, cosine=0.8)
    twin = dense("twin", 0.95)
    result = gate([generic, twin], {"generic": SEMANTIC, "twin": SEMANTIC}, FLOORS, shape)
    assert [c.record_id for c in result.kept] == ["twin"]
    assert "names brightwater, labs, which no readable record carries" in dict(result.gated_out)["generic"]


def test_relative_floor_drops_a_weak_peer_of_its_channel_group_but_not_an_entity_hit() -> None:
    corroborated = Candidate("both", dense=GeneratorHit(1, 0.8), lexical=GeneratorHit(1, -5.0),
                             lexical_terms=LexicalMatch((term("a"), term("b")), 2),
                             rrf_score=0.0328, score=0.0328, fused_rank=1)
    strong_single = dense("strong", 0.9, score=0.0164)
    weak_single = dense("weak", 0.5, score=0.0070)  # below 0.5 x 0.0164
    entity = Candidate("entity", dense=GeneratorHit(3, 0.7), entity=GeneratorHit(1, 0.0), entity_id="ent_x",
                       rrf_score=0.0070, score=0.0070, fused_rank=4)
    kinds = dict.fromkeys(("both", "strong", "weak", "entity"), SEMANTIC)
    result = gate([corroborated, strong_single, weak_single, entity], kinds, FLOORS)
    # The two-channel record does not eliminate the strong single-channel one.
    assert [c.record_id for c in result.kept] == ["both", "strong", "entity"]
    assert dict(result.gated_out)["weak"].startswith("step 2:")


def test_relative_floor_zero_keeps_every_survivor() -> None:
    off = replace(FLOORS, relative_floor=0.0)
    result = gate([dense("strong", 0.9, score=0.03), dense("weak", 0.5, score=0.001)],
                  {"strong": SEMANTIC, "weak": SEMANTIC}, off)
    assert [c.record_id for c in result.kept] == ["strong", "weak"]


def test_empty_reason_names_every_missed_floor_of_the_best_candidate() -> None:
    best = Candidate("best", dense=GeneratorHit(1, 0.38), lexical=GeneratorHit(2, -1.0),
                     lexical_terms=LexicalMatch((term("deploy"),), 4),
                     rrf_score=0.03, score=0.03, fused_rank=1)
    result = gate([best, dense("other", 0.1, score=0.01)], {"best": SEMANTIC, "other": SEMANTIC}, FLOORS)
    assert result.kept == []
    reason = result.empty_reason or ""
    assert "dense 0.380 < 0.45 (semantic)" in reason
    assert "lexical 1/4 asked terms < 0.50, 1 matched < 2" in reason
    assert "no entity match" in reason


def test_auto_gate_excludes_session_summaries_before_any_floor() -> None:
    auto = floors_for(load_config().retrieval.gate, "auto")
    summary = Candidate("sum", entity=GeneratorHit(1, 0.0), entity_id="e", rrf_score=0.1, score=0.1)
    result = gate([summary], {"sum": RecordKind("episodic", "session_summary")}, auto)
    assert result.kept == [] and "excluded source kind session_summary" in result.gated_out[0][1]


def test_policy_only_floors_leave_relevance_to_the_reranker() -> None:
    # cross_encoder_only mode: even a question naming a stranger reaches the cross-encoder,
    # and only the source-kind policy still drops a candidate here.
    policy = replace(FLOORS, policy_only=True, exclude_source_kinds=("session_summary",))
    shape = QueryShape(asks=True, unknown_names=("brightwater",))
    summary = dense("sum", 0.1)
    kinds = {"weak": SEMANTIC, "sum": RecordKind("episodic", "session_summary")}
    result = gate([dense("weak", 0.1), summary], kinds, policy, shape)
    assert [c.record_id for c in result.kept] == ["weak"]
    assert "excluded source kind" in dict(result.gated_out)["sum"]
    # Nor does the gate reorder what it passes: the cross-encoder ranks it.
    named = lexical("named", [term("hugo", name=True), term("attend")], 5, names=1, score=0.03, cosine=0.6)
    nameless = lexical("nameless", [term("attend"), term("pitch"), term("night")], 5, names=1, score=0.01)
    policy = replace(policy, nameless_lexical_terms=3)
    result = gate([named, nameless], dict.fromkeys(("named", "nameless"), SEMANTIC), policy)
    assert [c.record_id for c in result.kept] == ["named", "nameless"]


def acme(rid: str, cosine: float | None, asked: tuple[str, ...] = ()) -> Candidate:
    """A record of Acme North for "What subscription tier does Acme North have?"."""
    names = [term("acme", name=True), term("north", name=True)]
    return lexical(rid, names + [term(a) for a in asked], 4, names=2, cosine=cosine)


def test_a_name_only_record_that_leads_the_entitys_other_records_passes() -> None:
    leading = replace(FLOORS, standout_margin=0.10, standout_floor=0.50)
    plan, contact, renewal = acme("plan", 0.60), acme("contact", 0.48), acme("renewal", None)
    kinds = dict.fromkeys(("plan", "contact", "renewal", "other"), SEMANTIC)
    result = gate([plan, contact, renewal, dense("other", 0.30)], kinds, leading)
    assert [c.record_id for c in result.kept] == ["plan"]
    assert "leads the other 2 records carrying the question's names by 0.120" in (plan.gate_reason or "")


def test_no_lead_means_an_unstored_attribute_still_abstains() -> None:
    # "What is Acme North's stock ticker?": no record of Acme North stands out.
    leading = replace(FLOORS, standout_margin=0.10, standout_floor=0.50)
    kinds = dict.fromkeys(("plan", "contact", "alone"), SEMANTIC)
    assert gate([acme("plan", 0.60), acme("contact", 0.55)], kinds, leading).kept == []
    # A lone record of the entity has nothing to lead, and a low cosine never passes.
    assert gate([acme("alone", 0.60)], kinds, leading).kept == []
    assert gate([acme("plan", 0.45), acme("contact", 0.20)], kinds, leading).kept == []


def test_the_lead_rule_is_only_for_records_that_share_nothing_but_the_names() -> None:
    leading = replace(FLOORS, standout_margin=0.10, standout_floor=0.50)
    # A lexical match on what is asked already had its chance at the floors.
    # Both records hold the asked word, so the word singles out neither.
    asked = acme("asked", 0.40, asked=("tier",))
    kinds = {"asked": SEMANTIC, "contact": SEMANTIC}
    floors = replace(leading, standout_floor=0.3)
    assert gate([asked, acme("contact", 0.10, asked=("tier",))], kinds, floors).kept == []


def beyond(c: Candidate, value: float) -> Candidate:
    c.beyond_names = value
    return c


BEYOND = replace(FLOORS, standout_margin=0.0, beyond_names_floor=0.45, beyond_names_margin=0.08)


def test_a_record_that_stays_close_once_the_names_are_taken_out_passes() -> None:
    # "Which tier is Acme North on?": the name lifts every record of the account to about
    # the same cosine, under the name-only floor; without the name, only the plan stays close.
    plan, contact, renewal = beyond(acme("plan", 0.56), 0.50), beyond(acme("contact", 0.58), 0.30), \
        beyond(acme("renewal", 0.55), 0.20)
    kinds = dict.fromkeys(("plan", "contact", "renewal"), SEMANTIC)
    result = gate([contact, plan, renewal], kinds, BEYOND)
    assert [c.record_id for c in result.kept] == ["plan"]
    assert ("dense beyond the names 0.500 >= 0.45, leading the other 2 records carrying them by "
            "0.200 >= 0.08") in (plan.gate_reason or "")
    # The rule is what let it through: off (floor 1), the account abstains.
    assert gate([contact, plan, renewal], kinds, replace(BEYOND, beyond_names_floor=1.0)).kept == []


def test_an_unstored_attribute_stays_low_or_level_beyond_the_names() -> None:
    # "What is Acme North's stock ticker?": nothing of the account is about it.
    kinds = dict.fromkeys(("plan", "contact", "tier"), SEMANTIC)
    low = [beyond(acme("plan", 0.56), 0.40), beyond(acme("contact", 0.58), 0.20)]
    assert gate(low, kinds, BEYOND).kept == []
    # Two records level beyond the names: neither is picked out.
    level = [beyond(acme("plan", 0.56), 0.50), beyond(acme("contact", 0.58), 0.46)]
    assert gate(level, kinds, BEYOND).kept == []
    # A record holding an asked word is judged by its words and floors, not by this rule.
    worded = beyond(acme("tier", 0.40, asked=("tier",)), 0.90)
    assert gate([worded, beyond(acme("plan", 0.56), 0.10)], kinds, BEYOND).kept == []


def test_the_only_record_of_the_entity_holding_an_asked_word_passes() -> None:
    # "Which person at Acme North gets our bills?": only the billing contact holds "bills",
    # and its cosine is under the dense floor, as are the account's other records.
    floors = replace(FLOORS, standout_floor=0.35)
    contact = acme("contact", 0.40, asked=("bills",))
    plan, renewal = acme("plan", 0.42), acme("renewal", 0.38)
    kinds = dict.fromkeys(("contact", "plan", "renewal"), SEMANTIC)
    result = gate([plan, contact, renewal], kinds, floors)
    assert [c.record_id for c in result.kept] == ["contact"]
    assert ("the only one of 3 records carrying the question's names to hold an asked word (bills)"
            in (contact.gate_reason or ""))
    # Under standout_floor it abstains like any other record of the entity.
    assert gate([plan, contact, renewal], kinds, replace(floors, standout_floor=0.45)).kept == []


def test_an_asked_word_held_by_two_records_or_stemmed_to_two_letters_picks_nothing() -> None:
    floors = replace(FLOORS, standout_floor=0.35)
    kinds = dict.fromkeys(("a", "b", "c"), SEMANTIC)
    # "Which database does Acme North use?": "use" stems to "us", as in prod-us-east.
    assert gate([acme("a", 0.40, asked=("use",)), acme("b", 0.42)], kinds, floors).kept == []
    two = [acme("a", 0.40, asked=("bills",)), acme("b", 0.41, asked=("bills",)), acme("c", 0.42)]
    assert gate(two, kinds, floors).kept == []
    # A lone record of the entity has nothing to be singled out from.
    assert gate([acme("a", 0.40, asked=("bills",))], kinds, floors).kept == []


def test_a_numbered_siblings_records_do_not_count_as_the_named_entitys() -> None:
    # "Which person at Acme North gets our bills?" when Acme North 2 and 3 have billing
    # contacts too: they carry the words "Acme North", but the entity channel resolved the
    # name to Acme North's own records, and only its contact holds "bills" among them.
    floors = replace(FLOORS, standout_floor=0.35)

    def own(rid: str, cosine: float, asked: tuple[str, ...] = ()) -> Candidate:
        return replace(acme(rid, cosine, asked), entity=GeneratorHit(1, 0.0), entity_id="acme-north")

    contact, plan = own("contact", 0.40, asked=("bills",)), own("plan", 0.42)
    siblings = [acme("contact2", 0.39, asked=("bills",)), acme("contact3", 0.38, asked=("bills",))]
    kinds = dict.fromkeys(("contact", "plan", "contact2", "contact3"), SEMANTIC)
    result = gate([plan, contact, *siblings], kinds, floors)
    assert [c.record_id for c in result.kept] == ["contact"]
    assert "the only one of 2 records of the entity the question names" in (contact.gate_reason or "")
    # Records of two entities are no one entity's records: the words decide as before.
    other = replace(plan, entity_id="tucson")
    assert gate([other, contact, *siblings], kinds, floors).kept == []


def test_companions_follow_a_pass_within_the_margin() -> None:
    # "Which film did Pia see with Helena?": two films, one just under the floor.
    following = replace(FLOORS, companion_margin=0.10)
    first, second, far = dense("first", 0.50), dense("second", 0.43), dense("far", 0.38)
    kinds = dict.fromkeys(("first", "second", "far"), SEMANTIC)
    result = gate([second, first, far], kinds, following)
    assert [c.record_id for c in result.kept] == ["first", "second"]  # no dense vote logged
    assert "companion: dense 0.430 within 0.10 of the best pass 0.500" in (second.gate_reason or "")
    assert "far" in dict(result.gated_out)


def test_a_companion_ranks_by_its_dense_vote_and_can_lead_a_weak_pass() -> None:
    # "In which month is Kiran's race?": the training record shares only the name, so it
    # misses the raised floor; an old episodic record passes on its own with a decayed score.
    following = replace(FLOORS, companion_margin=0.10, companion_weight=0.7, relative_floor=0.0)
    race = Candidate("race", dense=GeneratorHit(1, 0.60), rrf_score=0.031, score=0.031,
                     dense_vote=1 / 61)
    fun_run = Candidate("fun_run", dense=GeneratorHit(2, 0.55), rrf_score=0.030, score=0.010,
                        freshness_multiplier=0.33, dense_vote=1 / 62)
    name_only = QueryShape(asks=True)
    race.lexical_terms = LexicalMatch((term("kiran", name=True),), 2, 1)
    kinds = {"race": SEMANTIC, "fun_run": EPISODIC}
    strict = replace(following, name_only_margin=0.2)  # the race record needs 0.65
    result = gate([race, fun_run], kinds, strict, name_only)
    assert result.by_dense_vote == {"race"}
    assert [c.record_id for c in result.kept] == ["race", "fun_run"]  # 0.7 / 61 > 0.010
    # A pass that is about as close keeps the lead: the weight discounts the companion.
    fresh = Candidate("fresh", dense=GeneratorHit(2, 0.55), rrf_score=0.030, score=0.030,
                      dense_vote=1 / 62)
    result = gate([race, fresh], {"race": SEMANTIC, "fresh": EPISODIC}, strict, name_only)
    assert [c.record_id for c in result.kept] == ["fresh", "race"]


def test_a_companion_closer_than_every_pass_moves_up_to_second() -> None:
    # "What should I get Oskar to read?": the reading-log records pass on the episodic
    # floor with two channels each; "Oskar's favourite novel is Dune" shares only his name,
    # misses the raised semantic floor, and is the closest record of all.
    following = replace(FLOORS, companion_margin=0.10, companion_weight=0.7, relative_floor=0.0,
                        name_only_margin=0.2)
    logs = [Candidate(f"log{i}", dense=GeneratorHit(i + 2, cos), rrf_score=0.032 - i / 1000,
                      score=0.032 - i / 1000, dense_vote=1 / (62 + i))
            for i, cos in enumerate((0.56, 0.55, 0.54))]
    novel = Candidate("novel", dense=GeneratorHit(1, 0.58), rrf_score=0.016, score=0.016, dense_vote=1 / 61)
    allergy = Candidate("allergy", dense=GeneratorHit(5, 0.545), rrf_score=0.015, score=0.015,
                        dense_vote=1 / 65)
    for c in (novel, allergy):
        c.lexical_terms = LexicalMatch((term("oskar", name=True),), 3, 1)
    for c in logs:
        c.lexical_terms = LexicalMatch((term("oskar", name=True), term("read")), 3, 1)
    kinds = {**{c.record_id: EPISODIC for c in logs}, "novel": SEMANTIC, "allergy": SEMANTIC}
    result = gate([*logs, novel, allergy], kinds, following, QueryShape(asks=True))
    assert "passed as a companion" in (novel.gate_reason or "")
    # the top pass keeps rank 1; the closer companion follows it; the other companion
    # (0.545, not closer than the 0.56 pass) keeps its dense-vote place after the passes
    assert [c.record_id for c in result.kept] == ["log0", "novel", "log1", "log2", "allergy"]
    # Where its dense vote already ranks it first, it stays first.
    ahead = replace(following, companion_weight=5.0)
    result = gate([*logs, replace(novel)], kinds, ahead, QueryShape(asks=True))
    assert [c.record_id for c in result.kept][:2] == ["novel", "log0"]
    # A pass about someone else holding the asked words ("Which city was Dmitri in for the
    # chess tournament?" against Vera's tournament): the question may name the wrong
    # person, and a record sharing only the name is no better a guess; nothing moves.
    vera = lexical("vera", [term("read")], 3, names=1, score=0.0305, cosine=0.50)
    kinds["vera"] = EPISODIC
    result = gate([logs[0], vera, *logs[1:], replace(novel), replace(allergy)], kinds, following,
                  QueryShape(asks=True))
    assert "passed as a companion" in (result.kept[4].gate_reason or "")
    assert [c.record_id for c in result.kept] == ["log0", "log1", "vera", "log2", "novel", "allergy"]


def test_no_companion_without_a_pass_or_for_an_unknown_name() -> None:
    following = replace(FLOORS, companion_margin=0.05)
    kinds = dict.fromkeys(("a", "b"), SEMANTIC)
    assert gate([dense("a", 0.44), dense("b", 0.43)], kinds, following).kept == []
    stranger = QueryShape(asks=True, unknown_names=("zelda",))
    both = gate([dense("a", 0.95), dense("b", 0.93)], kinds, following, stranger).kept
    assert [c.record_id for c in both] == ["a", "b"]  # each above the unknown-name floor
    near = gate([dense("a", 0.95), dense("b", 0.89)], kinds, following, stranger).kept
    assert [c.record_id for c in near] == ["a"]


def test_asked_words_from_a_record_without_the_questions_names_need_a_cosine_too() -> None:
    # "Why did Vera travel to Tucson?" against "Meridian Travel is on the Team plan".
    strict = replace(FLOORS, nameless_lexical_floor=0.35)
    kinds = dict.fromkeys(("stranger", "close"), SEMANTIC)
    stranger = lexical("stranger", [term("travel")], 3, names=2, cosine=0.20)
    close = lexical("close", [term("travel")], 3, names=2, cosine=0.40)
    result = gate([stranger, close], kinds, strict)
    assert [c.record_id for c in result.kept] == ["close"]
    assert "none of the question's names, and dense 0.200 < 0.35" in dict(result.gated_out)["stranger"]
    # A question that names nothing is unaffected.
    assert kept([lexical("plain", [term("travel")], 1, cosine=0.1)]) == ["plain"]



def test_several_asked_words_pass_without_the_questions_names_or_a_cosine() -> None:
    # "Where did Hugo attend a startup pitch night?" when Beatrix went: the record holds
    # four asked words and not "Hugo", and sits outside the dense list.
    floors = replace(FLOORS, nameless_lexical_floor=0.40, nameless_lexical_terms=3)
    words = [term("attend"), term("startup"), term("pitch"), term("night")]
    pitch = lexical("pitch", words, 5, names=1)
    result = gate([pitch], {"pitch": EPISODIC}, floors)
    assert [c.record_id for c in result.kept] == ["pitch"]
    assert "without the question's names, 4 of them" in (result.kept[0].gate_reason or "")
    # Two asked words in common still need the cosine ("What car does Hugo drive?").
    car = lexical("car", [term("car"), term("drive")], 3, names=1, cosine=0.30)
    assert gate([car], {"car": SEMANTIC}, floors).kept == []
    # Off: the cosine is needed whatever the record holds.
    assert gate([pitch], {"pitch": EPISODIC}, replace(floors, nameless_lexical_terms=0)).kept == []
    # Its cosine, however low, sets none for companions to follow: Hugo's home town at 0.25
    # would follow a pass at 0.30.
    following = replace(floors, companion_margin=0.10)
    near = lexical("near", words, 5, names=1, cosine=0.30)
    town = lexical("town", [term("hugo", name=True)], 5, names=1, cosine=0.25)
    result = gate([near, town], {"near": EPISODIC, "town": SEMANTIC}, following)
    assert [c.record_id for c in result.kept] == ["near"]
    # The asked words must still clear the lexical floor: 3 of 8 is under half.
    sparse = lexical("sparse", words[:3], 9, names=1)
    assert gate([sparse], {"sparse": EPISODIC}, floors).kept == []


def test_a_pass_on_asked_words_alone_leads_named_records_holding_fewer_of_them() -> None:
    floors = replace(FLOORS, nameless_lexical_floor=0.40, nameless_lexical_terms=3,
                     companion_margin=0.10)
    hugo = [term("hugo", name=True)]
    words = [term("attend"), term("startup"), term("pitch"), term("night")]
    # Hugo's salsa class passes on its cosine with one asked word; his home town is close
    # enough to follow it as a companion; Beatrix's pitch night passes on four asked words.
    salsa = lexical("salsa", [*hugo, term("attend")], 5, names=1, score=0.032, cosine=0.62)
    town = lexical("town", hugo, 5, names=1, score=0.030, cosine=0.55)
    pitch = lexical("pitch", words, 5, names=1, score=0.016)
    kinds = {"salsa": EPISODIC, "town": SEMANTIC, "pitch": EPISODIC}
    result = gate([salsa, town, pitch], kinds, floors)
    assert [c.record_id for c in result.kept] == ["pitch", "salsa", "town"]
    # A record holding as many asked words keeps its place ahead.
    own = lexical("own", [*hugo, *words], 5, names=1, score=0.033, cosine=0.75)
    result = gate([own, salsa, pitch], {**kinds, "own": EPISODIC}, floors)
    assert [c.record_id for c in result.kept] == ["own", "pitch", "salsa"]

def _names_only(rid: str, names: tuple[str, ...], cosine: float, score: float, vote: float) -> Candidate:
    """A record that holds the question's ``names`` and none of what it asks (one more term)."""
    match = LexicalMatch(tuple(term(n, name=True) for n in names), len(names) + 1, len(names))
    return Candidate(rid, dense=GeneratorHit(1, cosine), lexical=GeneratorHit(1, -3.0),
                     lexical_terms=match, rrf_score=score, score=score, dense_vote=vote)


def test_a_record_carrying_two_separate_names_of_the_question_passes_on_the_lower_margin() -> None:
    # "Why did Oskar travel to Tucson?" against "Oskar flew to Tucson for a week of surfing":
    # no asked word in common, and a cosine under the one-name floor (0.45 + 0.2).
    floors = replace(FLOORS, two_name_margin=0.05)
    apart = QueryShape(asks=True, name_groups=(("oskar",), ("tucson",)))
    trip = _names_only("trip", ("oskar", "tucson"), 0.52, 0.03, 1 / 61)
    job = _names_only("job", ("oskar",), 0.52, 0.03, 1 / 62)
    result = gate([trip, job], {"trip": EPISODIC, "job": SEMANTIC}, floors, apart)
    assert [c.record_id for c in result.kept] == ["trip"]
    assert "dense 0.520 >= 0.45 (episodic, shares only names, two of them)" in (trip.gate_reason or "")
    assert "shares only a name" in dict(result.gated_out)["job"]
    # Without the relief the same record needs the one-name floor, as before.
    assert gate([trip], {"trip": EPISODIC}, replace(floors, two_name_margin=0.2), apart).kept == []


def test_a_name_of_several_words_is_one_name() -> None:
    # "Where is Bluefin Logistics headquartered?": every record of the account carries both
    # words, so they count as the one name they are and the one-name margin applies.
    floors = replace(FLOORS, two_name_margin=0.0)
    together = QueryShape(asks=True, name_groups=(("bluefin", "logistics"),))
    plan = _names_only("plan", ("bluefin", "logistics"), 0.55, 0.03, 1 / 61)
    assert gate([plan], {"plan": SEMANTIC}, floors, together).kept == []


def test_a_two_name_pass_ranks_by_its_dense_vote_behind_a_record_holding_what_is_asked() -> None:
    # "Where did Tobias go hiking with Mateo?": "Tobias's sister is Mateo" is short and
    # collects the best lexical and entity ranks for the two names; the hike holds "hiking".
    floors = replace(FLOORS, two_name_margin=0.0, companion_weight=0.7, relative_floor=0.0)
    apart = QueryShape(asks=True, name_groups=(("tobias",), ("mateo",)))
    sister = _names_only("sister", ("tobias", "mateo"), 0.50, 0.048, 1 / 62)
    hike = lexical("hike", [term("tobias", name=True), term("mateo", name=True), term("hiking")],
                   3, names=2, score=0.040, cosine=0.70)
    hike.dense_vote = 1 / 61
    result = gate([sister, hike], {"sister": SEMANTIC, "hike": EPISODIC}, floors, apart)
    assert [c.record_id for c in result.kept] == ["hike", "sister"]
    assert result.by_dense_vote == {"sister"}
    # A record clearing the one-name floor on its own keeps its fused rank.
    close = _names_only("close", ("tobias", "mateo"), 0.70, 0.048, 1 / 62)
    result = gate([close, hike], {"close": SEMANTIC, "hike": EPISODIC}, floors, apart)
    assert [c.record_id for c in result.kept] == ["close", "hike"] and not result.by_dense_vote


def test_a_record_reached_on_a_link_passes_right_after_the_record_it_came_from() -> None:
    # "What does Ayla's brother do for work?": "Ayla's brother is Quentin" passes and
    # mentions Quentin; "Quentin works as a firefighter" holds "work", which it does not.
    anchor = lexical("anchor", [term("ayla", name=True), term("brother")], 3, names=1, score=0.03,
                     cosine=0.70)
    other = dense("other", 0.60, score=0.02)
    job = Candidate("job", via="anchor", via_terms=LexicalMatch((term("work"),), 3, 1))
    kinds = dict.fromkeys(("anchor", "other", "job"), SEMANTIC)
    floors = replace(FLOORS, follow_links=True, relative_floor=0.0)
    result = gate([anchor, other, job], kinds, floors, QueryShape(asks=True))
    assert [c.record_id for c in result.kept] == ["anchor", "job", "other"]
    assert "a link from anchor" in (job.gate_reason or "") and "(work)" in (job.gate_reason or "")
    # Off, or from a record that did not pass, the hop is not taken.
    assert [c.record_id for c in gate([anchor, other, job], kinds, replace(floors, follow_links=False),
                                      QueryShape(asks=True)).kept] == ["anchor", "other"]
    weak = lexical("anchor", [term("ayla", name=True), term("brother")], 3, names=1, cosine=0.20)
    assert gate([weak, job], kinds, floors, QueryShape(asks=True)).kept == []


def test_a_linked_record_holding_nothing_the_other_lacks_adds_nothing() -> None:
    # "Who is Ayla's brother?": the relation answers it; Quentin's job holds no asked word
    # the relation does not.
    anchor = lexical("anchor", [term("ayla", name=True), term("brother")], 2, names=1, cosine=0.70)
    same = Candidate("same", via="anchor", via_terms=LexicalMatch((term("brother"),), 2, 1))
    nothing = Candidate("nothing", via="anchor", via_terms=LexicalMatch((), 2, 1))
    kinds = dict.fromkeys(("anchor", "same", "nothing"), SEMANTIC)
    floors = replace(FLOORS, follow_links=True)
    result = gate([anchor, same, nothing], kinds, floors, QueryShape(asks=True))
    assert [c.record_id for c in result.kept] == ["anchor"]
