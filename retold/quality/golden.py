"""The golden-set file: questions a deployment's agents asked, with what answers them.

A golden set is JSON Lines, one object per line with its keys sorted, so a label changes
one line of a diff. The first line is the header::

    {"created_at": "...", "format": "retold-golden", "frozen": null, "source": "...",
     "tenant": "default", "version": 1}

and every other line one item: the logged search it came from (``search_id``), the scope
and stratum it was sampled in, the ``principal`` to ask it as (agent, user, project), the
``question`` (the queries as logged), the logged request's ``filters`` and ``trigger``, the
``candidates`` the search returned (each with a short snapshot of its text and evidence, so a
person can label without the store), and the label: ``expected`` record ids, or
``nothing_stored`` when nothing stored answers it, an optional expected ``answer`` text, and
``labelled``. docs/operations.md, "Tracking quality per release", describes each key.

Freezing records the SHA-256 of the item lines (:func:`content_hash`) in the header. A
frozen file whose items no longer hash to it is refused when read, and a frozen file takes
no new label: results are only comparable between runs of the same items.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, cast

from retold.clock import from_iso, to_iso
from retold.errors import GoldenSetError
from retold.models import Principal, Scope

__all__ = [
    "FORMAT", "VERSION", "Filters", "Frozen", "GoldenFile", "GoldenHeader", "GoldenItem", "GoldenSet",
    "Snapshot", "Who", "content_hash", "freeze", "label", "read_golden", "write_golden",
]

FORMAT = "retold-golden"
VERSION = 1

_HEADER_KEYS = frozenset({"format", "version", "tenant", "created_at", "source", "frozen"})
_ITEM_KEYS = frozenset({"id", "search_id", "scope", "stratum", "principal", "question", "filters",
                        "trigger", "candidates", "expected", "nothing_stored", "answer", "labelled"})
_CANDIDATE_KEYS = frozenset({"id", "rank", "type", "status", "scope", "text", "evidence"})
_FILTER_KEYS = ("types", "entities", "since", "until", "include_history", "as_of")


@dataclass(frozen=True)
class Frozen:
    """When a set was frozen and the hash of its items then."""

    sha256: str
    at: str


@dataclass(frozen=True)
class GoldenHeader:
    """The first line: what the file is, whose traffic it holds and whether it is frozen."""

    tenant: str
    created_at: str
    source: str
    frozen: Frozen | None = None
    format: str = FORMAT
    version: int = VERSION


@dataclass(frozen=True)
class Who:
    """Whom an item's question is asked as: the logged search's agent and user, and the
    project its session named (what made a project scope readable without a membership)."""

    agent_id: str
    user_id: str
    project_id: str | None = None

    def principal(self, session_id: str | None = None) -> Principal:
        return Principal(self.agent_id, self.user_id, session_id, self.project_id)


@dataclass(frozen=True)
class Filters:
    """The logged request's narrowing, asked again as it was (only what it set is written)."""

    types: tuple[str, ...] | None = None
    entities: tuple[str, ...] | None = None
    since: str | None = None
    until: str | None = None
    include_history: bool = False
    as_of: str | None = None

    def moment(self, name: Literal["since", "until", "as_of"]) -> datetime | None:
        value = getattr(self, name)
        return None if value is None else from_iso(value)


@dataclass(frozen=True)
class Snapshot:
    """A candidate record as it stood when the set was captured: what a labeller reads.

    ``rank`` is where the logged search returned it (1 first); None for a record a
    labeller named that the search did not return."""

    id: str
    rank: int | None
    type: str
    status: str
    scope: str
    text: str
    evidence: str | None


@dataclass(frozen=True)
class GoldenItem:
    """One question with its label."""

    id: str
    search_id: str
    scope: str
    stratum: str
    principal: Who
    question: tuple[str, ...]
    filters: Filters = field(default_factory=Filters)
    trigger: Literal["tool", "host"] = "tool"
    candidates: tuple[Snapshot, ...] = ()
    expected: tuple[str, ...] = ()
    nothing_stored: bool = False
    answer: str | None = None
    labelled: bool = False

    @property
    def answerable(self) -> bool:
        """Labelled with at least one expected record."""
        return self.labelled and not self.nothing_stored


