"""Candidate review before apply: the reviewer protocol and its implementations.

All candidates of one session are reviewed in ONE call (``review_batch``), one decision
per candidate. ``StructuredLLMReviewer`` uses the versioned prompt ``prompts/review_v1.md``;
``TableReviewer`` serves tests.

A revision may only narrow a candidate, never make it claim more than its evidence:
:func:`apply_revision` applies one and raises :class:`InvalidReviewRevision` for anything
else. :func:`decision_to_json` and :func:`decision_from_json` are the form a decision is
persisted in by the review stage.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from retold.clock import to_iso
from retold.config import IngestionConfig
from retold.errors import RetoldError
from retold.hosted import CompletionClient, CompletionRequest, HostedError, Message
from retold.ingest.extractor import (
    TEMPORAL_FIELDS,
    ExtractionOutputError,
    candidate_from_json,
    candidate_to_json,
    format_turn,
    load_prompt,
    parse_moment,
)
from retold.models import CandidateRecord, Record, ReviewContext, ReviewDecision

__all__ = [
    "REVIEW_PROMPT_VERSION",
    "REVIEW_SCHEMA",
    "CandidateReviewer",
    "InvalidReviewRevision",
    "StructuredLLMReviewer",
    "TableReviewer",
    "apply_revision",
    "decision_from_json",
    "decision_to_json",
]

# Names the prompt file; recorded with each review decision beside the model, so every
# decision can be traced to the prompt and model that made it.
REVIEW_PROMPT_VERSION = "review_v1"

# The only fields a revision may touch.
REVISABLE_FIELDS: tuple[str, ...] = ("content", "attribute", *TEMPORAL_FIELDS, "confidence")

_ACTIONS: tuple[str, ...] = ("accept", "reject", "revise")

_DATE_TIME: dict[str, Any] = {"type": ["string", "null"], "format": "date-time"}

REVIEW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decisions": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "index": {"type": "integer", "minimum": 0},
                    "action": {"type": "string", "enum": list(_ACTIONS)},
                    "reason": {"type": "string"},
                    "revision": {
                        "type": ["object", "null"],
                        "properties": {
                            "content": {"type": "string", "minLength": 1},
                            "attribute": {"type": ["string", "null"]},
                            "event_at": _DATE_TIME,
                            "valid_from": _DATE_TIME,
                            "valid_until": _DATE_TIME,
                            "review_at": _DATE_TIME,
                            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                        },
                        # Deliberately open: a revision of a forbidden field rejects that
                        # one candidate (invalid_review_revision) instead of being a
                        # malformed answer that fails the whole run; apply_revision
                        # enforces the field list.
                        "additionalProperties": True,
                    },
                },
                "required": ["index", "action", "reason", "revision"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["decisions"],
    "additionalProperties": False,
}


class InvalidReviewRevision(RetoldError):
    """A reviewer's revision touches a field it may not, or widens the candidate
    (``invalid_review_revision``). ``field`` names it."""

    code = "invalid_review_revision"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def apply_revision(original: CandidateRecord, revision: Mapping[str, object]) -> CandidateRecord:
    """The candidate with ``revision`` applied, or InvalidReviewRevision.

    A revision may narrow content, the attribute hint or temporal metadata; it may never
    strengthen source_kind, replace the evidence or its turn, change scope or substitute
    the primary entity. The rules, kept simple on purpose:

    - only ``content``, ``attribute``, ``event_at``, ``valid_from``, ``valid_until``,
      ``review_at`` and ``confidence`` may appear; any other key (source_kind,
      evidence, evidence_turn, entity_mentions, type, scope, ...) is refused, even with
      an unchanged value, because the prompt asks for changed fields only;
    - ``content`` must be a non-empty string at most twice as long as the original: room
      for a qualifier, not for a second fact. Whether the evidence still entails it is
      the session end's revalidation before apply, not a text heuristic here;
    - ``attribute`` is a non-empty string or null (dropping the hint);
    - a temporal field is an ISO 8601 date-time or null, and ``valid_from`` may not end
      up after ``valid_until``; evidence support is revalidated by the session end;
    - ``confidence`` is a number that may only stay or go down.
    """
    changes: dict[str, Any] = {}
    for key, value in revision.items():
        if key not in REVISABLE_FIELDS:
            raise InvalidReviewRevision(str(key), f"a review revision may not change {key!r}")
        if key == "content":
            if not isinstance(value, str) or not value.strip():
                raise InvalidReviewRevision("content", "revised content must be a non-empty string")
            if len(value.strip()) > 2 * len(original.content):
                raise InvalidReviewRevision("content", "revised content is more than twice the original")
            changes["content"] = value.strip()
        elif key == "attribute":
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise InvalidReviewRevision("attribute", "revised attribute must be text or null")
            changes["attribute"] = value.strip() if isinstance(value, str) else None
        elif key == "confidence":
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise InvalidReviewRevision("confidence", "revised confidence must be a number from 0 to 1")
            if value > original.confidence:
                raise InvalidReviewRevision("confidence", "a review revision may not raise confidence")
            changes["confidence"] = float(value)
        else:  # a temporal field
            try:
                changes[key] = parse_moment(value, key)
            except ExtractionOutputError as exc:
                raise InvalidReviewRevision(key, str(exc)) from exc
    revised = replace(original, entity_mentions=list(original.entity_mentions), **changes)
    if revised.valid_from and revised.valid_until and revised.valid_from > revised.valid_until:
        raise InvalidReviewRevision("valid_until", "revised valid_until is before valid_from")
    return revised


class CandidateReviewer(Protocol):
    """Accepts, rejects or narrows each candidate; one decision per input, in order."""

    name: str
    prompt_version: str

    def review_batch(self, items: list[tuple[CandidateRecord, ReviewContext]]) -> list[ReviewDecision]: ...


class StructuredLLMReviewer:
    """The production reviewer: every candidate of a session in ONE hosted call.

    Each item is shown with its index, its fields, the evidence turn with the turns
    either side, its destination scope, its primary entity and the live records of that
    entity in that scope. The answer must hold exactly one decision per index; a
    missing, duplicated or out-of-range index, a ``revise`` without a revision or a
    revision on ``accept``/``reject`` is a malformed answer (``HostedError("malformed")``),
    which fails the run closed.

    A ``revise`` comes back as ``ReviewDecision("revise", revised_candidate, reason)``
    with the revision applied by :func:`apply_revision`. A revision that breaks those
    rules is not a malformed answer but a verdict on that one candidate: it is returned
    as ``ReviewDecision("reject", None, "invalid_review_revision: <field>")`` so the
    runner never sees a widened candidate and the rejection reason names the field.
    """

    prompt_version = REVIEW_PROMPT_VERSION

    def __init__(self, client: CompletionClient, cfg: IngestionConfig) -> None:
        self.client = client
        self.cfg = cfg
        self.name = f"llm:{client.model}"

    def build_request(self, items: list[tuple[CandidateRecord, ReviewContext]]) -> CompletionRequest:
        """The one completion request for these items (exposed for tests and audits)."""
        # Live records are shown once per (scope, entity) group, not once per candidate:
        # candidates of one session are mostly about the same person, and repeating up to
        # max_entity_attributes records per candidate made the prompt grow quadratically.
        groups: dict[tuple[str, str], str] = {}
        sections: list[str] = []
        for _candidate, context in items:
            key = (str(context.destination_scope), context.primary_entity_id)
            if key not in groups:
                groups[key] = f"G{len(groups) + 1}"
                live = [_render_record(r) for r in context.live_records]
                sections.append("\n".join([
                    f"### Live records {groups[key]}: entity {key[1]} in scope {key[0]}",
                    *(live or ["(none)"]),
                ]))
        blocks = [
            _render_item(i, candidate, context,
                         groups[(str(context.destination_scope), context.primary_entity_id)])
            for i, (candidate, context) in enumerate(items)
        ]
        text = (f"{len(items)} candidates to review.\n\n" + "\n\n".join(sections)
                + "\n\n" + "\n\n".join(blocks))
        return CompletionRequest(
            system=load_prompt(self.prompt_version),
            messages=(Message("user", text),),
            schema=REVIEW_SCHEMA,
            schema_name="candidate_review",
            max_output_tokens=self.cfg.hosted_max_output_tokens,
            timeout_ms=self.cfg.review_timeout_ms,
        )

    def review_batch(self, items: list[tuple[CandidateRecord, ReviewContext]]) -> list[ReviewDecision]:
        """One decision per item, in input order; raises HostedError on any failure."""
        if not items:
            return []  # nothing to review: no hosted call, no cost
        answer = self.client.complete(self.build_request(items))
        by_index = _decisions_by_index(answer, len(items))
        return [_decide(candidate, by_index[i]) for i, (candidate, _context) in enumerate(items)]


def decision_to_json(decision: ReviewDecision) -> dict[str, Any]:
    """A decision as the review stage persists it: action, reason and the revised candidate."""
    cand = decision.candidate and candidate_to_json(decision.candidate)
    return {"action": decision.action, "reason": decision.reason, "candidate": cand}


def decision_from_json(data: dict[str, Any]) -> ReviewDecision:
    """The decision :func:`decision_to_json` persisted; raises for one that does not fit."""
    cand = data["candidate"] and candidate_from_json(data["candidate"])
    if data["action"] not in ("accept", "reject", "revise"):
        raise ValueError(f"unknown review action {data['action']!r}")
    return ReviewDecision(data["action"], cand, str(data["reason"]))


def _decisions_by_index(answer: Mapping[str, Any], count: int) -> dict[int, Mapping[str, Any]]:
    """Check the answer's shape and index it; every problem is a malformed answer."""
    decisions = answer.get("decisions") if isinstance(answer, Mapping) else None
    if not isinstance(decisions, list):
        raise HostedError("malformed", "review answer has no decisions list")
    by_index: dict[int, Mapping[str, Any]] = {}
    for n, item in enumerate(decisions):
        if not isinstance(item, Mapping) or set(item) != {"index", "action", "reason", "revision"}:
            raise HostedError("malformed", f"review decision {n} must have index, action, reason, revision")
        index = item["index"]
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
            raise HostedError("malformed", f"review decision {n} has index {index!r}, not 0..{count - 1}")
        if index in by_index:
            raise HostedError("malformed", f"review answer decides candidate {index} twice")
        if item["action"] not in _ACTIONS or not isinstance(item["reason"], str):
            raise HostedError("malformed", f"review decision {n} has an invalid action or reason")
        revision = item["revision"]
        if revision is not None and not isinstance(revision, Mapping):
            raise HostedError("malformed", f"review decision {n} has a revision that is not an object")
        # A revision accompanies revise and only revise ({} counts as none).
        if (item["action"] == "revise") != bool(revision):
            raise HostedError("malformed", f"review decision {n}: a revision goes with revise only")
        by_index[index] = item
    missing = [i for i in range(count) if i not in by_index]
    if missing:
        raise HostedError("malformed", f"review answer has no decision for candidates {missing}")
    return by_index


