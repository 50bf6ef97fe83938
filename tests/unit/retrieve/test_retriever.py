"""Retrieval behaviour through the whole pipeline on a real store (fakes at model edges)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from retold.clock import new_id
from retold.index.reranker import FakeReranker
from retold.models import Principal, Scope, SearchRequest
from retold.retrieve.explain import short_id
from retold.retrieve.replay import NotReplayable, replay
from retold.retrieve.retriever import SearchOutcome
from retold.retrieve.rewrite import FakeRewriter
from retold.store import Embedding
from retold.testing import AGENT, T0, World, make_record, make_world


def search(world: World, *queries: str, principal: Principal | None = None, **fields: Any) -> SearchOutcome:
    return world.rt.retriever.search(principal or world.p, SearchRequest(queries=list(queries), **fields))


def ids(outcome: SearchOutcome) -> list[str]:
    return [r.record.id for r in outcome.response.results]


def log(world: World, outcome: SearchOutcome) -> dict[str, Any]:
    assert world.rt.flush_search_log()
    row = world.rt.store.search_log_row(outcome.response.search_id)
    assert row is not None
    return row


def fact(world: World, content: str, attribute: str, **fields: Any) -> str:
    world.say("user", content)
    result = world.write(content=content, attribute=attribute, source_kind="user_statement",
                         evidence=content, **fields)
    assert result.ok, result.note
    assert result.record_id is not None
    return result.record_id


CONCISE = "Aditya prefers concise technical explanations."
DETAILED = "Aditya prefers detailed architecture explanations."


# -- core retrieval -----------------------------------------------------------------------


def test_default_search_excludes_superseded_and_history_includes_them(world: World) -> None:
    old = fact(world, CONCISE, "explanation_style")
    world.judge.table[(CONCISE, DETAILED)] = "contradicts"
    world.clock.advance(days=1)
    new = fact(world, DETAILED, "explanation_style")
    query = "prefers explanations"
    assert ids(search(world, query)) == [new]
    assert set(ids(search(world, query, include_history=True))) == {old, new}


def test_expired_records_are_excluded(world: World) -> None:
    guess = world.write(content="Aditya probably likes green tea.", attribute="drink").record_id
    assert ids(search(world, "green tea")) == [guess]
    world.clock.advance(days=31)
    outcome = search(world, "green tea")
    assert outcome.response.results == [] and outcome.response.empty_reason
    assert ids(search(world, "green tea", include_history=True)) == [guess]


def test_a_search_after_a_reinforcement_sees_the_records_new_provenance(world: World) -> None:
    world.say("assistant", "I infer you like concise technical explanations here.")
    inferred = world.write(content=CONCISE, attribute="explanation_style",
                           evidence="you like concise technical explanations").record_id

    def logged_kind() -> list[str]:
        fused = json.loads(log(world, search(world, "concise technical explanations"))["fused"])
        return [f["source_kind"] for f in fused if f["id"] == inferred]

    assert logged_kind() == ["agent_inference"]
    assert logged_kind() == ["agent_inference"]  # the second search reads what the first kept
    world.say("user", CONCISE)
    upgraded = world.write(content=CONCISE, attribute="explanation_style",
                           source_kind="user_statement", evidence=CONCISE)
    assert upgraded.outcome == "reinforced" and upgraded.record_id == inferred
    assert logged_kind() == ["user_statement"]


def test_another_users_record_never_appears_through_any_channel(world: World) -> None:
    text = "Aditya's deploy key lives in vault path kv/aditya-deploy."
    mine = fact(world, text, "deploy_key", entities=[("person", "Aditya", "about")])
    vera = Principal(AGENT, "vera", "s9", None)
    for queries in ([text], ["kv/aditya-deploy vault"], ["deploy key"]):
        outcome = search(world, *queries, principal=vera, entities=["Aditya"])
        assert mine not in ids(outcome)
        row = log(world, outcome)
        for column in ("dense", "lexical", "entity", "fused"):
            assert mine not in row[column], column
    assert mine in ids(search(world, text))


def test_eligible_lexical_match_survives_many_stronger_ineligible_ones(
    tmp_path: Path, store_target: str,
) -> None:
    world = make_world(tmp_path, store=store_target)
    store = world.rt.store
    with store.atomic():
        for i in range(5000):  # 5,000 records in other users' scopes, all matching harder
            store.write_record(make_record(
                id=new_id(), scope=Scope("user", f"other{i % 7}"),
                content=f"flaky ERR_CONN_RESET ERR_CONN_RESET retry storm {i}",
            ))
    text = "Saw ERR_CONN_RESET once on the staging proxy."
    mine = world.write(content=text, attribute="incident").record_id
    world.embedder.make_similar("ERR_CONN_RESET", text, 0.0)
    outcome = search(world, "ERR_CONN_RESET")
    assert ids(outcome) == [mine]
    assert len(json.loads(log(world, outcome)["lexical"])["hits"]) == 1
    world.rt.close()


def test_a_session_summary_never_ranks_above_a_matching_record(world: World) -> None:
    concise = fact(world, CONCISE, "explanation_style")
    digest = "In this session Aditya asked for concise technical explanations."
    summary = make_record(type="episodic", content=digest, attribute=None, subject="-/-",
                          source_kind="session_summary", source_ref="session:s0")
    embedder = world.embedder
    vector = embedder.vector(digest)
    world.rt.store.write_record(summary, embedding=Embedding(embedder.name, embedder.version, vector))
    query = "concise technical explanations"
    embedder.pin(query, vector)  # the summary is the closer match
    outcome = search(world, query, k=2)
    assert ids(outcome) == [concise, summary.id]
    assert outcome.response.results[1].explanation.dense.rank == 1  # type: ignore[union-attr]
    assert ids(search(world, query, k=1)) == [concise]


def test_a_search_the_store_cannot_answer_comes_back_empty_saying_why(world: World) -> None:
    fact(world, CONCISE, "explanation_style")
    outcome = search(world, "weather forecast for tomorrow afternoon")
    assert outcome.response.results == []
    reason = outcome.response.empty_reason or ""
    assert reason.startswith("nothing stored answers this: score ")
    assert "< 0.50 (tool search); best dense score" in reason
    decision = outcome.response.decision
    assert decision["answered"] is False and decision["threshold"] == 0.5
    assert set(decision["signals"]) == {"dense", "beyond_names", "asked_coverage", "unknown_name", "lead"}
    assert "no memory found: nothing stored answers this" in outcome.rendered


def test_duplicate_collapse_keeps_the_higher_ranked_record(world: World) -> None:
    a = fact(world, "Releases go out on Tuesdays after standup.", "release_day")
    twin = "Release day is Tuesday, right after standup."
    world.embedder.make_similar(twin, "Releases go out on Tuesdays after standup.", 0.97)
    b = world.write(content=twin, attribute="release_day", target=world.p.private_scope,
                    entities=[("person", "Aditya", "about")]).record_id
    outcome = search(world, "Releases go out on Tuesdays after standup.")
    assert ids(outcome) == [a]
    deduped = json.loads(log(world, outcome)["deduped_out"])
    assert (deduped[0]["id"], deduped[0]["kept"]) == (b, a)


def test_budget_fill_never_truncates_content(tmp_path: Path, store_target: str) -> None:
    world = make_world(tmp_path, store=store_target, max_entity_attributes=64)
    long_text = "Aditya keeps a long checklist for releases: " + "verify the changelog, " * 60
    short = "Aditya keeps a short checklist for releases."
    first = world.write(content=long_text, attribute="release_checklist_long").record_id
    second = world.write(content=short, attribute="release_checklist_short").record_id
    world.embedder.make_similar("release checklist", long_text, 0.9)
    from dataclasses import replace

    cfg = world.rt.config
    world.rt.retriever.config = replace(cfg, retrieval=replace(cfg.retrieval, token_budget=200))
    outcome = search(world, "release checklist")
    returned = {r.record.id: r.record.content for r in outcome.response.results}
    assert first not in returned and returned.get(second) == short
    assert first in json.loads(log(world, outcome)["budget_out"])
    # With k = 1 the survivor that does not fit is passed over for the next one, which
    # the search reads only then.
    assert ids(search(world, "release checklist", k=1)) == [second]
    world.rt.close()


def test_freshness_decays_episodes_but_not_facts(world: World) -> None:
    old_episode = world.write(type="episodic", content="Deploy rollback drill happened on staging.",
                              event_at=T0 - timedelta(days=90)).record_id
    outcome = search(world, "deploy rollback drill staging")
    (result,) = outcome.response.results
    assert result.record.id == old_episode
    assert result.explanation.freshness_multiplier == 0.9  # floored
    windowed = search(world, "deploy rollback drill staging", since=T0 - timedelta(days=365))
    assert windowed.response.results[0].explanation.freshness_multiplier is None


def inferred_and_stated(world: World) -> tuple[str, str]:
    """An agent's inference and the user's statement of the same thing; the channels rate
    the agent's sentence a little higher."""
    said = "Our standup moved to Mondays at 9:30 now."
    inferred = world.write(type="episodic", content="The standup moved to Mondays at 9:30.",
                           evidence="The standup moved to Mondays at 9:30.",
                           source_kind="agent_inference").record_id
    world.say("user", said)
    stated = world.write(type="episodic", content=said, evidence=said, source_kind="user_statement").record_id
    assert inferred is not None and stated is not None
    return inferred, stated