@dataclass(frozen=True)
class GoldenSet:
    """A header and its items, in file order."""

    header: GoldenHeader
    items: tuple[GoldenItem, ...]

    def item(self, item_id: str) -> GoldenItem:
        for item in self.items:
            if item.id == item_id:
                return item
        span = f"{self.items[0].id} to {self.items[-1].id}" if self.items else "none"
        raise GoldenSetError(f"no item {item_id} in this golden set (items {span})")

    @property
    def labelled(self) -> list[GoldenItem]:
        return [item for item in self.items if item.labelled]

    def content_hash(self) -> str:
        return content_hash(self.items)

    def refuse_if_frozen(self) -> None:
        """A GoldenSetError when the set is frozen: its labels no longer change."""
        if self.header.frozen is not None:
            raise GoldenSetError(f"the set is frozen (sha256 {self.header.frozen.sha256[:12]}): its labels no"
                                 " longer change; label a copy that is not frozen, then freeze that")


# -- lines ---------------------------------------------------------------------------------


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _filters_data(filters: Filters) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for name in _FILTER_KEYS:
        value = getattr(filters, name)
        if value is None or value is False:
            continue
        data[name] = list(value) if isinstance(value, tuple) else value
    return data


def _item_data(item: GoldenItem) -> dict[str, Any]:
    return {
        "id": item.id, "search_id": item.search_id, "scope": item.scope, "stratum": item.stratum,
        "principal": {"agent_id": item.principal.agent_id, "user_id": item.principal.user_id,
                      "project_id": item.principal.project_id},
        "question": list(item.question), "filters": _filters_data(item.filters), "trigger": item.trigger,
        "candidates": [{"id": c.id, "rank": c.rank, "type": c.type, "status": c.status, "scope": c.scope,
                        "text": c.text, "evidence": c.evidence} for c in item.candidates],
        "expected": list(item.expected), "nothing_stored": item.nothing_stored, "answer": item.answer,
        "labelled": item.labelled,
    }


def _header_data(header: GoldenHeader) -> dict[str, Any]:
    frozen = None if header.frozen is None else {"sha256": header.frozen.sha256, "at": header.frozen.at}
    return {"format": header.format, "version": header.version, "tenant": header.tenant,
            "created_at": header.created_at, "source": header.source, "frozen": frozen}


def content_hash(items: Iterable[GoldenItem]) -> str:
    """The SHA-256 of the item lines as written (keys sorted, one item a line): what
    freezing records and what a report names its set by."""
    digest = hashlib.sha256()
    for item in items:
        digest.update(_dumps(_item_data(item)).encode("utf-8") + b"\n")
    return digest.hexdigest()


def write_golden(path: str | Path, golden: GoldenSet) -> None:
    """Write the set whole: to a file beside ``path``, renamed over it when complete, so a
    failed write never leaves half a set."""
    target = Path(path)
    partial = target.with_name(target.name + ".partial")
    lines = [_dumps(_header_data(golden.header)), *(_dumps(_item_data(item)) for item in golden.items)]
    try:
        partial.write_text("\n".join(lines) + "\n", encoding="utf-8")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def read_golden(path: str | Path) -> GoldenSet:
    """The set in ``path``; a GoldenSetError (one line, naming the file and line) when it
    is not a golden set, or when it is frozen and its items no longer match the hash."""
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise GoldenSetError(f"no golden set at {source}") from None
    except UnicodeDecodeError:
        raise GoldenSetError(f"{source} is not a golden set: it is not UTF-8 text") from None
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise GoldenSetError(f"{source} is empty, not a golden set")
    header = _header(source, *lines[0])
    items: list[GoldenItem] = []
    seen: set[str] = set()
    for number, line in lines[1:]:
        item = _item(source, number, line)
        if item.id in seen:
            raise GoldenSetError(f"{source} line {number}: item id {item.id} is used twice")
        seen.add(item.id)
        items.append(item)
    golden = GoldenSet(header, tuple(items))
    if header.frozen is not None and golden.content_hash() != header.frozen.sha256:
        raise GoldenSetError(
            f"{source} was frozen with sha256 {header.frozen.sha256[:12]} but its items now hash to"
            f" {golden.content_hash()[:12]}: it was changed after freezing; restore it, or label a new set")
    return golden