def _decide(candidate: CandidateRecord, item: Mapping[str, Any]) -> ReviewDecision:
    action: Literal["accept", "reject", "revise"] = item["action"]
    reason = item["reason"].strip() or f"{action} (no reason given)"
    if action != "revise":
        return ReviewDecision(action, None, reason)
    try:
        revised = apply_revision(candidate, item["revision"])
    except InvalidReviewRevision as exc:
        return ReviewDecision("reject", None, f"{InvalidReviewRevision.code}: {exc.field}")
    return ReviewDecision("revise", revised, reason)


def _render_item(index: int, candidate: CandidateRecord, context: ReviewContext, group: str) -> str:
    # The evidence turn plus adjacent turns only, even when the caller passed a wider
    # window, so the reviewer sees no more of the transcript than needed.
    window = [
        format_turn(t)
        for t in sorted(context.transcript_window, key=lambda t: t.turn)
        if abs(t.turn - candidate.evidence_turn) <= 1
    ]
    return "\n".join(
        [
            f"### Candidate {index}",
            "candidate: " + json.dumps(candidate_to_json(candidate), ensure_ascii=False),
            f"destination scope: {context.destination_scope}",
            f"primary entity: {context.primary_entity_id}",
            "transcript window:",
            *(window or ["(evidence turn not available)"]),
            f"live records for this entity in this scope: see {group}",
        ]
    )


