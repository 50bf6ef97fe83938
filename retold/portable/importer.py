"""An export file back into a store, through the checks a tool write passes.

The importer acts as one principal: the file's scope (or ``into``) must be writable by
it, as for ``memory_write``; every record's content, evidence and every entity name is
screened for credentials; entities are resolved against the target store by their
aliases in the scopes the principal reads (one match is used, several refuse the line,
none creates the entity in the target scope); vectors come from the file when its
embedding family is the store's, and are computed again otherwise.

What it does not repeat is the write path's decision: an export already holds its
decisions (supersession chains, conflicts, statuses), and deciding each record again
against the ones imported before it would rewrite them. So records keep their lineage,
source kind, times and the extractor's sensitivity label; their class and masked text come
from the importing tenant's pack. Live records land ``provisional`` (the importing store
has not seen the file's evidence) unless ``confirm`` says the operator vouches for the
file, as when moving a store; a review or ``memory_revise`` confirm does it later. Each
record's ``record.imported`` event names its origin.

A record keeps its id when it lands in the scope it came from, and gets an id derived from
the target scope and its old id otherwise, so importing the same file twice finds every
record already there and changes nothing. A line that fails (malformed, a credential, a
link to an entity that failed) is reported with its number and nothing of it is written;
the other lines still land.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, get_args

import numpy as np

from retold.clock import Clock, from_iso
from retold.config import Config
from retold.config.pack import is_class_name
from retold.index.embedder import Embedder
from retold.index.vector import VectorIndex
from retold.models import (
    ACTIVE_STATUSES,
    ENTITY_KINDS,
    RECORD_TYPES,
    Principal,
    Record,
    Scope,
    SourceKind,
)
from retold.names import normalize_alias, normalize_canonical
from retold.policy.grants import can_write, readable_scopes
from retold.policy.secrets import screen
from retold.policy.sensitivity import SensitivityRules
from retold.portable.lines import ExportHeader, ImportRefused, decode_vector, read_header
from retold.store import Embedding, NewEvent, Store
from retold.store.family import EmbeddingFamily
from retold.store.pins import PinRefusedError

__all__ = ["ImportResult", "Importer", "LineFailure"]

BATCH = 256  # records embedded and written together
_IMPORTABLE_STATUSES = ("provisional", "confirmed", "superseded", "expired")
_SOURCE_KINDS = get_args(SourceKind)
# The namespace of the ids a record gets when it moves to another scope.
_ID_SPACE = uuid.UUID("5f1d3c2e-8a47-4b8e-9c1d-7e2a6b0f4d31")
Progress = Callable[[int, int], None]


class LineRefused(ValueError):
    """One line cannot be imported; the message says why."""


@dataclass(frozen=True)
class LineFailure:
    line: int
    reason: str


@dataclass
class ImportResult:
    scope: Scope
    created: int = 0
    unchanged: int = 0
    entities_created: int = 0
    entities_matched: int = 0
    embedded: int = 0  # vectors computed here (the file's family differs, or it had none)
    events_skipped: int = 0
    notes: list[str] = field(default_factory=list)
    failed: list[LineFailure] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class _Pending:
    line: int
    record: Record
    links: list[tuple[str, str]]
    vector: np.ndarray | None
    activation: dict[str, Any] | None
    pinned: bool
    origin: dict[str, Any]


class Importer:
    """Imports export files into one store for one principal."""

    def __init__(self, store: Store, index: VectorIndex, embedder: Embedder, config: Config,
                 clock: Clock, *, sensitivity: SensitivityRules | None = None) -> None:
        self.store, self.index, self.embedder = store, index, embedder
        self.config, self.clock = config, clock
        self.sensitivity = sensitivity or SensitivityRules()

    def run(self, lines: Iterable[str], principal: Principal, *, into: Scope | None = None,
            confirm: bool = False, actor: str = "admin", progress: Progress | None = None,
            from_tenant: str | None = None) -> ImportResult:
        """Import every line; raises ImportRefused (nothing written) when the file or the
        target scope is refused as a whole. A file exported from another tenant is refused
        unless ``from_tenant`` names that tenant: moving one customer's memory into another's
        namespace is a decision someone makes on purpose, never what a mistyped flag does."""
        started = time.perf_counter()
        numbered = iter(enumerate(lines, start=1))
        first = next(numbered, None)
        if first is None:
            raise ImportRefused("the file is empty; nothing was imported")
        header = read_header(first[1])
        if header.tenant is not None and header.tenant != self.store.tenant and header.tenant != from_tenant:
            raise ImportRefused(f"the file was exported from tenant {header.tenant}, not {self.store.tenant};"
                                f" name it with --from-tenant {header.tenant} to import it here; nothing was"
                                " imported")
        target = into or header.scope
        if not can_write(self.store, principal, target):
            raise ImportRefused(f"agent {principal.agent_id} for user {principal.user_id} may not write"
                                f" {target};"
                                " grant it first (retold grant); nothing was imported")
        run = _Run(self, header, target, principal, confirm, actor, progress)
        for number, text in numbered:
            if not text.strip():
                continue
            try:
                run.line(number, text)
            except LineRefused as exc:
                run.result.failed.append(LineFailure(number, str(exc)))
        run.flush()
        run.link_conflicts()
        run.result.seconds = time.perf_counter() - started
        return run.result


class _Run:
    """The state of one import: id maps, the batch being built, the result so far."""

    def __init__(self, importer: Importer, header: ExportHeader, target: Scope, principal: Principal,
                 confirm: bool, actor: str, progress: Progress | None) -> None:
        self.i, self.header, self.target = importer, header, target
        self.principal, self.confirm, self.actor, self.progress = principal, confirm, actor, progress
        self.result = ImportResult(target)
        embedder = importer.embedder
        own = EmbeddingFamily(embedder.name, embedder.version, embedder.dims)
        self.family = own
        self.file_vectors = header.family == own
        self.readable = readable_scopes(importer.store, principal)
        self.entities: dict[str, str] = {}  # file id -> target id
        self.failed_entities: dict[str, int] = {}  # file id -> its line
        self.records: dict[str, str] = {}  # file id -> target id, for lines that landed or were there
        self.conflicts: set[tuple[str, str]] = set()
        self.batch: list[_Pending] = []
        self.total = header.counts.get("records", 0)
        self.done = 0

    # -- lines -------------------------------------------------------------------------------

    def line(self, number: int, text: str) -> None:
        try:
            obj = json.loads(text)
        except ValueError as exc:
            raise LineRefused(f"not JSON ({exc.args[0]})") from None
        if not isinstance(obj, dict):
            raise LineRefused("not a JSON object")
        kind = obj.get("line")
        try:
            if kind == "entity":
                self.entity(number, obj)
            elif kind == "record":
                self.record(number, obj)
            elif kind == "event":
                self.result.events_skipped += 1  # the exporting store's audit; this import writes its own
            else:
                raise LineRefused(f"unknown line kind {kind!r}")
        except LineRefused:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise LineRefused(f"malformed {kind} line: {type(exc).__name__} {exc}") from None

    def entity(self, number: int, obj: dict[str, Any]) -> None:
        file_id, kind = str(obj["id"]), str(obj["kind"])
        canonical = normalize_canonical(str(obj["canonical"]))
        try:
            if kind not in ENTITY_KINDS:
                raise LineRefused(f"unknown entity kind {kind!r}")
            aliases = sorted({normalize_alias(str(a)) for a in obj["aliases"]} - {""})
            if not canonical or not aliases:
                raise LineRefused("an entity needs a name and at least one alias")
            if found := screen(canonical=canonical, aliases=" ".join(aliases)):
                raise LineRefused(f"secret_detected: {found.message}")
        except LineRefused:
            self.failed_entities[file_id] = number
            raise
        store = self.i.store
        matches = store.entities_by_aliases(aliases, scopes=self.readable, kinds=[kind])
        hits = {e.id for entities in matches.values() for e in entities}
        if len(hits) > 1:
            self.failed_entities[file_id] = number
            raise LineRefused(f"entity {file_id} ({canonical}) matches {len(hits)} entities here by its"
                              " aliases;"
                              " merge them first")
        if hits:
            self.entities[file_id] = hits.pop()
            self.result.entities_matched += 1
            return
        scope = Scope.parse(str(obj.get("scope", self.target)))
        if scope != self.target and not can_write(store, self.principal, scope):
            scope = self.target
        status = "confirmed" if obj.get("status") == "confirmed" else "provisional"
        with store.atomic():
            keep = file_id if store.get_entity(file_id) is None else None
            entity = store.create_entity(kind, canonical, scope, status=status, entity_id=keep)
            for alias in aliases:
                store.add_alias(entity.id, alias)
            store.append_event("entity.created", self.actor, {
                "kind": kind, "canonical": canonical, "scope": str(scope), "status": status,
                "imported_from": str(self.header.scope), "origin_id": file_id}, entity_id=entity.id)
        self.entities[file_id] = entity.id
        self.result.entities_created += 1

    def _entity_id(self, file_id: str) -> str:
        if file_id in self.entities:
            return self.entities[file_id]
        if file_id in self.failed_entities:
            raise LineRefused(f"links entity {file_id}, whose line {self.failed_entities[file_id]} failed")
        raise LineRefused(f"links entity {file_id}, which the file does not hold")

    def record(self, number: int, obj: dict[str, Any]) -> None:
        file_id, status = str(obj["id"]), str(obj["status"])
        if obj["type"] not in RECORD_TYPES:
            raise LineRefused(f"unknown record type {obj['type']!r}")
        if status not in _IMPORTABLE_STATUSES:
            raise LineRefused(f"status {status!r} cannot be imported")
        if obj["source_kind"] not in _SOURCE_KINDS:
            raise LineRefused(f"unknown source kind {obj['source_kind']!r}")
        content = str(obj["content"])
        if not content.strip():
            raise LineRefused("empty content")
        tags = [str(t) for t in obj["tags"]]
        if found := screen(content=content, evidence=obj.get("evidence"), tags=" ".join(tags)):
            raise LineRefused(f"secret_detected: {found.message}")
        links = [(self._entity_id(str(e)), str(role)) for e, role in obj["links"]]
        about = obj.get("subject_entity_id")
        subject_entity = None if about is None else self._entity_id(str(about))
        subject = str(obj["subject"])
        if about is not None and subject.startswith(f"{about}/"):
            subject = f"{subject_entity}/{subject[len(about) + 1:]}"
        new_id = file_id if self.target == self.header.scope else str(
            uuid.uuid5(_ID_SPACE, f"{self.target}|{file_id}"))
        there = self.i.store.get_record(new_id)
        if there is not None:
            if there.scope != self.target:
                raise LineRefused(f"record id {new_id} is taken by a record of {there.scope}")
            self.records[file_id] = new_id
            self.conflicts.update(_pair(file_id, str(o)) for o in obj["conflicts"])
            self.result.unchanged += 1
            self._advance(1)
            return
        vector = None
        if self.file_vectors and obj.get("vector"):
            vector = decode_vector(str(obj["vector"]), self.family.dims)
        landed = "provisional" if status in ACTIVE_STATUSES and not self.confirm else status
        confidence = float(obj["confidence"])
        if not 0.0 <= confidence <= 1.0:
            raise LineRefused(f"confidence {confidence} is outside 0..1")
        label = obj.get("sensitivity_label")  # absent from files written before labels travelled
        if label is not None and not is_class_name(label):
            raise LineRefused(f"sensitivity_label {label!r} is not a sensitivity class name")
        record = Record(
            id=new_id, type=obj["type"], version=int(obj["version"]), content=content, subject=subject,
            subject_entity_id=subject_entity, attribute=obj.get("attribute"), scope=self.target,
            source_kind=obj["source_kind"], source_ref=obj.get("source_ref"),
            creator_agent_id=str(obj["creator_agent_id"]), evidence=obj.get("evidence"),
            created_at=from_iso(str(obj["created_at"])), event_at=from_iso(str(obj["event_at"])),
            expires_at=_time(obj.get("expires_at")), valid_from=_time(obj.get("valid_from")),
            valid_until=_time(obj.get("valid_until")), review_at=_time(obj.get("review_at")),
            review_flagged_at=_time(obj.get("review_flagged_at")), confidence=confidence,
            status=landed,  # type: ignore[arg-type]
            supersedes_id=obj.get("supersedes_id"), reinforcements=int(obj["reinforcements"]),
            last_reinforced_at=_time(obj.get("last_reinforced_at")),
            tags=tags, entity_ids=[e for e, _ in links], sensitivity_label=label,
        )
        # Classified by this tenant's pack, not the exporter's: the extractor's label is kept
        # as the file has it and decides only a class this pack declares as a label's. A
        # vector the file carries was made from text this pack may mask, so a masked record
        # is embedded here instead.
        if self.i.sensitivity.apply(record).redacted_content is not None:
            vector = None
        self.conflicts.update(_pair(file_id, str(o)) for o in obj["conflicts"])
        origin = {"origin_scope": str(self.header.scope), "origin_id": file_id, "origin_status": status,
                  "confirmed": self.confirm}
        activation = obj.get("activation")
        self.batch.append(_Pending(number, record, links, vector,
                                   activation if isinstance(activation, dict) else None,
                                   bool(obj.get("pinned")), origin))
        self.records[file_id] = new_id
        if len(self.batch) >= BATCH:
            self.flush()

    # -- writing -------------------------------------------------------------------------------

    def flush(self) -> None:
        batch, self.batch = self.batch, []
        if not batch:
            return
        missing = [p for p in batch if p.vector is None]
        if missing:
            vectors = self.i.embedder.embed_documents([p.record.indexed_content for p in missing])
            for pending, vector in zip(missing, vectors, strict=True):
                pending.vector = np.asarray(vector, dtype=np.float32)
            self.result.embedded += len(missing)
        store, written = self.i.store, []
        limit = self.i.config.lifecycle.max_pinned_per_scope
        with store.atomic():
            for p in batch:
                previous = p.record.supersedes_id
                if previous is not None:
                    # Its predecessor is in this store (imported before it, or already
                    # there); a chain the file cuts short starts at this record.
                    mapped = self.records.get(previous)
                    p.record.supersedes_id = mapped if mapped and store.get_record(mapped) else None
                try:
                    with store.atomic():
                        assert p.vector is not None
                        done = store.write_record(
                            p.record, links=p.links,
                            embedding=Embedding(self.family.model, self.family.version, p.vector),
                            event=self._imported(p))
                        if p.activation is not None:
                            store.set_activation(
                                p.record.id, p.activation["activation"], rule=str(p.activation["rule"]),
                                reason=str(p.activation["reason"]), category=p.activation.get("category"),
                                decided_by="import", event=NewEvent("record.activation", self.actor, {
                                    "activation": p.activation["activation"], "imported": True}, p.record.id))
                except Exception as exc:  # noqa: BLE001 - the line fails, the others still land
                    self.records.pop(str(p.origin["origin_id"]), None)
                    self.result.failed.append(LineFailure(p.line, f"not written: {exc}"))
                    continue
                if p.pinned and p.record.status in ACTIVE_STATUSES:
                    try:
                        store.pin(p.record.id, self.actor, "pinned where it was exported", limit)
                    except PinRefusedError as exc:
                        self.result.notes.append(f"line {p.line}: imported, not pinned: {exc}")
                written.append((p, done))
        if self.i.index.is_loaded:  # an index not loaded yet reads everything on first use
            for p, done in written:
                assert p.vector is not None
                self.i.index.upsert(p.record.id, p.vector, done.index_version, done.seq)
        self.result.created += len(written)
        self._advance(len(batch))

    def _imported(self, p: _Pending) -> Callable[[], NewEvent]:
        return lambda: NewEvent("record.imported", self.actor, p.origin, p.record.id)

    def link_conflicts(self) -> None:
        """Conflicts between records that both landed (or were already there)."""
        store = self.i.store
        for left, right in sorted(self.conflicts):
            a, b = self.records.get(left), self.records.get(right)
            if a and b and b not in store.conflicts_of(a):
                store.add_conflict(a, b)

    def _advance(self, n: int) -> None:
        self.done += n
        if self.progress is not None:
            self.progress(self.done, max(self.total, self.done))


def _pair(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a <= b else (b, a)


def _time(value: object) -> datetime | None:
    return None if value is None else from_iso(str(value))