def _json(source: Path, number: int, line: str) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        raise GoldenSetError(f"{source} line {number}: not JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise GoldenSetError(f"{source} line {number}: not a JSON object")
    return value


def _keys(source: Path, number: int, data: dict[str, Any], keys: frozenset[str], what: str) -> None:
    missing, unknown = sorted(keys - set(data)), sorted(set(data) - keys)
    if missing or unknown:
        parts = ([f"lacks {', '.join(missing)}"] if missing else []) + (
            [f"has unknown {', '.join(unknown)}"] if unknown else [])
        raise GoldenSetError(f"{source} line {number}: {what} {' and '.join(parts)}")


def _header(source: Path, number: int, line: str) -> GoldenHeader:
    data = _json(source, number, line)
    if data.get("format") != FORMAT:
        raise GoldenSetError(f"{source} is not a golden set: its first line has no \"format\": \"{FORMAT}\"")
    if data.get("version") != VERSION:
        raise GoldenSetError(f"{source} is golden-set format version {data.get('version')!r}; this Retold"
                             f" reads version {VERSION}")
    _keys(source, number, data, _HEADER_KEYS, "the header")
    frozen = data["frozen"]
    if frozen is not None:
        if not (isinstance(frozen, dict) and set(frozen) == {"sha256", "at"}
                and all(isinstance(v, str) for v in frozen.values())):
            raise GoldenSetError(f"{source} line {number}: frozen must be null or {{\"sha256\", \"at\"}}")
        frozen = Frozen(frozen["sha256"], frozen["at"])
    for name in ("tenant", "created_at", "source"):
        if not isinstance(data[name], str):
            raise GoldenSetError(f"{source} line {number}: {name} must be a string")
    return GoldenHeader(data["tenant"], data["created_at"], data["source"], frozen)


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) and v for v in value)


def _item(source: Path, number: int, line: str) -> GoldenItem:
    data = _json(source, number, line)
    _keys(source, number, data, _ITEM_KEYS, "the item")

    def bad(why: str) -> GoldenSetError:
        return GoldenSetError(f"{source} line {number}: item {data.get('id')!r}: {why}")

    for name in ("id", "search_id", "scope", "stratum"):
        if not isinstance(data[name], str) or not data[name]:
            raise bad(f"{name} must be a non-empty string")
    try:
        Scope.parse(data["scope"])
    except ValueError as exc:
        raise bad(str(exc)) from None
    who = data["principal"]
    if not (isinstance(who, dict) and set(who) == {"agent_id", "user_id", "project_id"}
            and isinstance(who["agent_id"], str) and isinstance(who["user_id"], str)
            and (who["project_id"] is None or isinstance(who["project_id"], str))):
        raise bad("principal must be {\"agent_id\", \"user_id\", \"project_id\"}")
    try:
        who_value = Who(who["agent_id"], who["user_id"], who["project_id"])
        who_value.principal()
    except ValueError as exc:
        raise bad(f"principal: {exc}") from None
    if not _strings(data["question"]) or not data["question"]:
        raise bad("question must be a list of one or more query strings")
    if data["trigger"] not in ("tool", "host"):
        raise bad("trigger must be tool or host")
    if not _strings(data["expected"]):
        raise bad("expected must be a list of record ids")
    for name in ("nothing_stored", "labelled"):
        if not isinstance(data[name], bool):
            raise bad(f"{name} must be true or false")
    if data["answer"] is not None and not isinstance(data["answer"], str):
        raise bad("answer must be a string or null")
    expected, nothing, labelled = data["expected"], data["nothing_stored"], data["labelled"]
    if labelled and nothing and expected:
        raise bad("nothing_stored with expected records: it is one or the other")
    if labelled and not nothing and not expected:
        raise bad("labelled without expected records or nothing_stored")
    if not labelled and (expected or nothing or data["answer"] is not None):
        raise bad("a label (expected, nothing_stored or answer) on an item marked labelled: false")
    return GoldenItem(
        id=data["id"], search_id=data["search_id"], scope=data["scope"], stratum=data["stratum"],
        principal=who_value, question=tuple(data["question"]), filters=_filters(data["filters"], bad),
        trigger=cast(Literal["tool", "host"], data["trigger"]),
        candidates=tuple(_candidate(c, bad) for c in _list(data["candidates"], "candidates", bad)),
        expected=tuple(expected), nothing_stored=nothing, answer=data["answer"], labelled=labelled,
    )


def _list(value: Any, name: str, bad: Any) -> list[Any]:
    if not isinstance(value, list):
        raise bad(f"{name} must be a list")
    return value


def _filters(value: Any, bad: Any) -> Filters:
    if not isinstance(value, dict) or set(value) - set(_FILTER_KEYS):
        raise bad(f"filters must be an object with only {', '.join(_FILTER_KEYS)}")
    for name in ("types", "entities"):
        if name in value and not _strings(value[name]):
            raise bad(f"filters.{name} must be a list of strings")
    for name in ("since", "until", "as_of"):
        if name in value:
            try:
                from_iso(value[name])
            except (TypeError, ValueError, AttributeError):
                raise bad(f"filters.{name} must be an ISO 8601 time") from None
    if not isinstance(value.get("include_history", False), bool):
        raise bad("filters.include_history must be true or false")
    return Filters(
        types=tuple(value["types"]) if "types" in value else None,
        entities=tuple(value["entities"]) if "entities" in value else None,
        since=value.get("since"), until=value.get("until"),
        include_history=value.get("include_history", False), as_of=value.get("as_of"))