def _render_record(record: Record) -> str:
    parts = [record.id, record.type, record.status, record.source_kind]
    parts.append(f"attribute {record.attribute or '-'}")
    if record.valid_from is not None:
        parts.append(f"valid_from {to_iso(record.valid_from)}")
    if record.valid_until is not None:
        parts.append(f"valid_until {to_iso(record.valid_until)}")
    return f"- {' · '.join(parts)}: {record.content}"


@dataclass
class TableReviewer:
    """Decides by candidate content: ``table[content]`` or ``default`` (accept). A callable
    value receives the candidate and returns the decision. Records every batch."""

    table: dict[str, ReviewDecision | Callable[[CandidateRecord], ReviewDecision]] = field(
        default_factory=dict
    )
    name: str = "table"
    prompt_version: str = "table-1"
    batches: list[list[tuple[CandidateRecord, ReviewContext]]] = field(default_factory=list)

    def review_batch(self, items: list[tuple[CandidateRecord, ReviewContext]]) -> list[ReviewDecision]:
        self.batches.append(list(items))
        decisions = []
        for candidate, _context in items:
            rule = self.table.get(candidate.content)
            if rule is None:
                decisions.append(ReviewDecision("accept", None, "accepted by default"))
            elif callable(rule):
                decisions.append(rule(candidate))
            else:
                decisions.append(rule)
        return decisions
