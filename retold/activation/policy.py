"""The activation policy: which memories are part of every session's profile.

A record is ``ambient`` (in the profile), ``conditional`` (found by search only) or
``review`` (a person decides). Only a record that passes every rule below becomes
ambient; the first rule it fails decides, and its name is recorded with the decision:

1. a current semantic or procedural fact (``not_a_fact``: episodic events and session
   summaries; ``not_live``: superseded, expired or forgotten);
2. no credential in its text (``secret``), and no sensitive category (``sensitive``);
3. about the principal's own person entity, or a standing instruction to the agent (a
   procedural record, whatever it is about) (``not_about_principal``);
4. the user said it: a ``user_statement`` whose quote was found in a user turn of one of
   the principal's own sessions, and is still there (``not_user_statement``,
   ``evidence_unverified``);
5. global wording: not tied to a date or a task (``time_bound``, ``task_bound``);
6. a promotable category (``category_not_promotable``);
7. nothing borderline: an unknown category (``uncategorised``), hedged wording
   (``hedged``) or an open conflict (``conflict``) goes to review;
8. not picked for a person's check: a memory pack's ``review_sample_rate`` sends that
   share of otherwise eligible records to review (``sampled``).

Rules 1 to 4 are hard: a person resolving a review or setting an activation by hand is
held to them too (:meth:`ActivationPolicy.manual_refusal`), except the sensitive category,
which only keeps the policy from promoting on its own; rules 5 to 8 are the judgement a
review exists for. The policy does no I/O: the caller gathers the facts.
See docs/decisions.md, "The ambient profile".
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass

from retold.activation.categories import Categorized, CategoryRules, words
from retold.config.activation import ActivationConfig
from retold.models import ACTIVE_STATUSES, Activation, Record, Role
from retold.policy.secrets import find_secret

__all__ = [
    "ActivationDecision", "ActivationFacts", "ActivationPolicy", "SourceTurn", "sample_position", "sampled",
]

SecretScreen = Callable[[str], object]  # truthy when the text holds a credential
"""Returns the kind of credential found in a text, or None."""

_FACT_TYPES = ("semantic", "procedural")
_SOURCE_WORDS = {"agent_inference": "an agent's inference", "tool_result": "a tool result",
                 "system": "a host-supplied fact"}
_HARD_RULES = ("not_a_fact", "not_live", "secret", "not_about_principal", "not_user_statement",
               "evidence_unverified")
_MONTHS = ("jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec|january|february|march|april|"
           "june|july|august|september|october|november|december")
_DAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_TIME_BOUND = re.compile(
    r"\b(today|tonight|tomorrow|yesterday|this (morning|afternoon|evening|week|weekend|month|quarter|year)"
    rf"|(next|last|this) ({_DAYS}|sprint|week|month|quarter|year)|(on|by|until|before|after) ({_DAYS})"
    r"|until|till|\d{4}-\d{2}-\d{2}|\d{1,2}/\d{1,2}(/\d{2,4})?"
    rf"|({_MONTHS})\.? \d{{1,2}}(st|nd|rd|th)?\b|\d{{1,2}}(st|nd|rd|th)? ({_MONTHS})\b|q[1-4] 20\d\d)\b",
    re.IGNORECASE)
_TASK_BOUND = re.compile(
    r"\b(for now|right now|at the moment|for the moment|this time|this once|just this|only this"
    r"|(for|in|on) (this|that|the|the current) (task|ticket|report|draft|email|document|doc|deck|pr"
    r"|pull request|meeting|call|project|conversation|chat|session|thread|reply|answer|response"
    r"|message|slide|presentation|issue|bug|migration|release|sprint|demo))\b",
    re.IGNORECASE)
_HEDGED = re.compile(
    r"\b(maybe|perhaps|might|probably|possibly|not sure|unsure|i think|i guess|considering"
    r"|thinking about|sometimes|occasionally|trying out|may want|tends? to|leaning)\b|\?\s*$",
    re.IGNORECASE)


@dataclass(frozen=True)
class SourceTurn:
    """The turn a record's ``source_ref`` names, as the store holds it now."""

    session_user_id: str  # whose session it is
    role: Role
    content: str  # "" once retention blanked the transcript
    # The content as the tenant's pack masks it, when that differs: extraction quotes the
    # masked transcript, so its quote is found there.
    masked: str | None = None


@dataclass(frozen=True)
class ActivationFacts:
    """What the policy needs to know about one record, gathered by the caller."""

    record: Record
    principal_user_id: str
    principal_entities: frozenset[str]  # the principal's person entity ids (normally one)
    source_turn: SourceTurn | None  # None when the source_ref names no stored turn
    in_conflict: bool = False


@dataclass(frozen=True)
class ActivationDecision:
    """The policy's answer: the activation, the rule that decided it, a sentence saying
    why, and the record's category."""

    activation: Activation
    rule: str
    reason: str
    category: str | None

    @property
    def hard(self) -> bool:
        """A rule that no person's decision can override."""
        return self.rule in _HARD_RULES