def test_what_the_user_said_outranks_what_an_agent_inferred_when_they_match_alike(world: World) -> None:
    inferred, stated = inferred_and_stated(world)
    outcome = search(world, "when is the standup")
    first, second = outcome.response.results
    # The channels put the agent's sentence first; the store trusts the user's more (0.95
    # against 0.60), and the scores are closer than that ratio.
    assert (first.record.id, second.record.id) == (stated, inferred)
    assert first.explanation.fused_rank > second.explanation.fused_rank
    # The log keeps each record's confidence, so the order is decided again from the row.
    row = log(world, outcome)
    assert {f["id"]: f["confidence"] for f in json.loads(row["fused"])} == {stated: 0.95, inferred: 0.60}
    assert replay(row, world.rt.config.retrieval.gate).kept == [stated, inferred]
    # And the score each was returned with, which the inspector shows beside the model's block.
    ranked = {f["id"]: f["ranked"] for f in json.loads(row["fused"])}
    assert [ranked[r.record.id] for r in outcome.response.results] == [first.score, second.score]


def test_a_question_recalling_what_the_agent_said_is_ordered_by_the_channels_alone(world: World) -> None:
    inferred, stated = inferred_and_stated(world)
    # Asked for what the agent said, its own sentence is the answer: trust in the user's
    # does not put it second.
    outcome = search(world, "when is the standup you mentioned")
    assert ids(outcome) == [inferred, stated]
    row = log(world, outcome)
    assert json.loads(row["config_flags"])["confidence"] is False
    assert replay(row, world.rt.config.retrieval.gate).kept == [inferred, stated]


