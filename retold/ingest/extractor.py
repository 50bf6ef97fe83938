"""The extractor: the model that reads an ended session and proposes candidates.

``StructuredLLMExtractor`` (one hosted structured call with the versioned prompt
``prompts/extract_v1.md``, or ``prompts/extract_v2.md`` for a tenant whose memory pack has
sensitivity classes decided by the extractor's label), ``FakeExtractor`` (tests) and
``ReplayExtractor`` (serves a recorded ExtractionOutput from a JSON file; every event it
produces says "replayed").

The JSON form of an ExtractionOutput is :data:`EXTRACTION_SCHEMA`, the same for a model
answer and a recorded file, with each candidate's optional ``sensitivity`` label
(:func:`extraction_schema` asks for it when the pack has such classes; an answer or a
recording without it has no label); :func:`output_from_json` and :func:`output_to_json`
convert both ways. Every extractor has a ``replayed`` attribute (True only for the replay
extractor) so the session end can mark its events without an isinstance check.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

from retold.clock import from_iso, to_iso
from retold.config import IngestionConfig
from retold.errors import RetoldError
from retold.hosted import CompletionClient, CompletionRequest, HostedError, Message
from retold.models import (
    ENTITY_KINDS,
    RECORD_TYPES,
    CandidateRecord,
    EntityMention,
    ExtractionContext,
    ExtractionOutput,
    SessionSummary,
    Turn,
)

__all__ = [
    "EXTRACTION_SCHEMA",
    "EXTRACT_LABEL_PROMPT_VERSION",
    "EXTRACT_PROMPT_VERSION",
    "TEMPORAL_FIELDS",
    "ExtractionOutputError",
    "Extractor",
    "FakeExtractor",
    "ReplayExtractor",
    "StructuredLLMExtractor",
    "candidate_from_json",
    "candidate_to_json",
    "extraction_schema",
    "format_turn",
    "known_labels",
    "load_prompt",
    "output_from_json",
    "output_to_json",
    "parse_moment",
]

# Prompts are versioned code: the version names the prompt file and is recorded on every
# extraction.run event, so a record can be traced to the prompt that produced it.
EXTRACT_PROMPT_VERSION = "extract_v1"
# The same prompt with a sensitivity rule, sent only to a tenant whose pack declares classes
# decided by the extractor's label: a tenant without them is asked exactly what it was.
EXTRACT_LABEL_PROMPT_VERSION = "extract_v2"

CANDIDATE_SOURCE_KINDS: tuple[str, ...] = ("user_statement", "tool_result", "agent_inference")
MENTION_ROLES: tuple[str, ...] = ("about", "mentions")
TEMPORAL_FIELDS: tuple[str, ...] = ("event_at", "valid_from", "valid_until", "review_at")

_DATE_TIME: dict[str, Any] = {"type": ["string", "null"], "format": "date-time"}

_MENTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "kind": {"type": "string", "enum": list(ENTITY_KINDS)},
        "text": {"type": "string", "minLength": 1},
        "role": {"type": "string", "enum": list(MENTION_ROLES)},
        # Optional: set only when the mention is one of the known entities shown.
        "entity_id": {"type": ["string", "null"]},
    },
    "required": ["kind", "text", "role"],
    "additionalProperties": False,
}

_CANDIDATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "type": {"type": "string", "enum": list(RECORD_TYPES)},
        "content": {"type": "string", "minLength": 1},
        "attribute": {"type": ["string", "null"]},
        "source_kind": {"type": "string", "enum": list(CANDIDATE_SOURCE_KINDS)},
        "evidence": {"type": "string", "minLength": 1},
        "evidence_turn": {"type": "integer", "minimum": 1},
        "entity_mentions": {"type": "array", "items": _MENTION_SCHEMA},
        "event_at": _DATE_TIME,
        "valid_from": _DATE_TIME,
        "valid_until": _DATE_TIME,
        "review_at": _DATE_TIME,
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
    },
    "required": [
        "type",
        "content",
        "attribute",
        "source_kind",
        "evidence",
        "evidence_turn",
        "entity_mentions",
        "event_at",
        "valid_from",
        "valid_until",
        "review_at",
        "confidence",
    ],
    "additionalProperties": False,
}

# No maxItems on candidates: the cap is configuration (extraction_max_candidates), and an
# answer with one candidate too many is capped rather than failed as malformed.
EXTRACTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "candidates": {"type": "array", "items": _CANDIDATE_SCHEMA},
        "summary": {
            "type": "object",
            "properties": {
                "content": {"type": "string", "minLength": 1},
                "decisions": {"type": "array", "items": {"type": "string"}},
                "entity_mentions": {"type": "array", "items": _MENTION_SCHEMA},
            },
            "required": ["content", "decisions", "entity_mentions"],
            "additionalProperties": False,
        },
    },
    "required": ["candidates", "summary"],
    "additionalProperties": False,
}


def extraction_schema(labels: Sequence[str] = ()) -> dict[str, Any]:
    """The answer schema for a tenant whose extractor-label classes are ``labels``:
    :data:`EXTRACTION_SCHEMA` itself when there are none, else with a ``sensitivity``
    property on each candidate, required and nullable, so strict modes take it as it is.

    It is a string, not an enum of the labels: the client validates every answer against
    the schema it sent, and an enum would turn one unknown label into a malformed answer
    that loses the session's whole extraction. An unknown label is dropped instead
    (:func:`known_labels`)."""
    if not labels:
        return EXTRACTION_SCHEMA
    candidate = {
        **_CANDIDATE_SCHEMA,
        "properties": {**_CANDIDATE_SCHEMA["properties"], "sensitivity": {
            "type": ["string", "null"],
            "description": "one of the sensitivity labels listed with the transcript, or null: "
                           + ", ".join(labels)}},
        "required": [*_CANDIDATE_SCHEMA["required"], "sensitivity"],
    }
    return {**EXTRACTION_SCHEMA, "properties": {
        **EXTRACTION_SCHEMA["properties"], "candidates": {"type": "array", "items": candidate}}}


def known_labels(output: ExtractionOutput, labels: Sequence[str]) -> ExtractionOutput:
    """``output`` with every candidate's label that is not one of ``labels`` (the tenant's
    extractor-label classes) dropped: a label the pack does not declare claims nothing, and
    keeping it would only let a later pack give it a meaning the extractor never read."""
    allowed = set(labels)
    output.candidates = [c if c.sensitivity is None or c.sensitivity in allowed
                         else replace(c, sensitivity=None) for c in output.candidates]
    return output


class ExtractionOutputError(RetoldError):
    """A model answer or recorded file does not match :data:`EXTRACTION_SCHEMA`."""


@cache
def load_prompt(version: str) -> str:
    """The text of ``retold/ingest/prompts/<version>.md`` (package data, read once)."""
    return (resources.files("retold.ingest") / "prompts" / f"{version}.md").read_text("utf-8")


def format_turn(turn: Turn) -> str:
    """One numbered transcript turn as the prompts show it.

    ``[turn 3 · user · 2026-09-03T12:00Z] text``; the timestamp (UTC, minutes) lets the
    model resolve relative time expressions ("yesterday") against the turn.
    """
    at = turn.at.astimezone(UTC).strftime("%Y-%m-%dT%H:%MZ")
    return f"[turn {turn.turn} · {turn.role} · {at}] {turn.content}"


class Extractor(Protocol):
    """Turns a transcript into candidate records and one session summary."""

    name: str  # recorded on extraction events, with the prompt version
    prompt_version: str

    def extract(self, transcript: list[Turn], context: ExtractionContext) -> ExtractionOutput: ...


@dataclass
class FakeExtractor:
    """Returns a predefined output and records every call (tests)."""

    output: ExtractionOutput
    name: str = "fake"
    prompt_version: str = "fake-1"
    calls: list[tuple[list[Turn], ExtractionContext]] = field(default_factory=list)
    replayed: bool = False

    def extract(self, transcript: list[Turn], context: ExtractionContext) -> ExtractionOutput:
        self.calls.append((list(transcript), context))
        return self.output


class StructuredLLMExtractor:
    """The production extractor: ONE structured hosted call per session.

    The system prompt is exactly the versioned prompt file; the user message carries the
    numbered transcript, the known entities, the existing subjects and the limits, and
    the tenant's extractor-label classes (``labels``, names only) when it has any: then
    the prompt is ``extract_v2`` and each candidate may carry one of them as its
    ``sensitivity``. The validated answer is parsed into an :class:`ExtractionOutput`
    (a label not in ``labels`` is dropped); any answer that cannot be parsed raises
    ``HostedError("malformed")`` so the run fails closed.
    Timeouts and provider failures are the client's ``HostedError`` and pass through.
    """

    replayed = False

    def __init__(self, client: CompletionClient, cfg: IngestionConfig, *, labels: Sequence[str] = ()) -> None:
        self.client = client
        self.cfg = cfg
        self.labels = tuple(labels)
        self.prompt_version = EXTRACT_LABEL_PROMPT_VERSION if self.labels else EXTRACT_PROMPT_VERSION
        self.name = f"llm:{client.model}"

    def build_request(self, transcript: list[Turn], context: ExtractionContext) -> CompletionRequest:
        """The one completion request for this session (exposed for tests and audits)."""
        return CompletionRequest(
            system=load_prompt(self.prompt_version),
            messages=(Message("user", self._user_message(transcript, context)),),
            schema=extraction_schema(self.labels),
            schema_name="record_extraction",
            max_output_tokens=self.cfg.hosted_max_output_tokens,
            timeout_ms=self.cfg.extraction_timeout_ms,
        )

    def extract(self, transcript: list[Turn], context: ExtractionContext) -> ExtractionOutput:
        """Call the model once and parse its answer; raises HostedError on any failure."""
        answer = self.client.complete(self.build_request(transcript, context))
        try:
            output = output_from_json(answer)
        except ExtractionOutputError as exc:
            raise HostedError("malformed", f"extraction answer does not match the schema: {exc}") from exc
        output = known_labels(output, self.labels)
        # At most extraction_max_candidates are considered per session; the
        # model is told the cap, and anything past it is dropped in the model's order.
        output.candidates = output.candidates[: self.cfg.extraction_max_candidates]
        output.summary.content = _clip(output.summary.content, self.cfg.summary_max_chars)
        return output

    def _user_message(self, transcript: list[Turn], context: ExtractionContext) -> str:
        turns = [format_turn(t) for t in sorted(transcript, key=lambda t: t.turn)]
        # The runner bounds the context (extraction_context_max_*); bounding again
        # here keeps the prompt size predictable for any caller.
        known = context.known_entities[: self.cfg.extraction_context_max_entities]
        entities = [f"- {entity_id} · {kind} · {canonical}" for entity_id, kind, canonical in known]
        subjects = [f"- {s}" for s in context.existing_subjects[: self.cfg.extraction_context_max_subjects]]
        principal = context.principal
        parts = [
            f"User id: {principal.user_id}. Assistant (agent) id: {principal.agent_id}.",
            f"Maximum candidates: {self.cfg.extraction_max_candidates}.",
            f"Maximum summary length: {self.cfg.summary_max_chars} characters.",
            "",
            "Known entities (entity_id · kind · canonical name):",
            *(entities or ["(none)"]),
            "",
            "Existing subjects:",
            *(subjects or ["(none)"]),
            "",
            *([f"Sensitivity labels: {', '.join(self.labels)}.", ""] if self.labels else []),
            f"Transcript ({len(turns)} turns):",
            *turns,
        ]
        return "\n".join(parts)


class ReplayExtractor:
    """Serves a recorded extraction output from a JSON file (EXTRACTION_SCHEMA), or from a
    folder of them named by session id (``<folder>/<session id>.json``), so one worker
    can replay a whole story.

    A single file is read and checked when the extractor is built, so a bad file fails
    at start-up with :class:`ExtractionOutputError`; a folder's files are read and
    checked when their session is extracted, and a session without one fails closed with
    that error. Each ``extract`` returns a fresh copy of the recorded output whatever the
    transcript. ``replayed`` is True so the session end marks every event it writes as replayed.
    """

    replayed = True

    def __init__(self, path: str | Path, *, prompt_version: str = "replay") -> None:
        self.path = Path(path)
        self.name = f"replay:{self.path.name}"
        # The recording does not say which prompt produced it; callers that know pass it.
        self.prompt_version = prompt_version
        self._data: object = None if self.path.is_dir() else self._read(self.path)

    @staticmethod
    def _read(path: Path) -> object:
        try:
            data: object = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError) as exc:
            raise ExtractionOutputError(f"cannot read replay file {path}: {exc}") from exc
        try:
            output_from_json(data)
        except ExtractionOutputError as exc:
            raise ExtractionOutputError(f"replay file {path}: {exc}") from exc
        return data

    def extract(self, transcript: list[Turn], context: ExtractionContext) -> ExtractionOutput:
        """The recorded output (a new object on every call, so callers may change it)."""
        if self._data is None:
            return output_from_json(self._read(self.path / f"{context.principal.session_id}.json"))
        return output_from_json(self._data)


# ---------------------------------------------------------------------------------------
# JSON form of ExtractionOutput


def output_to_json(output: ExtractionOutput) -> dict[str, Any]:
    """The JSON form of ``output`` (EXTRACTION_SCHEMA); inverse of :func:`output_from_json`."""
    return {
        "candidates": [candidate_to_json(c) for c in output.candidates],
        "summary": {
            "content": output.summary.content,
            "decisions": list(output.summary.decisions),
            "entity_mentions": [_mention_to_json(m) for m in output.summary.entity_mentions],
        },
    }


def candidate_to_json(candidate: CandidateRecord) -> dict[str, Any]:
    """One candidate as an EXTRACTION_SCHEMA candidate object (dates as ISO UTC text)."""
    data: dict[str, Any] = {
        "type": candidate.type,
        "content": candidate.content,
        "attribute": candidate.attribute,
        "source_kind": candidate.source_kind,
        "evidence": candidate.evidence,
        "evidence_turn": candidate.evidence_turn,
        "entity_mentions": [_mention_to_json(m) for m in candidate.entity_mentions],
    }
    for name in TEMPORAL_FIELDS:
        moment: datetime | None = getattr(candidate, name)
        data[name] = to_iso(moment) if moment is not None else None
    data["confidence"] = candidate.confidence
    if candidate.sensitivity is not None:  # written only when set: older readers take the rest
        data["sensitivity"] = candidate.sensitivity
    return data


def _mention_to_json(mention: EntityMention) -> dict[str, Any]:
    data: dict[str, Any] = {"kind": mention.kind, "text": mention.text, "role": mention.role}
    if mention.entity_id is not None:
        data["entity_id"] = mention.entity_id
    return data


def output_from_json(data: object, *, summary_required: bool = True) -> ExtractionOutput:
    """Parse and check an EXTRACTION_SCHEMA object; raise ExtractionOutputError naming the
    first problem. The check is done here too because a recorded file, or a client that
    does not validate, never went through the schema. ``summary_required=False`` accepts
    the empty summary a stored stage holds when the secret screen withheld it."""
    obj = _object(data, "output", required=("candidates", "summary"))
    raw_candidates = obj["candidates"]
    if not isinstance(raw_candidates, list):
        raise ExtractionOutputError("candidates must be a list")
    candidates = [candidate_from_json(c, f"candidates[{i}]") for i, c in enumerate(raw_candidates)]
    summ = _object(obj["summary"], "summary", required=("content", "decisions", "entity_mentions"))
    decisions = summ["decisions"]
    if not isinstance(decisions, list) or not all(isinstance(d, str) for d in decisions):
        raise ExtractionOutputError("summary.decisions must be a list of strings")
    withheld = not summary_required and summ["content"] == ""
    summary = SessionSummary(
        content="" if withheld else _text(summ, "content", "summary"),
        decisions=list(decisions),
        entity_mentions=_mentions(summ["entity_mentions"], "summary.entity_mentions"),
    )
    return ExtractionOutput(candidates=candidates, summary=summary)


def candidate_from_json(data: object, where: str = "candidate") -> CandidateRecord:
    """Parse one EXTRACTION_SCHEMA candidate object; raise ExtractionOutputError."""
    obj = _object(data, where, required=tuple(_CANDIDATE_SCHEMA["required"]), optional=("sensitivity",))
    kind = _choice(obj, "type", RECORD_TYPES, where)
    source_kind = _choice(obj, "source_kind", CANDIDATE_SOURCE_KINDS, where)
    attribute = obj["attribute"]
    if attribute is not None and not isinstance(attribute, str):
        raise ExtractionOutputError(f"{where}.attribute must be a string or null")
    turn = obj["evidence_turn"]
    if isinstance(turn, bool) or not isinstance(turn, int) or turn < 1:
        raise ExtractionOutputError(f"{where}.evidence_turn must be an integer >= 1")
    confidence = obj["confidence"]
    if isinstance(confidence, bool) or not isinstance(confidence, int | float) or not 0 <= confidence <= 1:
        raise ExtractionOutputError(f"{where}.confidence must be a number from 0 to 1")
    dates = {name: parse_moment(obj[name], f"{where}.{name}") for name in TEMPORAL_FIELDS}
    return CandidateRecord(
        type=kind,  # type: ignore[arg-type]  # checked by _choice
        content=_text(obj, "content", where),
        attribute=(attribute.strip() or None) if attribute is not None else None,
        source_kind=source_kind,  # type: ignore[arg-type]  # checked by _choice
        evidence=_text(obj, "evidence", where, strip=False),
        evidence_turn=turn,
        entity_mentions=_mentions(obj["entity_mentions"], f"{where}.entity_mentions"),
        event_at=dates["event_at"],
        valid_from=dates["valid_from"],
        valid_until=dates["valid_until"],
        review_at=dates["review_at"],
        confidence=float(confidence),
        sensitivity=_label(obj.get("sensitivity")),
    )


def _label(value: object) -> str | None:
    """A candidate's sensitivity label, None when absent (an answer or recording made
    before labels were asked for) or not a name: a bad label never costs the extraction."""
    return value.strip() if isinstance(value, str) and value.strip() else None


def parse_moment(value: object, where: str) -> datetime | None:
    """An ISO 8601 date-time (or null) as an aware UTC datetime; a value without an
    offset is read as UTC. Raises ExtractionOutputError for anything else."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ExtractionOutputError(f"{where} must be an ISO 8601 date-time or null")
    try:
        return from_iso(value.strip())
    except ValueError as exc:
        raise ExtractionOutputError(f"{where} is not an ISO 8601 date-time: {value!r}") from exc