class ActivationPolicy:
    """Decides one record's activation from its facts; holds only configuration."""

    def __init__(self, config: ActivationConfig, secret_screen: SecretScreen = find_secret, *,
                 review_sample_rate: float = 0.0) -> None:
        self.config = config
        # The share of records that would enter the profile on their own that a person
        # checks first (a memory pack's write_policy.review_sample_rate); 0 = none.
        self.review_sample_rate = review_sample_rate
        self.rules = CategoryRules(config.sensitive_categories,
                                   [(e.category, e.keywords) for e in config.extra_keywords])
        self._screen = secret_screen

    def categorize(self, record: Record) -> Categorized:
        return self.rules.categorize(record.attribute, record.content)

    def decide(self, facts: ActivationFacts) -> ActivationDecision:
        """The activation the rules give ``facts.record``: the first failed rule decides."""
        found = self.categorize(facts.record)
        category = found.category
        failed = self._hard_failure(facts, found) or self._soft_failure(facts, found)
        if failed is not None:
            return failed
        if sampled(facts.record.id, self.review_sample_rate):
            return ActivationDecision("review", "sampled", "picked for a person's check "
                                      "(memory pack write_policy.review_sample_rate)", category)
        reason = ("a standing instruction the user gave" if category == "instruction"
                  else f"a {category} fact the user stated about themselves")
        return ActivationDecision("ambient", "eligible", reason, category)

    def manual_refusal(self, facts: ActivationFacts) -> ActivationDecision | None:
        """Why a person may not make this record ambient, or None when they may: the
        hard rules hold for everyone; the category, wording and conflict rules are the
        judgement a person is asked for."""
        return self._hard_failure(facts, self.categorize(facts.record), person=True)

    # -- the rules -------------------------------------------------------------------------

    def _hard_failure(self, facts: ActivationFacts, found: Categorized, *,
                      person: bool = False) -> ActivationDecision | None:
        record, category = facts.record, found.category

        def conditional(rule: str, reason: str) -> ActivationDecision:
            return ActivationDecision("conditional", rule, reason, category)

        if not self.config.enabled:
            return conditional("disabled", "the profile is turned off (activation.enabled)")
        if record.type not in _FACT_TYPES or record.source_kind == "session_summary":
            return conditional("not_a_fact", "events and session summaries are found by search only")
        if record.status not in ACTIVE_STATUSES:
            return conditional("not_live", f"the record is {record.status}")
        if self._screen(record.content) or self._screen(record.evidence or ""):
            return conditional("secret", "the text looks like a credential")
        if found.sensitive and not person:
            return conditional("sensitive", f"{category} facts never enter the profile on their own "
                                            f"(matched {found.matched!r})")
        # A standing instruction to the agent is a procedural record, whoever it names; a
        # semantic fact about someone else stays theirs even when it reads like a rule.
        if record.subject_entity_id not in facts.principal_entities and record.type != "procedural":
            return conditional("not_about_principal", "it is about someone or something other than the user")
        if record.source_kind != "user_statement":
            source = _SOURCE_WORDS.get(record.source_kind, record.source_kind)
            return conditional("not_user_statement", f"{source} never enters the profile on its own")
        return self._evidence_failure(facts, category)

    def _evidence_failure(self, facts: ActivationFacts, category: str | None) -> ActivationDecision | None:
        turn, record = facts.source_turn, facts.record
        problem = None
        if turn is None or not record.evidence:
            problem = "its quote points at no stored turn"
        elif turn.session_user_id != facts.principal_user_id:
            problem = "its quote comes from another user's session"
        elif turn.role != "user":
            problem = "its quote is not from a user turn"
        elif turn.content and not any(f" {_squash(record.evidence)} " in f" {_squash(text)} "
                                      for text in (turn.content, turn.masked) if text):
            problem = "its quote is no longer in the turn it names"
        if problem is None:
            return None
        return ActivationDecision("conditional", "evidence_unverified", problem, category)

    def _soft_failure(self, facts: ActivationFacts, found: Categorized) -> ActivationDecision | None:
        record, category = facts.record, found.category
        text = record.content
        if record.valid_from is not None or record.valid_until is not None or _TIME_BOUND.search(text):
            return ActivationDecision("conditional", "time_bound", "it is tied to a date or period", category)
        if _TASK_BOUND.search(text):
            return ActivationDecision("conditional", "task_bound", "it is tied to one task", category)
        if category is not None and category not in self.config.promotable_categories:
            return ActivationDecision("conditional", "category_not_promotable",
                                      f"{category} facts are found by search only", category)
        if category is None:
            return ActivationDecision("review", "uncategorised", "no category matched; a person decides",
                                      None)
        if _HEDGED.search(text):
            return ActivationDecision("review", "hedged", "the wording is tentative; a person decides",
                                      category)
        if facts.in_conflict or record.status == "provisional":
            return ActivationDecision("review", "conflict",
                                      "it conflicts with another record; a person decides", category)
        return None


def sample_position(record_id: str) -> float:
    """Where ``record_id`` falls in [0, 1), from its hash: a ``rate`` share of records is
    those below ``rate``, so the records a small rate picks are the first a larger one does."""
    digest = hashlib.sha256(record_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def sampled(record_id: str, rate: float) -> bool:
    """Whether ``record_id`` falls in a ``rate`` share of records. The record id's hash
    decides, not a random draw, so a record is judged the same way every time it is
    judged again and a test with a given id is stable."""
    return rate > 0 and sample_position(record_id) < rate


def _squash(text: str) -> str:
    """Words only, so whitespace and punctuation differences do not fail a quote."""
    return " ".join(words(text))