# -- rewrite ----------------------------------------------------------------------------


def test_rewrite_disabled_keeps_queries_and_logs_disabled(world: World) -> None:
    fact(world, CONCISE, "explanation_style")
    row = log(world, search(world, "concise explanations"))
    assert row["rewrite_status"] == "disabled" and row["rewritten_queries"] is None


def test_rewritten_queries_drive_retrieval_and_both_are_logged(tmp_path: Path, store_target: str) -> None:
    from dataclasses import replace

    world = make_world(tmp_path, store=store_target)
    rid = fact(world, CONCISE, "explanation_style")
    rewriter = FakeRewriter(["concise technical explanations"])
    cfg = world.rt.config
    rewrite = replace(cfg.retrieval.rewrite, enabled=True)
    enabled = replace(cfg, retrieval=replace(cfg.retrieval, rewrite=rewrite))
    world.rt.retriever.config, world.rt.retriever.rewriter = enabled, rewriter
    outcome = world.rt.retriever.search(world.p, SearchRequest(queries=["what does he prefer?"],
                                                               context="We talked about Aditya."))
    assert ids(outcome) == [rid]
    assert rewriter.calls == [(["what does he prefer?"], "We talked about Aditya.")]
    row = log(world, outcome)
    assert row["rewrite_status"] == "applied"
    assert json.loads(row["rewritten_queries"]) == ["concise technical explanations"]
    assert json.loads(row["request"])["queries"] == ["what does he prefer?"]
    assert outcome.response.results[0].explanation.raw_queries == ["what does he prefer?"]
    assert 'rewritten from "what does he prefer?"' in outcome.rendered
    rewriter.fail = TimeoutError("slow")
    failed = world.rt.retriever.search(world.p, SearchRequest(queries=["what does he prefer?"]))
    assert log(world, failed)["rewrite_status"] == "failed"
    world.rt.close()


