"""Explicit writes and the record lifecycle, plus the Acme North story, on a real store."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from retold.models import Principal
from retold.testing import ADITYA, T0, World, make_world

CONCISE = "Aditya prefers concise technical explanations."
DETAILED = "Aditya prefers detailed architecture explanations."


def _user_fact(world: World, content: str, attribute: str = "explanation_style", **extra: object):  # type: ignore[no-untyped-def]
    """A user statement backed by a fresh user turn (an independent source each time)."""
    world.say("user", content)
    return world.write(content=content, attribute=attribute, source_kind="user_statement",
                       evidence=content, **extra)


def _active(world: World) -> set[str]:
    return set(world.rt.store.eligible_ids([ADITYA], now=world.clock.now()))


def test_duplicate_judged_same_reinforces_instead_of_inserting(world: World) -> None:
    first = _user_fact(world, CONCISE)
    paraphrase = "Aditya likes concise, technical explanations."
    world.judge.table[(CONCISE, paraphrase)] = "same"
    second = _user_fact(world, paraphrase)
    assert second.outcome == "reinforced" and second.record_id == first.record_id
    record = world.record(first.record_id)
    assert record.reinforcements == 1 and record.confidence == 0.99
    assert len(_active(world)) == 1


def test_repeated_evidence_from_the_same_source_does_not_count(world: World) -> None:
    world.say("assistant", "I infer you like concise technical explanations here.")
    quote = "you like concise technical explanations"
    first = world.write(content=CONCISE, attribute="explanation_style", evidence=quote)
    again = world.write(content=CONCISE, attribute="explanation_style", evidence=quote)
    assert again.outcome == "already_reinforced" and again.record_id == first.record_id
    assert world.record(first.record_id).reinforcements == 0
    counted = [e["payload"]["counted"] for e in world.events("record.reinforced")]
    assert counted == [False]


def test_second_independent_reinforcement_confirms_a_provisional_record(world: World) -> None:
    quotes = ["I infer you like concise technical explanations here.",
              "Again it seems you want concise technical explanations.",
              "Once more: you seem to want concise technical explanations."]
    ids = []
    for quote in quotes:
        world.say("assistant", quote)
        world.clock.advance(hours=1)
        ids.append(world.write(content=CONCISE, attribute="explanation_style",
                               evidence=quote).record_id)
    assert len(set(ids)) == 1
    record = world.record(ids[0])
    assert record.reinforcements == 2 and record.status == "confirmed" and record.expires_at is None
    assert [r.outcome for r in world.results] == ["created", "reinforced", "reinforced"]


def test_higher_ranked_observation_upgrades_the_stored_provenance(world: World) -> None:
    world.say("assistant", "I infer you like concise technical explanations here.")
    inferred = world.write(content=CONCISE, attribute="explanation_style",
                           evidence="you like concise technical explanations")
    upgraded = _user_fact(world, CONCISE)
    assert upgraded.outcome == "reinforced"
    record = world.record(inferred.record_id)
    assert record.source_kind == "user_statement"
    assert record.source_ref == "session:s1<turn:2>" and record.evidence == CONCISE
    assert record.status == "confirmed" and record.expires_at is None


def test_attribute_with_an_entity_prefix_does_not_control_the_entity(world: World) -> None:
    result = world.write(content="Works in CET.", attribute="ent_someone_else/Time Zone")
    record = world.record(result.record_id)
    principal_entity = world.rt.ingestor.resolver.principal_entity(world.p).entity
    assert principal_entity is not None
    assert record.attribute == "time_zone"
    assert record.subject_entity_id == principal_entity.id
    assert record.subject == f"{principal_entity.id}/time_zone"


def test_semantic_write_without_about_entity_resolves_the_principal_in_own_scope(world: World) -> None:
    result = world.write(content="Prefers dark mode.", attribute="theme")
    record = world.record(result.record_id)
    entity = world.rt.store.get_entity(record.subject_entity_id or "")
    assert entity is not None and entity.kind == "person" and "aditya" in entity.aliases
    assert record.entity_ids == [entity.id]


def test_higher_rank_fact_supersedes_regardless_of_event_time(world: World) -> None:
    world.say("tool", "profile service: explanation_style=detailed architecture")
    tool = world.write(content=DETAILED, attribute="explanation_style", source_kind="tool_result",
                       evidence="explanation_style=detailed architecture",
                       event_at=T0 + timedelta(days=5))
    world.judge.table[(DETAILED, CONCISE)] = "contradicts"
    user = _user_fact(world, CONCISE, event_at=T0)  # an earlier event, but a user statement
    assert user.outcome == f"superseded:{tool.record_id}"
    assert world.record(tool.record_id).status == "superseded"
    assert world.record(user.record_id).supersedes_id == tool.record_id


def test_equal_rank_later_event_supersedes(world: World) -> None:
    old = _user_fact(world, CONCISE, event_at=T0)
    world.judge.table[(CONCISE, DETAILED)] = "contradicts"
    new = _user_fact(world, DETAILED, event_at=T0 + timedelta(days=1))
    assert new.outcome == f"superseded:{old.record_id}"
    assert _active(world) == {new.record_id}


def test_equal_rank_earlier_event_is_superseded_on_arrival(world: World) -> None:
    current = _user_fact(world, CONCISE, event_at=T0 + timedelta(days=10))
    world.judge.table[(CONCISE, DETAILED)] = "contradicts"
    stale = _user_fact(world, DETAILED, event_at=T0)
    assert stale.outcome == f"superseded_on_arrival:{current.record_id}"
    record = world.record(stale.record_id)
    assert record.status == "superseded" and record.supersedes_id is None
    assert _active(world) == {current.record_id}
    history = world.rt.store.eligible_ids([ADITYA], include_history=True, now=world.clock.now())
    assert stale.record_id in history
    (event,) = [e for e in world.events("record.created") if e["record_id"] == stale.record_id]
    assert event["payload"]["superseded_on_arrival_by"] == current.record_id


def test_lower_rank_contradiction_becomes_provisional_with_conflicts_both_ways(world: World) -> None:
    user = _user_fact(world, CONCISE)
    world.say("assistant", "Looks like you want detailed architecture explanations.")
    world.judge.table[(CONCISE, DETAILED)] = "contradicts"
    world.clock.advance(days=1)
    inference = world.write(content=DETAILED, attribute="explanation_style",
                            evidence="you want detailed architecture explanations")
    assert inference.outcome == f"conflict:{user.record_id}"
    record = world.record(inference.record_id)
    assert record.status == "provisional"
    assert record.expires_at == world.clock.now() + timedelta(days=30)
    store = world.rt.store
    assert store.conflicts_of(user.record_id) == [inference.record_id]
    assert store.conflicts_of(inference.record_id) == [user.record_id]
    assert world.record(user.record_id).status == "confirmed"


def test_provisional_conflict_from_a_direct_source_also_expires(world: World) -> None:
    user = _user_fact(world, CONCISE)
    world.say("tool", "crm: explanation_style=detailed architecture explanations")
    world.judge.table[(CONCISE, DETAILED)] = "contradicts"
    tool = world.write(content=DETAILED, attribute="explanation_style", source_kind="tool_result",
                       evidence="explanation_style=detailed architecture explanations")
    assert tool.outcome == f"conflict:{user.record_id}"
    record = world.record(tool.record_id)
    assert record.source_kind == "tool_result" and record.status == "provisional"
    assert record.expires_at == T0 + timedelta(days=30)


def test_incumbent_still_gets_the_next_decision_after_a_provisional_conflict(world: World) -> None:
    incumbent = _user_fact(world, CONCISE)
    world.say("assistant", "Looks like you want detailed architecture explanations.")
    world.judge.table[(CONCISE, DETAILED)] = "contradicts"
    conflict = world.write(content=DETAILED, attribute="explanation_style",
                           evidence="you want detailed architecture explanations")
    bullet = "Aditya prefers bullet-point explanations."
    world.judge.table[(CONCISE, bullet)] = "contradicts"
    world.judge.table[(DETAILED, bullet)] = "contradicts"
    world.clock.advance(days=1)
    latest = _user_fact(world, bullet)
    assert latest.outcome == f"superseded:{incumbent.record_id}"
    assert conflict.record_id is not None
    assert world.record(conflict.record_id).status == "provisional"


def test_superseding_also_retires_a_sibling_that_agrees_with_the_new_fact(world: World) -> None:
    incumbent = _user_fact(world, CONCISE)
    world.say("assistant", "Looks like you want detailed architecture explanations.")
    world.judge.table[(CONCISE, DETAILED)] = "contradicts"
    sibling = world.write(content=DETAILED, attribute="explanation_style",
                          evidence="you want detailed architecture explanations")
    newer = "Aditya now wants detailed architecture explanations."
    world.judge.table[(CONCISE, newer)] = "contradicts"
    world.judge.table[(DETAILED, newer)] = "same"  # must not pre-empt the incumbent's decision
    world.clock.advance(days=1)
    result = _user_fact(world, newer)
    assert result.outcome == f"superseded:{incumbent.record_id}"
    assert world.record(sibling.record_id).status == "superseded"
    (event,) = [e for e in world.events("record.created") if e["record_id"] == result.record_id]
    assert event["payload"]["also_superseded"] == [sibling.record_id]


def test_contradiction_under_another_attribute_supersedes_with_attribute_alias(world: World) -> None:
    old = _user_fact(world, CONCISE, attribute="explanation_style")
    answer = "Aditya wants long detailed answers."
    world.embedder.make_similar(answer, CONCISE, 0.9)
    world.judge.table[(CONCISE, answer)] = "contradicts"
    world.clock.advance(days=1)
    new = _user_fact(world, answer, attribute="answer_style")
    assert new.outcome == f"superseded:{old.record_id}"
    record = world.record(new.record_id)
    assert record.attribute == "explanation_style"  # the survivor keeps the incumbent attribute
    (event,) = [e for e in world.events("record.created") if e["record_id"] == new.record_id]
    assert event["payload"]["attribute_aliased_from"] == "answer_style"


def test_contradiction_under_another_attribute_needs_the_cosine_too(world: World) -> None:
    _user_fact(world, CONCISE, attribute="explanation_style")
    unrelated = "Aditya lives in Berlin."
    world.embedder.make_similar(unrelated, CONCISE, 0.1)
    world.judge.table[(CONCISE, unrelated)] = "contradicts"  # NLI says so; the cosine does not
    result = _user_fact(world, unrelated, attribute="home_city")
    assert result.outcome == "created"
    assert len(_active(world)) == 2


def test_scan_cap_records_truncation_and_judges_the_recently_reinforced(
    tmp_path: Path, store_target: str,
) -> None:
    world = make_world(tmp_path, store=store_target, max_entity_attributes=2)
    facts = [(f"Aditya fact number {i} about topic {i}.", f"topic_{i}") for i in range(4)]
    ids = []
    for content, attribute in facts:
        world.clock.advance(hours=1)
        ids.append(_user_fact(world, content, attribute=attribute).record_id)
    # Reinforce the OLDEST fact, so the reinforced-first order puts it at the front.
    world.clock.advance(hours=1)
    _user_fact(world, facts[0][0], attribute=facts[0][1])
    world.judge.calls.clear()
    low_cosine = "Aditya enjoys sailing on weekends."
    world.embedder.make_similar(low_cosine, facts[0][0], 0.0)
    result = _user_fact(world, low_cosine, attribute="hobby")
    judged = {a for kind, a, _ in world.judge.calls if kind == "judge_many"}
    assert facts[0][0] in judged and facts[3][0] in judged
    assert facts[1][0] not in judged and facts[2][0] not in judged
    (event,) = [e for e in world.events("record.created") if e["record_id"] == result.record_id]
    assert event["payload"]["attribute_scan_truncated"] is True
    world.rt.close()


def test_episodic_record_never_supersedes(world: World) -> None:
    first = world.write(type="episodic", content="On Tuesday vector-only retrieval missed errors.")
    world.judge.default = "contradicts"
    world.clock.advance(days=3)
    second = world.write(type="episodic", content="On Friday FTS improved error lookup.")
    assert first.outcome == second.outcome == "created"
    assert world.record(first.record_id).status == "provisional"
    assert world.record(second.record_id).supersedes_id is None


def test_opposing_preferences_above_the_dedup_floor_go_to_the_judge_not_merged(world: World) -> None:
    proj = [("project", "Retold", "about")]
    other = [("project", "Memory CLI", "about")]
    world.say("user", "In Retold we always squash merge pull requests.")
    first = world.write(content="Retold squash merges pull requests.", attribute="merge_style",
                        source_kind="user_statement",
                        evidence="In Retold we always squash merge pull requests.", entities=proj)
    opposite = "Memory CLI never squash merges pull requests."
    world.embedder.make_similar(opposite, "Retold squash merges pull requests.", 0.95)
    world.judge.table[("Retold squash merges pull requests.", opposite)] = "contradicts"
    second = world.write(content=opposite, attribute="merge_style", entities=other)
    assert ("judge_many", "Retold squash merges pull requests.", opposite) in world.judge.calls
    assert second.outcome == "created" and second.record_id != first.record_id


def test_nearby_record_about_another_entity_judged_same_is_reinforced(world: World) -> None:
    a = "The Retold repo uses Conventional Commits."
    b = "Conventional Commits are used in the Retold repo."
    world.say("user", a)
    first = world.write(content=a, attribute="commits", source_kind="user_statement", evidence=a,
                        entities=[("repo", "retold-repo", "about")])
    world.embedder.make_similar(b, a, 0.93)
    world.judge.table[(a, b)] = "same"
    world.say("user", b)
    second = world.write(content=b, attribute="commit_style", source_kind="user_statement", evidence=b,
                         entities=[("project", "Retold", "about")])
    assert second.outcome == "reinforced" and second.record_id == first.record_id


def test_acme_north_billing_contact_story(world: World) -> None:
    """The write-path essay: a correction must supersede, with history intact."""
    acme = [("org", "Acme North", "about")]
    dana = "The billing contact for Acme North is Dana Reyes."
    marcus = "Marcus Chen is taking over billing at Acme North; Dana's last day is Friday."
    world.say("user", dana)
    old = world.write(content="Billing contact for Acme North is Dana Reyes.", attribute="billing_contact",
                      source_kind="user_statement", evidence=dana, entities=acme)
    world.clock.advance(days=60)
    world.say("user", marcus)
    world.judge.table[("Billing contact for Acme North is Dana Reyes.",
                       "Billing contact for Acme North is Marcus Chen.")] = "contradicts"
    new = world.write(content="Billing contact for Acme North is Marcus Chen.",
                      attribute="billing_contact", source_kind="user_statement",
                      evidence="Marcus Chen is taking over billing at Acme North", entities=acme)
    assert new.outcome == f"superseded:{old.record_id}"
    marcus_rec, dana_rec = world.record(new.record_id), world.record(old.record_id)
    assert marcus_rec.status == "confirmed" and dana_rec.status == "superseded"
    assert marcus_rec.supersedes_id == dana_rec.id and marcus_rec.version == 2
    assert marcus_rec.subject_entity_id == dana_rec.subject_entity_id
    assert _active(world) == {marcus_rec.id}
    history = world.rt.store.eligible_ids([ADITYA], include_history=True, now=world.clock.now())
    assert {marcus_rec.id, dana_rec.id} <= history.as_set()
    assert dana_rec.content == "Billing contact for Acme North is Dana Reyes."


def test_lower_rank_inference_against_a_user_statement_is_a_conflict(world: World) -> None:
    user = _user_fact(world, CONCISE)
    world.judge.table[(CONCISE, DETAILED)] = "contradicts"
    guess = world.write(content=DETAILED, attribute="explanation_style")
    assert guess.outcome == f"conflict:{user.record_id}"
    assert world.record(guess.record_id).status == "provisional"
    assert world.rt.store.conflicts_of(user.record_id) == [guess.record_id]
    assert _active(world) == {user.record_id, guess.record_id}


def test_write_result_and_event_carry_every_stage_timing(world: World) -> None:
    result = _user_fact(world, CONCISE)
    stages = ["permission", "evidence", "embed", "entities", "dedup_search", "judge",
              "supersession", "persistence", "event_log", "transaction", "index_update", "total"]
    assert set(stages) <= set(result.timings_ms)
    (event,) = world.events("record.created")
    assert event["payload"]["timings_pending"] == ["event_log", "transaction", "index_update", "total"]
    assert "persistence" in event["payload"]["timings_ms"]
    assert event["payload"]["judge"] == "fake"


def test_index_sees_own_writes_as_current_and_another_process_sees_them(world: World, tmp_path: Path) -> None:
    from retold import build_runtime

    result = _user_fact(world, CONCISE)
    assert world.rt.refresh_index() == "current"
    with build_runtime(world.rt.config, embedder=world.embedder) as other:
        other.refresh_index()
        assert other.index.vector_for(result.record_id or "") is not None
    vera = Principal("research-agent", "vera", None, None)
    assert vera.private_scope.id == "research-agent/vera"
