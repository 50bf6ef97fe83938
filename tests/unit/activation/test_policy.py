"""The activation policy: each eligibility rule, the record that passes it and the one
that fails it, judged from facts alone (no store)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from retold.activation.categories import CategoryRules
from retold.activation.policy import (
    ActivationDecision,
    ActivationFacts,
    ActivationPolicy,
    SourceTurn,
)
from retold.config.activation import ActivationConfig, CategoryKeywords
from retold.models import Record
from retold.testing import T0, make_record

ME = "ent_aditya"
QUOTE = "Please always answer me in British English."


def _facts(record: Record | None = None, *, turn: SourceTurn | None | str = "default",
           conflict: bool = False, **fields: Any) -> ActivationFacts:
    base = record or make_record(
        content="Aditya wants answers in British English.", attribute="answer_language",
        subject_entity_id=ME, evidence="always answer me in British English", source_ref="session:s1<turn:1>")
    chosen = replace(base, **fields)
    source = SourceTurn("aditya", "user", QUOTE) if turn == "default" else turn
    assert source is None or isinstance(source, SourceTurn)
    return ActivationFacts(chosen, "aditya", frozenset({ME}), source, conflict)


def _decide(facts: ActivationFacts, **config: Any) -> ActivationDecision:
    return ActivationPolicy(ActivationConfig(**config)).decide(facts)


def test_a_user_stated_preference_about_the_user_is_ambient() -> None:
    decision = _decide(_facts())
    assert (decision.activation, decision.rule, decision.category) == ("ambient", "eligible", "communication")


@pytest.mark.parametrize(("fields", "rule"), [
    ({"type": "episodic"}, "not_a_fact"),
    ({"source_kind": "session_summary"}, "not_a_fact"),
    ({"status": "superseded"}, "not_live"),
    ({"status": "deleted"}, "not_live"),
])
def test_only_live_facts_can_be_ambient(fields: dict[str, Any], rule: str) -> None:
    decision = _decide(_facts(**fields))
    assert (decision.activation, decision.rule) == ("conditional", rule)


def test_a_fact_about_someone_else_is_conditional() -> None:
    decision = _decide(_facts(subject_entity_id="ent_maya", content="Maya is vegetarian.", attribute="diet"))
    assert (decision.activation, decision.rule) == ("conditional", "not_about_principal")


def test_a_standing_instruction_about_a_project_may_be_ambient() -> None:
    record = make_record(type="procedural", subject_entity_id="ent_apollo", attribute="deploy_process",
                         content="Deploys of Apollo go through the staging cluster first.",
                         evidence="deploys go through the staging cluster first")
    quote = "Remember: deploys go through the staging cluster first."
    decision = _decide(_facts(record, turn=SourceTurn("aditya", "user", quote)))
    assert (decision.activation, decision.category) == ("ambient", "instruction")


@pytest.mark.parametrize("kind", ["agent_inference", "tool_result", "system"])
def test_anything_but_a_user_statement_is_conditional(kind: str) -> None:
    decision = _decide(_facts(source_kind=kind))
    assert (decision.activation, decision.rule) == ("conditional", "not_user_statement")
    assert decision.hard


@pytest.mark.parametrize(("turn", "evidence", "why"), [
    (None, "always answer me in British English", "no stored turn"),
    (SourceTurn("maya", "user", QUOTE), "always answer me in British English", "another user"),
    (SourceTurn("aditya", "assistant", QUOTE), "always answer me in British English", "not from a user turn"),
    (SourceTurn("aditya", "user", "Answer me in American English."), "always answer me in British English",
     "no longer in the turn"),
    (SourceTurn("aditya", "user", QUOTE), None, "no stored turn"),
])
def test_the_quote_must_be_the_users_own_words(turn: SourceTurn | None, evidence: str | None,
                                               why: str) -> None:
    decision = _decide(_facts(turn=turn, evidence=evidence))
    assert (decision.activation, decision.rule) == ("conditional", "evidence_unverified")
    assert why in decision.reason


def test_a_blanked_transcript_keeps_the_check_made_at_write_time() -> None:
    # Retention blanks turns; the quote was checked when the record was written.
    assert _decide(_facts(turn=SourceTurn("aditya", "user", ""))).activation == "ambient"


@pytest.mark.parametrize(("content", "attribute", "category"), [
    ("Aditya has type 2 diabetes and avoids sugar.", "diet", "health"),
    ("Aditya's salary is 90k.", "compensation", "finance"),
    ("Aditya is married to Sam.", "family", "relationships"),
    ("Aditya prays five times a day.", "routine", "beliefs"),
])
def test_sensitive_categories_never_auto_promote(content: str, attribute: str, category: str) -> None:
    decision = _decide(_facts(content=content, attribute=attribute))
    assert (decision.activation, decision.rule, decision.category) == ("conditional", "sensitive", category)


def test_a_credential_never_enters_the_profile() -> None:
    decision = _decide(_facts(content="Aditya's API key is sk-abcdefghijklmnop1234567890"))
    assert (decision.activation, decision.rule) == ("conditional", "secret")
    # The product's one secret screen decides; ordinary talk about tokens is not a credential.
    assert _decide(_facts(content="Aditya prefers tokens of appreciation")).rule != "secret"


@pytest.mark.parametrize(("content", "fields", "rule"), [
    ("For this report, Aditya wants British English.", {}, "task_bound"),
    ("Aditya wants British English answers for now.", {}, "task_bound"),
    ("Aditya wants British English answers until Friday.", {}, "time_bound"),
    ("Aditya wants British English answers today.", {}, "time_bound"),
    ("Aditya wants British English answers.", {"valid_until": T0}, "time_bound"),
])
def test_wording_tied_to_a_task_or_date_is_conditional(content: str, fields: dict[str, Any],
                                                        rule: str) -> None:
    decision = _decide(_facts(content=content, **fields))
    assert (decision.activation, decision.rule) == ("conditional", rule)


def test_a_category_outside_the_promotable_list_is_conditional() -> None:
    decision = _decide(_facts(content="Aditya lives in Leeds.", attribute="home_city"))
    assert (decision.activation, decision.rule, decision.category) == (
        "conditional", "category_not_promotable", "location")
    # The same fact is promoted once an operator lists the category.
    promotable = ActivationConfig().promotable_categories + ("location",)
    assert _decide(_facts(content="Aditya lives in Leeds.", attribute="home_city"),
                   promotable_categories=promotable).activation == "ambient"


@pytest.mark.parametrize(("content", "attribute", "conflict", "rule"), [
    ("Aditya likes the colour teal.", "colour_choice", False, "uncategorised"),
    ("Aditya might prefer British English.", "answer_language", False, "hedged"),
    ("Aditya wants answers in British English.", "answer_language", True, "conflict"),
])
def test_borderline_cases_go_to_review(content: str, attribute: str, conflict: bool, rule: str) -> None:
    decision = _decide(_facts(content=content, attribute=attribute, conflict=conflict))
    assert (decision.activation, decision.rule) == ("review", rule)
    assert not decision.hard


def test_turning_the_profile_off_keeps_everything_conditional() -> None:
    assert _decide(_facts(), enabled=False).activation == "conditional"


def test_a_person_may_promote_a_sensitive_fact_but_never_an_inference() -> None:
    policy = ActivationPolicy(ActivationConfig())
    sensitive = _facts(content="Aditya has coeliac disease; no gluten.", attribute="diet")
    assert policy.decide(sensitive).rule == "sensitive"
    assert policy.manual_refusal(sensitive) is None
    refusal = policy.manual_refusal(_facts(source_kind="agent_inference"))
    assert refusal is not None and refusal.rule == "not_user_statement"


def test_categories_read_the_attribute_first_and_configured_keywords_first() -> None:
    rules = CategoryRules(["health"])
    assert rules.categorize("programming_language", "Aditya writes Python.").category == "tools"
    assert rules.categorize("answer_language", "Aditya wants British English.").category == "communication"
    assert rules.categorize("diet", "Aditya is allergic to peanuts.").category == "diet"
    assert rules.categorize("snacks", "Aditya prefers healthy snacks.").category == "diet"  # not "health"
    extra = CategoryRules(["health"], [("tools", ["helix"])])
    assert extra.categorize(None, "Aditya edits in Helix.").category == "tools"
    config = ActivationConfig(extra_keywords=(CategoryKeywords("hobbies", ("climbing",)),),
                              promotable_categories=("hobbies",))
    climbing = make_record(attribute="weekend", content="Aditya goes climbing.")
    found = ActivationPolicy(config).categorize(climbing)
    assert found.category == "hobbies"


def test_config_refuses_a_category_both_promotable_and_sensitive() -> None:
    from retold.config import read_config
    from retold.errors import ConfigError

    with pytest.raises(ConfigError, match="health cannot also be promotable"):
        read_config(overrides={"activation": {"promotable_categories": ["diet", "health"]}})
    with pytest.raises(ConfigError, match=r"extra_keywords\[0\]\.keywords"):
        read_config(overrides={"activation": {"extra_keywords": [{"category": "tools", "keywords": []}]}})
    with pytest.raises(ConfigError, match="profile_max_tokens"):
        read_config(overrides={"activation": {"profile_max_tokens": 0}})