# -- reranking, explanations and logs ------------------------------------------------------


def test_reranker_sees_only_gate_and_dedup_survivors_capped_and_logs_ranks(
    tmp_path: Path, store_target: str,
) -> None:
    from dataclasses import replace

    world = make_world(tmp_path, store=store_target)
    contents = [f"Aditya's build step {i} uses cache layer {i}." for i in range(4)]
    for i, content in enumerate(contents):
        fact(world, content, f"build_step_{i}")
    noise = fact(world, "Aditya enjoys sailing.", "hobby")
    cfg = world.rt.config
    world.rt.retriever.config = replace(cfg, reranker=replace(cfg.reranker, enabled=True, floor=0.1,
                                                              candidates=2))
    reranker = FakeReranker({("build step cache layer", contents[1]): 0.9}, default=0.5)
    world.rt.retriever.reranker = reranker
    outcome = search(world, "build step cache layer")
    scored = {doc for _, doc in reranker.calls}
    assert len(scored) == 2 and "Aditya enjoys sailing." not in scored
    row = log(world, outcome)
    assert row["rerank_status"] == "applied"
    reranked = json.loads(row["reranked"])
    assert reranked[0][2] == 1 and reranked[0][3] == 0.9
    assert any(reason == "outside reranker shortlist" for _, reason, _ in json.loads(row["reranked_out"]))
    assert noise not in ids(outcome)
    world.rt.close()


def test_explanations_match_the_logged_generator_ranks_and_scores(world: World) -> None:
    fact(world, CONCISE, "explanation_style")
    fact(world, "Aditya reads release notes every Friday.", "reading_habit")
    outcome = search(world, "concise explanations", "release notes Friday")
    row = log(world, outcome)
    dense = {d["id"]: (d["rank"], d["score"]) for d in json.loads(row["dense"])}
    lexical = {h["id"]: (h["rank"], h["bm25"]) for h in json.loads(row["lexical"])["hits"]}
    assert outcome.response.results
    for result in outcome.response.results:
        ex = result.explanation
        if ex.dense:
            assert dense[result.record.id] == (ex.dense.rank, round(ex.dense.score, 6))
        if ex.lexical:
            assert lexical[result.record.id] == (ex.lexical.rank, ex.lexical.score)
    assert json.loads(row["returned"]) == ids(outcome)


def test_one_log_row_reconstructs_every_stage(world: World) -> None:
    fact(world, CONCISE, "explanation_style")
    world.write(type="episodic", content="Explanation style review meeting happened.",
                event_at=T0 - timedelta(days=30))
    outcome = search(world, "explanation style", k=1)
    row = log(world, outcome)
    for column in ("dense", "lexical", "entity", "fused", "freshness", "decision", "gated_out",
                   "deduped_out", "budget_out", "returned", "explanations", "config_flags", "timings_ms"):
        json.loads(row[column])
    assert json.loads(row["decision"])["answered"] is True
    assert json.loads(row["config_flags"])["log_format"] == 2
    assert json.loads(row["freshness"])  # the episode's multiplier is logged
    assert len(json.loads(row["budget_out"])) >= 1  # k = 1 left a survivor out
    assert row["warm"] in (0, 1) and row["trigger"] == "tool"
    timings = json.loads(row["timings_ms"])
    assert {"rewrite", "filter", "embed", "dense", "lexical", "entity", "fuse", "gate",
            "dedup", "budget", "explain"} <= set(timings)
    assert "log" in outcome.response.timings_ms