def _object(
    data: object, where: str, *, required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> Mapping[str, Any]:
    """``data`` as an object with every required key and no unknown one (the schema's
    ``additionalProperties: false``, checked here for answers that skipped validation)."""
    if not isinstance(data, Mapping):
        raise ExtractionOutputError(f"{where} must be an object")
    missing = [k for k in required if k not in data]
    if missing:
        raise ExtractionOutputError(f"{where} is missing {', '.join(missing)}")
    extra = sorted(str(k) for k in data if k not in required and k not in optional)
    if extra:
        raise ExtractionOutputError(f"{where} has unknown fields {', '.join(extra)}")
    return data


def _text(obj: Mapping[str, Any], key: str, where: str, *, strip: bool = True) -> str:
    value = obj[key]
    if not isinstance(value, str) or not value.strip():
        raise ExtractionOutputError(f"{where}.{key} must be a non-empty string")
    # The evidence quote is kept byte for byte: the validator looks for it verbatim.
    return value.strip() if strip else value


def _choice(obj: Mapping[str, Any], key: str, allowed: tuple[str, ...], where: str) -> str:
    value = obj[key]
    if value not in allowed:
        raise ExtractionOutputError(f"{where}.{key} must be one of {', '.join(allowed)}, got {value!r}")
    return str(value)


def _mentions(data: object, where: str) -> list[EntityMention]:
    if not isinstance(data, list):
        raise ExtractionOutputError(f"{where} must be a list")
    mentions = []
    for i, item in enumerate(data):
        at = f"{where}[{i}]"
        obj = _object(item, at, required=("kind", "text", "role"), optional=("entity_id",))
        entity_id = obj.get("entity_id")
        if entity_id is not None and (not isinstance(entity_id, str) or not entity_id.strip()):
            raise ExtractionOutputError(f"{at}.entity_id must be a non-empty string or null")
        mentions.append(
            EntityMention(
                kind=_choice(obj, "kind", ENTITY_KINDS, at),  # type: ignore[arg-type]
                text=_text(obj, "text", at),
                role=_choice(obj, "role", MENTION_ROLES, at),  # type: ignore[arg-type]
                entity_id=entity_id,
            )
        )
    return mentions


def _clip(text: str, limit: int) -> str:
    """Keep a summary within ``summary_max_chars``: cut at the last sentence end
    that fits when that keeps most of the text, otherwise at the limit."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    end = max(head.rfind(". "), head.rfind("! "), head.rfind("? "))
    if end + 1 >= limit // 2:
        return head[: end + 1]
    return head.rstrip()