def _candidate(value: Any, bad: Any) -> Snapshot:
    if not isinstance(value, dict) or set(value) != _CANDIDATE_KEYS:
        raise bad(f"each candidate must have exactly {', '.join(sorted(_CANDIDATE_KEYS))}")
    if not all(isinstance(value[k], str) for k in ("id", "type", "status", "scope", "text")):
        raise bad("a candidate's id, type, status, scope and text must be strings")
    if value["rank"] is not None and not (isinstance(value["rank"], int) and value["rank"] >= 1):
        raise bad("a candidate's rank must be a whole number from 1, or null")
    if value["evidence"] is not None and not isinstance(value["evidence"], str):
        raise bad("a candidate's evidence must be a string or null")
    return Snapshot(value["id"], value["rank"], value["type"], value["status"], value["scope"],
                    value["text"], value["evidence"])


# -- changes -------------------------------------------------------------------------------


def label(golden: GoldenSet, item_id: str, *, expected: Sequence[str] = (), nothing_stored: bool = False,
          answer: str | None = None, added: Sequence[Snapshot] = ()) -> GoldenSet:
    """The set with one item labelled: the records that answer it (``expected``), or
    ``nothing_stored``; ``answer`` is the expected answer text, if any. ``added`` are
    snapshots of expected records the logged search did not return, kept beside its
    candidates so the file shows what each label names. Refused on a frozen set."""
    golden.refuse_if_frozen()
    if bool(expected) == nothing_stored:
        raise GoldenSetError("a label names the expected records or says nothing stored answers it, not both"
                             " and not neither")
    if answer is not None and not answer.strip():
        raise GoldenSetError("an expected answer must not be blank")
    item = golden.item(item_id)
    known = {c.id for c in item.candidates}
    candidates = item.candidates + tuple(s for s in added if s.id not in known)
    named = {c.id for c in candidates}
    missing = [rid for rid in expected if rid not in named]
    if missing:
        raise GoldenSetError(f"item {item_id}: {', '.join(missing)} is not among its candidates")
    changed = replace(item, candidates=candidates, expected=tuple(dict.fromkeys(expected)),
                      nothing_stored=nothing_stored, answer=answer, labelled=True)
    return replace(golden, items=tuple(changed if i.id == item_id else i for i in golden.items))


def freeze(golden: GoldenSet, at: datetime, *, drop_unlabelled: bool = False) -> GoldenSet:
    """The set frozen at ``at`` with the hash of its items. Every item must be labelled,
    unless ``drop_unlabelled`` leaves the rest out; an already frozen set is refused."""
    if golden.header.frozen is not None:
        raise GoldenSetError(f"the set is already frozen (sha256 {golden.header.frozen.sha256[:12]})")
    unlabelled = [item.id for item in golden.items if not item.labelled]
    if unlabelled and not drop_unlabelled:
        shown = ", ".join(unlabelled[:5]) + (", ..." if len(unlabelled) > 5 else "")
        raise GoldenSetError(f"{len(unlabelled)} items are not labelled ({shown}); label them, or freeze with"
                             " --drop-unlabelled to leave them out")
    items = tuple(item for item in golden.items if item.labelled)
    if not items:
        raise GoldenSetError("no item is labelled: there is nothing to freeze")
    header = replace(golden.header, frozen=Frozen(content_hash(items), to_iso(at)))
    return GoldenSet(header, items)


class GoldenFile:
    """One golden-set file that several requests label (the inspector's labelling page):
    each change reads the file, changes it and writes it whole under one lock, so two
    people labelling at once never lose each other's labels."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def read(self) -> GoldenSet:
        return read_golden(self.path)

    def label(self, item_id: str, *, expected: Sequence[str] = (), nothing_stored: bool = False,
              answer: str | None = None) -> GoldenSet:
        """:func:`label` on the file as it is now, written back."""
        with self._lock:
            golden = label(read_golden(self.path), item_id, expected=expected, nothing_stored=nothing_stored,
                           answer=answer)
            write_golden(self.path, golden)
            return golden

    def freeze(self, at: datetime) -> GoldenSet:
        """:func:`freeze` on the file as it is now, written back."""
        with self._lock:
            golden = freeze(read_golden(self.path), at)
            write_golden(self.path, golden)
            return golden