def test_replaying_a_logged_search_reproduces_its_decision_and_list(world: World) -> None:
    fact(world, CONCISE, "explanation_style")
    fact(world, "Aditya reviews pull requests before lunch.", "review_habit")
    outcome = search(world, "concise technical explanations", "pull requests")
    row = log(world, outcome)
    gate = world.rt.config.retrieval.gate
    replayed = replay(row, gate)
    assert replayed.kept == ids(outcome) and replayed.decision.answered
    assert replayed.decision.score == pytest.approx(outcome.response.decision["score"], abs=1e-6)
    # Other settings, decided again from the row alone: a threshold no score reaches, a
    # tail that keeps only the top record, a host-issued search of the same row.
    assert replay(row, replace(gate, answer_at=replace(gate.answer_at, tool=1.0))).kept == []
    top_only = replace(gate, tail_fraction=replace(gate.tail_fraction, tool=1.0))
    assert replay(row, top_only).kept == ids(outcome)[:1]
    assert replay(row, gate, trigger="host").decision.threshold == gate.answer_at.host


def test_a_deeper_zero_is_read_past_the_candidates_logged_and_replayed(world: World) -> None:
    for i, text in enumerate(["Aditya reviews pull requests before lunch.",
                              "Aditya edits code in vim.", "Aditya runs on Sundays.",
                              "Aditya drinks green tea.", "Aditya lives in Pune."]):
        fact(world, text, f"habit_{i}")
    cfg = world.rt.config
    world.rt.retriever.config = replace(cfg, retrieval=replace(
        cfg.retrieval, per_generator_k=2, fusion=replace(cfg.retrieval.fusion, zero_rank=4)))
    outcome = search(world, "Aditya code review habits")
    row = log(world, outcome)
    dense, floors = json.loads(row["dense"]), json.loads(row["config_flags"])["scale_floors"]
    # Two candidates per channel, scaled from the fourth record's score, which the row keeps.
    assert len(dense) == 2 and len(json.loads(row["lexical"])["hits"]) == 2
    assert floors["dense"] is not None and floors["dense"] <= dense[-1]["score"]
    assert floors["lexical"] is not None
    assert replay(row, cfg.retrieval.gate).kept == ids(outcome)


def test_a_row_logged_before_searches_recorded_their_decision_is_not_replayed(world: World) -> None:
    fact(world, CONCISE, "explanation_style")
    row = dict(log(world, search(world, "concise technical explanations")), decision=None)
    with pytest.raises(NotReplayable, match="cannot be decided again"):
        replay(row, world.rt.config.retrieval.gate)


def test_authority_counterpart_that_outranks_its_conflict_survives_k1(world: World) -> None:
    user = fact(world, CONCISE, "explanation_style")
    world.judge.table[(CONCISE, DETAILED)] = "contradicts"
    guess = world.write(content=DETAILED, attribute="explanation_style").record_id
    world.embedder.make_similar("explanation preference", CONCISE, 0.9)
    outcome = search(world, "explanation preference", k=1)
    assert ids(outcome) == [user]
    both = search(world, "explanation preference", k=2)
    assert ids(both) == [user, guess]
    assert both.response.results[1].explanation.conflicts_with == [user]
    assert "conflicts with" in both.rendered


def test_provisional_conflict_pulls_its_counterpart_forward_as_a_pair(world: World) -> None:
    user = fact(world, CONCISE, "explanation_style")
    world.judge.table[(CONCISE, DETAILED)] = "contradicts"
    guess = world.write(content=DETAILED, attribute="explanation_style").record_id
    world.embedder.pin("detailed architecture", world.embedder.vector(DETAILED))
    outcome = search(world, "detailed architecture", k=1)
    assert ids(outcome) == [user, guess]  # the counterpart sits right before, without a k slot
    assert "no primary slot" in outcome.response.results[0].explanation.budget


def test_host_issued_search_answers_on_its_own_threshold_and_skips_summaries(world: World) -> None:
    concise = fact(world, CONCISE, "explanation_style")
    digest = "In this session Aditya asked for concise technical explanations."
    summary = make_record(type="episodic", content=digest, attribute=None, subject="-/-",
                          source_kind="session_summary", source_ref="session:s0")
    world.rt.store.write_record(summary, embedding=Embedding(world.embedder.name, world.embedder.version,
                                                             world.embedder.vector(digest)))
    query = "concise technical explanations"
    assert summary.id in ids(search(world, query))
    outcome = search(world, query, trigger="host")
    assert ids(outcome) == [concise]
    row = log(world, outcome)
    assert row["trigger"] == "host"
    assert json.loads(row["decision"])["threshold"] == world.rt.config.retrieval.gate.answer_at.host
    assert {"id": summary.id, "why": "a session_summary (host-issued search)"} in json.loads(row["gated_out"])
    assert json.loads(row["config_flags"])["k"] == world.rt.config.retrieval.trigger.host_k
    # The stricter threshold of a search nobody asked for: a score of about 0.4 here (the
    # cosine 0.77 weighed 10, less 8) answers the model's search but not the host's.
    cfg = world.rt.retriever.config
    gate = replace(cfg.retrieval.gate, weights=replace(cfg.retrieval.gate.weights, beyond_names=10.0,
                                                       asked_coverage=0.0),
                   answer_at=replace(cfg.retrieval.gate.answer_at, tool=0.3, host=0.6))
    world.rt.retriever.config = replace(cfg, retrieval=replace(cfg.retrieval, gate=gate))
    assert ids(search(world, query, trigger="host")) == []
    assert ids(search(world, query)) != []


def test_a_question_naming_someone_the_store_never_heard_of_is_not_answered(world: World) -> None:
    fact(world, "Acme North is on the Team plan.", "plan")
    outcome = search(world, "What plan is Zebedee Larkspur on?")
    assert outcome.response.results == []
    assert "the question names something no readable record carries" in (outcome.response.empty_reason or "")
    assert outcome.response.decision["signals"]["unknown_name"] == 1.0


def test_a_question_about_someones_relative_follows_the_link(world: World) -> None:
    relation_text = "Ayla's brother is Quentin."
    question = "What does Ayla's brother do for work?"
    world.embedder.make_similar(relation_text, question, 0.70)
    world.say("user", relation_text)
    relation = world.write(content=relation_text, attribute="brother", source_kind="user_statement",
                           evidence=relation_text, entities=[("person", "Ayla", "about"),
                                                             ("person", "Quentin", "mentions")]).record_id
    job_text = "Quentin works as a firefighter."
    world.say("user", job_text)
    job = world.write(content=job_text, attribute="job", source_kind="user_statement",
                      evidence=job_text, entities=[("person", "Quentin", "about")]).record_id
    outcome = search(world, question)
    assert ids(outcome)[:2] == [relation, job]
    assert f"a link from {short_id(relation)}" in outcome.response.results[1].explanation.summary
    row = log(world, outcome)
    assert (job, relation) in [(f["id"], f["via"]) for f in json.loads(row["fused"])]
    # The link channel is what ranked it second: replayed with that channel's weight at 0,
    # it falls behind records that only share a word with the question.
    gate, fusion = world.rt.config.retrieval.gate, world.rt.config.retrieval.fusion
    unlinked = replay(row, gate, replace(fusion, link=0.0)).kept
    assert unlinked[:1] == [relation] and unlinked[1:2] != [job]


def test_a_record_close_beyond_the_question_s_name_answers_and_an_unstored_attribute_does_not(
        world: World) -> None:
    deploy_text = "Project Jetstream deploys through the prod-eu-west cluster."
    owner_text = "Olu owns the Jetstream project."
    question, unstored = "Which environment does Jetstream release to?", "What budget does Jetstream have?"
    # Vectors where the name "jetstream" weighs on every text: both records sit near the
    # question on the plain cosine, but only the deploy record is close once the name is
    # taken out; the unstored attribute is close to neither.
    name = world.embedder.vector("jetstream").astype(np.float64)
    basis = np.linalg.qr(np.column_stack(
        [name, *np.random.default_rng(3).standard_normal((4, name.size))]))[0].T
    asked, said, other, budget = basis[1:5]  # orthogonal to the name and to each other
    world.embedder.pin(question, name + 2 * asked)
    world.embedder.pin(deploy_text, name + 2 * (0.48 * asked + np.sqrt(1 - 0.48 ** 2) * said))
    world.embedder.pin(owner_text, 3 * name + 2 * (0.2 * asked + np.sqrt(1 - 0.2 ** 2) * other))
    world.embedder.pin(unstored, name + 2 * budget)
    deploy = fact(world, deploy_text, "deploy_target")
    fact(world, owner_text, "owner")
    outcome = search(world, question)
    assert ids(outcome)[0] == deploy
    signals = outcome.response.decision["signals"]
    assert signals["beyond_names"] == pytest.approx(0.48, abs=1e-3)
    # The dense channel's score: the plain cosine (0.584) and the rest beyond the name, half each.
    assert signals["dense"] == pytest.approx((0.584 + 0.48) / 2, abs=1e-3)
    logged = {d["id"]: d for d in json.loads(log(world, outcome)["dense"])}
    assert logged[deploy]["beyond_names"] == pytest.approx(0.48, abs=1e-3)
    missing = search(world, unstored)
    assert missing.response.results == []
    signals = missing.response.decision["signals"]
    assert signals["beyond_names"] < 0.1 < signals["dense"]


def test_a_record_only_the_lexical_channel_finds_still_answers(world: World) -> None:
    text = "The staging proxy logged ERR_CONN_RESET during the nightly export."
    world.embedder.make_similar("ERR_CONN_RESET nightly export", text, 0.05)
    incident = fact(world, text, "incident")
    fact(world, "Aditya enjoys sailing on weekends.", "hobby")
    outcome = search(world, "ERR_CONN_RESET nightly export")
    assert ids(outcome)[:1] == [incident]
    assert outcome.response.decision["signals"]["asked_coverage"] == 1.0


def test_a_record_another_agent_wrote_and_this_one_confirmed_is_found_by_meaning(world: World) -> None:
    # Two agent processes on one store: B writes a guess, A (whose index was loaded before)
    # confirms it; A's next search must find it through its own vector index.
    from retold import build_runtime

    text = "Aditya keeps his dotfiles in a private repository."
    assert ids(search(world, "anything at all")) == []  # A's index is loaded now
    other = build_runtime(world.rt.config, clock=world.clock, embedder=world.embedder, judge=world.judge,
                          environ={})
    try:
        b = Principal("other-agent", "aditya", "s2", None)
        other.host.grant("other-agent", Scope("user", "aditya"), read=True, write=True)
        written = other.tools.call("memory_write", b, {
            "type": "semantic", "content": text, "attribute": "dotfiles", "source_kind": "agent_inference"})
        assert written["status"] == "provisional"
    finally:
        other.close()
    confirmed = world.rt.tools.call("memory_revise", world.p, {
        "id": written["record_id"], "action": "confirm", "reason": "Aditya said so"})
    assert "error" not in confirmed, confirmed
    outcome = search(world, "dotfiles repository")
    assert ids(outcome)[:1] == [written["record_id"]]
    assert outcome.response.results[0].explanation.dense is not None  # found by meaning, not only words
    assert written["record_id"] in world.rt.index.ids
