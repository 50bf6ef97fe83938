"""Operations: the maintenance the runtime never does on its own.

What the ``retold`` CLI and the Celery maintenance tasks call: expiry, retention (of
transcripts, search logs, turn decisions and event payloads), capacity, hygiene and the
backfill (in :mod:`retold.curation`), the extraction audit's weekly sample, export and
import, erasure with compaction, resumable re-embedding refused under a gate fitted for
another model, snapshots, due-review flags, unmapped legacy rows, re-applying a changed
memory pack, and the debugging reads ``search``, ``get`` and ``dump``. Each returns a
small typed result. Nothing here imports torch: only ``reembed``, ``apply_pack`` and
``search`` embed.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast

from retold.clock import Clock
from retold.config import Config
from retold.config.pack import MemoryPack, RecordClass, pack_for_config
from retold.curation import BackfillResult, CapacityResult, Curation, HygieneReport
from retold.errors import RetoldError, StoreError, StoreLockedError
from retold.index.embedder import Embedder, embedder_from_config
from retold.index.vector import VectorIndex
from retold.models import ACTIVE_STATUSES, RECORD_TYPES, Principal, Record, Scope, SearchRequest
from retold.pack_apply import PackApplyResult, apply_pack
from retold.plain import to_plain
from retold.policy.sensitivity import SensitivityRules
from retold.portable.exporter import ExportResult, export_scope
from retold.portable.importer import Importer, ImportResult
from retold.quality.audit import AuditSample, sample_for_audit
from retold.retrieve.search_log import SearchLogWriter
from retold.store import EmbeddingFamily, Store
from retold.store.erasure import Erasure
from retold.store.integrity import IntegrityReport, check_file
from retold.store.location import check_store_at
from retold.store.sweeps import MigrationIssue

if TYPE_CHECKING:
    from retold.retrieve.retriever import SearchOutcome

    Search = Callable[[Principal, SearchRequest], SearchOutcome]

__all__ = ["EraseResult", "MigrateResult", "OperationError", "Operations", "RecordDetail", "ReembedResult",
           "RetentionResult", "SearchReport", "SnapshotResult"]

TEMPORAL_REVIEWER = "temporal_reviewer"  # the actor of record.review_due events
_SQLITE_MAGIC = b"SQLite format 3\x00"


class OperationError(RetoldError):
    """A maintenance operation was refused or its target does not exist; nothing changed."""


@dataclass(frozen=True)
class EraseResult:
    """What one ``erase`` removed: ids and counts, never the erased text."""

    target: str  # record | session | user
    target_id: str
    record_ids: list[str]
    counts: dict[str, int]
    event_id: str
    compacted: bool  # False: another connection kept the WAL from being truncated


@dataclass(frozen=True)
class ReembedResult:
    """One ``reembed`` run: counts and timing, as logged in ``store.reembedded``."""

    model: str
    version: str
    embedded: int
    dropped: int
    batches: int
    seconds: float
    records_per_second: float
    event_id: str
    resumed: int = 0  # records an earlier, stopped run to this family had already embedded


@dataclass(frozen=True)
class RetentionResult:
    """One ``retain`` run: what each sweep removed, as counts."""

    sessions_blanked: int
    search_logs_deleted: int
    event_payloads_thinned: int
    turn_decisions_deleted: int
    forgotten_erased: int  # forgotten records past lifecycle.restore_days, erased for good
    wal_truncated: bool  # False: another connection kept the WAL from being truncated



@dataclass(frozen=True)
class SnapshotResult:
    """A saved or loaded snapshot: its path, size and the records it holds."""

    path: str
    bytes: int
    records: int


@dataclass(frozen=True)
class MigrateResult:
    """``retold migrate``: the schema state and the legacy rows needing review."""

    version: int
    applied: tuple[int, ...]
    issues: list[MigrationIssue]  # as found, before any --expire-unmapped
    expired: list[str]
    unresolved: int
    acknowledged: bool
    notes: tuple[str, ...] = ()  # what the migrations applied on opening want said


@dataclass(frozen=True)
class RecordDetail:
    """``retold get``: a record with its supersession lineage, conflicts and events."""

    record: Record
    lineage: list[Record]  # the supersession chain through the record, oldest first
    conflicts: list[str]
    events: list[dict[str, Any]]


@dataclass(frozen=True)
class SearchReport:
    """``retold search``: the retrieval outcome and the search_log row it wrote."""

    outcome: SearchOutcome
    log: dict[str, Any] = field(default_factory=dict)


def _fitted(gate: object) -> dict[str, Any] | None:
    """The fitted part of a gate block (weights, bias, thresholds), without the model name."""
    if not isinstance(gate, dict):
        return None
    return {k: v for k, v in gate.items() if k != "calibrated_for"}


class Operations:
    """Maintenance over one store, this process's vector index and the configuration.

    ``search`` runs a retrieval (the runtime passes its retriever's, built on first use,
    so commands that never search never build it); ``search_log`` is the writer its rows
    go through, flushed before a row is read back and before an erase.
    """

    def __init__(self, store: Store, index: VectorIndex, embedder: Embedder, config: Config,
                 clock: Clock, search: Search, *, search_log: SearchLogWriter | None = None,
                 sensitivity: SensitivityRules | None = None, pack: MemoryPack | None = None) -> None:
        self.store, self.index, self.embedder = store, index, embedder
        self.config, self.clock, self._search = config, clock, search
        self._search_log = search_log
        self.sensitivity = sensitivity or SensitivityRules()  # imports classify and mask too
        # How long each record class is kept: the pack the runtime hands over, else the
        # built-in pack under this config.
        self.pack = pack or pack_for_config(config)

    # -- lifecycle sweeps -------------------------------------------------------------------

    def expire(self, actor: str = "admin") -> int:
        """Mark every active record past ``expires_at`` expired, and every one older than
        its type's ``retention_days`` in the memory pack, one ``record.status`` event
        each; returns how many changed."""
        now = self.clock.now()
        rows = self.store.expire_past(now, actor)
        for record_type in RECORD_TYPES:
            days = self.pack.classes.of(cast(RecordClass, record_type)).retention_days
            if days is not None:
                rows += self.store.expire_older(record_type, now - timedelta(days=days), actor, days)
        for row in rows:
            # Expired rows keep their vectors for include_history; this process already
            # holds the change, so refresh must not count it as another process's.
            self.index.acknowledge(row.record_id, row.index_version)
        return len(rows)

    def retain(self, actor: str = "admin") -> RetentionResult:
        """Remove user text past its age: blank the transcripts of extracted sessions
        that ended more than ``sessions.retain_days`` ago (an unextracted session is never
        blanked: its facts are not out yet), delete ``search_log`` rows and turn decisions
        older than ``retention.search_log_days``, thin event payloads older than
        ``retention.event_payload_days`` to ids, outcomes and counts, erase records forgotten
        more than ``lifecycle.restore_days`` ago. A re-run changes nothing."""
        now, kept = self.clock.now(), self.config.retention
        # The pack's raw retention is sessions.retain_days unless a pack file sets it;
        # null there keeps transcripts for ever.
        days = self.pack.classes.raw.retention_days
        self._flush_search_log()  # a queued row of an old search lands before the prune
        # Freed cells are zeroed as they go, and the truncated WAL keeps no old frame.
        self.store.set_secure_delete(True)
        try:
            blanked = ([] if days is None else
                       self.store.blank_retained_sessions(now - timedelta(days=days), actor, days))
            logs = self.store.prune_search_log(
                now - timedelta(days=kept.search_log_days), actor, kept.search_log_days)
            decisions = self.store.prune_turn_decisions(now - timedelta(days=kept.search_log_days))
            events = self.store.thin_event_payloads(
                now - timedelta(days=kept.event_payload_days), actor, kept.event_payload_days)
            forgotten = self._erase_forgotten(now, actor)
        finally:
            self.store.set_secure_delete(False)
        return RetentionResult(len(blanked), logs.rows, events.rows, decisions, forgotten,
                               self.store.truncate_wal())

    def _erase_forgotten(self, now: datetime, actor: str) -> int:
        """Erase every forgotten record whose restore window has closed, as ``retold
        erase --record`` would: a forget is undoable for a while, never for ever."""
        days = self.config.lifecycle.restore_days
        due = self.store.forgotten_before(now - timedelta(days=days))
        for record_id in due:
            erasure = self.store.erase_record(record_id, actor, f"restore window of {days} days closed")
            self.index.remove(record_id, erasure.index_version)
        if due:
            self.store.compact()  # as after `retold erase`: no residue of the text anywhere
        return len(due)

    def _curation(self) -> Curation:
        return Curation(self.store, self.index, self.embedder, self.config, self.clock,
                        self._flush_search_log)

    def capacity(self, actor: str = "admin", *, apply: bool = True) -> list[CapacityResult]:
        """Archive what keeps each scope over its cap (:meth:`Curation.capacity`)."""
        return self._curation().capacity(actor, apply=apply)

    def hygiene(self, scope: Scope, actor: str = "admin", *, apply: bool = False) -> HygieneReport:
        """A scope's duplicates, stale and unused records (:meth:`Curation.hygiene`)."""
        return self._curation().hygiene(scope, actor, apply=apply)

    def hygiene_shares(self) -> dict[str, tuple[float, float]]:
        """(duplicate share, stale share) of every scope holding live records."""
        return self._curation().hygiene_shares()

    def backfill(self, max_batches: int = 50) -> BackfillResult:
        """Embed records stored without their vector (:meth:`Curation.backfill`)."""
        return self._curation().backfill(max_batches)

    # -- export and import ---------------------------------------------------------------------

    def export(self, scope: Scope, out: TextIO, *, include_history: bool = False,
               include_events: bool = False) -> ExportResult:
        """Write one scope as an export file (:mod:`retold.portable`) to ``out``."""
        return export_scope(self.store, scope, out, self.clock, include_history=include_history,
                            include_events=include_events)

    def import_lines(self, lines: Iterable[str], principal: Principal, *, into: Scope | None = None,
                     confirm: bool = False, actor: str = "admin",
                     progress: Callable[[int, int], None] | None = None,
                     from_tenant: str | None = None) -> ImportResult:
        """Import an export file as ``principal`` would write it; see
        :class:`retold.portable.importer.Importer`."""
        importer = Importer(self.store, self.index, self.embedder, self.config, self.clock,
                            sensitivity=self.sensitivity)
        return importer.run(lines, principal, into=into, confirm=confirm, actor=actor, progress=progress,
                            from_tenant=from_tenant)

    def audit_sample(self, actor: str = "admin") -> AuditSample:
        """Sample the records extraction wrote in the past week into the audit queue, at
        the memory pack's ``write_policy.review_sample_rate`` (:mod:`retold.quality.audit`)."""
        return sample_for_audit(self.store, self.pack.write_policy.review_sample_rate, self.clock.now(),
                                actor=actor)

    def review_due(self, actor: str = TEMPORAL_REVIEWER) -> int:
        """Flag one bounded batch of records whose ``review_at`` has arrived; returns how
        many this caller claimed.

        Content and status never change: the passage of time is not evidence that a
        planned thing happened, so a due record is only flagged for a reviewer.
        """
        limit = self.config.ingestion.temporal_review_batch_size
        return len(self.store.claim_due_reviews(self.clock.now(), limit, actor))

    # -- erasure ---------------------------------------------------------------------------------

    def erase_record(self, record_id: str, reason: str, actor: str = "admin") -> EraseResult:
        """Irreversibly erase one record's text, evidence, tags, vector, FTS row and
        links; the tombstone row stays."""
        return self._erase(lambda: self.store.erase_record(record_id, actor, _reason(reason),
                                                           cascade=self._cascade))

    def erase_session(self, session_id: str, reason: str, actor: str = "admin") -> EraseResult:
        """Irreversibly blank one session's transcript (turn rows stay) and the evidence
        quotes taken from it."""
        return self._erase(lambda: self.store.erase_session(session_id, actor, _reason(reason),
                                                            cascade=self._cascade))

    @property
    def _cascade(self) -> bool:
        """Whether the tenant's pack erases what was derived from an erased record too
        (``governance.erasure``); a forget erased by ``retain`` never cascades: nobody asked
        for more than the one record to go."""
        return self.pack.governance.erasure == "cascade_to_derived"

    def erase_user(self, user_id: str, reason: str, actor: str = "admin") -> EraseResult:
        """Irreversibly erase every place a user's text can reach."""
        return self._erase(lambda: self.store.erase_user(user_id, actor, _reason(reason)))

    def _erase(self, run: Callable[[], Erasure]) -> EraseResult:
        # Rows this process queued before the erase land first, so the erase removes them;
        # a row still late is refused by the store (Store.insert_search_logs).
        self._flush_search_log()
        # secure_delete zeroes freed cells as the erase writes; VACUUM afterwards rebuilds
        # the file and the truncating checkpoint empties the WAL: no residue anywhere.
        self.store.set_secure_delete(True)
        try:
            try:
                erasure = run()
            except StoreError as exc:
                raise OperationError(str(exc)) from exc
            for record_id in erasure.record_ids:
                self.index.remove(record_id, erasure.index_version)
            for record_id in erasure.evidence_cleared:  # vector unchanged; already applied here
                if erasure.index_version is not None:
                    self.index.acknowledge(record_id, erasure.index_version)
            compacted = self.store.compact()
        finally:
            self.store.set_secure_delete(False)
        return EraseResult(erasure.target, erasure.target_id, list(erasure.record_ids),
                           dict(erasure.counts), erasure.event_id, compacted)

    # -- memory pack -----------------------------------------------------------------------------

    def apply_pack(self, *, apply: bool, actor: str = "admin") -> PackApplyResult:
        """Re-classify and re-mask every stored record under the tenant's current pack
        (:func:`retold.pack_apply.apply_pack`); without ``apply`` only count."""
        return apply_pack(self.store, self.embedder, self.sensitivity, apply=apply, actor=actor)

    # -- re-embedding --------------------------------------------------------------------------------

    def check_reembed(self, model: str, version: str, dims: int | None = None) -> None:
        """Raise OperationError when the latest logged search ran under another embedding
        model with the gate values the configuration still carries: nobody fitted the gate
        for the new model, whose cosines sit elsewhere. A new version of the same model
        keeps its gate, so a version bump is allowed; so is any re-embed before the first
        logged search, and one to the model ``retrieval.gate.calibrated_for`` names."""
        self._flush_search_log()  # this process's latest search may still be queued
        latest = self.store.latest_search_flags()
        if latest is None:
            return
        _, flags = latest
        logged_model, logged_version = flags.get("embedding_model"), flags.get("embedding_version")
        gate = self.config.retrieval.gate
        if model in (logged_model, gate.calibrated_for):
            return  # the same model, or a gate the config says was fitted for the new one
        if _fitted(flags.get("gate")) == _fitted(to_plain(gate)):
            width = dims or self.config.embedding.dims  # what reembed would use
            raise OperationError(
                f"refusing to re-embed with {model} version {version}: the latest search ran under "
                f"{logged_model} version {logged_version} with the gate the config still carries; "
                f"fit retrieval.gate for the new model first: run `python -m benchmarks.fit_gate "
                f"--config <a config with embedding.model {model}, version {version}, dims {width}>`, "
                f"set retrieval.gate to the values it reports and retrieval.gate.calibrated_for to "
                f"{model}, then run reembed again"
            )

    def reembed(
        self,
        model: str,
        version: str,
        *,
        dims: int | None = None,
        progress: Callable[[int, int], None] | None = None,
        actor: str = "admin",
    ) -> ReembedResult:
        """Embed every record with text under ``model``/``version`` in batches of
        ``embedding.reembed_batch_size``, then swap: the new vectors replace the live
        ones, every other vector goes, the new family becomes the store's, and one
        ``store.reembedded`` event is appended. ``progress(done, total)`` is called
        before the first batch and after each one.

        Batches are staged apart from the live vectors, so searches keep their full
        dense channel until the swap, and a run that stopped part-way (a killed worker)
        resumes: records already staged for this family are not embedded again.
        """
        if not model.strip() or not version.strip():
            raise OperationError("reembed needs a non-empty model and version")
        self.check_reembed(model, version, dims)
        embedder = self._embedder(model, version, dims)
        family = EmbeddingFamily(embedder.name, embedder.version, embedder.dims)
        batch_size = self.config.embedding.reembed_batch_size
        before = self.store.embedding_versions()
        discarded = self.store.discard_staged(family)
        resumed = self.store.staged_vectors(family)
        started = time.perf_counter()
        embedded = batches = 0
        dropped: int | None = None
        while dropped is None:
            total = max(self.store.count_embeddable(), resumed + embedded)
            if progress:
                progress(resumed + embedded, total)
            last_seq = 0
            while rows := self.store.unstaged_after(last_seq, batch_size, family):
                # The model runs outside any transaction, so writers never wait on it.
                vectors = embedder.embed_documents([content for _, _, content in rows])
                self.store.stage_vectors([(rid, vectors[i]) for i, (_, rid, _) in enumerate(rows)], family)
                last_seq = rows[-1][0]
                embedded += len(rows)
                batches += 1
                if progress:
                    progress(resumed + embedded, max(total, resumed + embedded))
            # The swap makes the store's recorded family this one, so a runtime still
            # configured for the old family refuses to start. None: a record arrived after
            # its batch was read; embed it and try again.
            dropped = self.store.swap_staged(family)
        seconds = time.perf_counter() - started
        rate = embedded / seconds if seconds > 0 else 0.0
        event_id = self.store.append_event("store.reembedded", actor, {
            "model": embedder.name, "version": embedder.version, "dims": embedder.dims,
            "embedded": embedded, "resumed": resumed, "discarded": discarded, "dropped": dropped,
            "batches": batches, "batch_size": batch_size, "seconds": round(seconds, 3),
            "records_per_second": round(rate, 1),
            "before": [{"model": m, "version": v, "vectors": n} for m, v, n in before],
        })
        return ReembedResult(embedder.name, embedder.version, embedded, dropped, batches,
                             seconds, rate, event_id, resumed)

    def _embedder(self, model: str, version: str, dims: int | None) -> Embedder:
        current = self.embedder
        if (current.name, current.version) == (model, version) and dims in (None, current.dims):
            return current  # the runtime's own embedder: load the model once
        cfg = dataclasses.replace(self.config.embedding, model=model, version=version,
                                  dims=dims or self.config.embedding.dims)
        return embedder_from_config(cfg)

    # -- snapshots -------------------------------------------------------------------------------------

    def snapshot_save(self, path: str | Path) -> SnapshotResult:
        """Copy the whole store to a new file (SQLite backup API); refuses an existing file."""
        target = Path(path)
        if target.exists():
            raise OperationError(f"{target} already exists; choose a new snapshot path")
        if not target.parent.is_dir():
            raise OperationError(f"no directory {target.parent} for the snapshot")
        self.store.backup_to(target)
        return SnapshotResult(str(target), target.stat().st_size, self.store.count_records())

    def check(self, *, quick: bool = True) -> IntegrityReport | None:
        """This store's integrity check, as ``retold check`` runs it; None in memory. It
        marks a damaged SQLite store, so every process stops writing to it."""
        if self.store.path == ":memory:":
            return None
        wait = self.store.busy_timeout_seconds
        return check_store_at(self.config.store.target, quick=quick, busy_timeout=wait)

    def snapshot_load(self, path: str | Path) -> SnapshotResult:
        """Replace the store's content with a snapshot that passes the full integrity
        check. The host must be stopped: the file changes under every other open connection."""
        source = Path(path)
        if not source.is_file():
            raise OperationError(f"no snapshot file {source}")
        if Path(self.store.path) != Path(":memory:") and source.resolve() == Path(self.store.path).resolve():
            raise OperationError(f"{source} is the store itself")
        with source.open("rb") as handle:
            if handle.read(16) != _SQLITE_MAGIC:
                raise OperationError(f"{source} is not a SQLite database")
        try:
            # Checked before the store is touched: a damaged copy must never replace it.
            report = check_file(source, busy_timeout=self.store.busy_timeout_seconds)
            if not report.ok:
                raise OperationError(f"{source} fails its integrity check ({report.summary()}); the "
                                     f"store was not changed (details: retold check --store {source})")
            self.store.restore_from(source)
        except StoreLockedError:
            raise  # retrying later can succeed, so it keeps its own exit code
        except StoreError as exc:
            raise OperationError(str(exc)) from exc
        if self.index.is_loaded:  # the projection described the replaced content
            self.index.load(self.store)
        return SnapshotResult(str(source), source.stat().st_size, self.store.count_records())

    # -- migrations ------------------------------------------------------------------------------------

    def migrate(
        self, *, expire_unmapped: bool = False, allow_unmapped: bool = False, actor: str = "admin"
    ) -> MigrateResult:
        """Report the schema state and the unmapped legacy rows; ``expire_unmapped``
        retires them (status expired, one ``record.status`` event each) and
        ``allow_unmapped`` acknowledges the rest with one audit event."""
        report = self.store.migration_report or self.store.migrate()
        issues = self.store.migration_issues()
        expired = []
        if expire_unmapped and issues:
            expired = [row.record_id for row in self.store.expire_unmapped(actor)]
        unresolved = len(self.store.migration_issues())
        acknowledged = allow_unmapped and unresolved > 0
        if acknowledged:
            self.store.append_event("migration.acknowledged", actor, {
                "unresolved": unresolved, "record_ids": [i.record_id for i in issues]})
        return MigrateResult(report.version, report.applied, issues, expired, unresolved, acknowledged,
                             report.notes)

    # -- debugging reads --------------------------------------------------------------------------------

    def dump(self, scope: Scope) -> list[Record]:
        """Active (provisional or confirmed) records in one scope, oldest first; a store whose
        scope index disagrees with its table raises StoreCorruptError instead."""
        return self.store.scope_records(scope, ACTIVE_STATUSES)

    def get(self, record_id: str) -> RecordDetail:
        """A full record with lineage, conflicts and events; OperationError when missing."""
        record = self.store.get_record(record_id)
        if record is None:
            raise OperationError(f"no record {record_id}")
        chain = self.store.lineage_ids(record_id)
        by_id = {r.id: r for r in self.store.records(chain)}
        return RecordDetail(record, [by_id[i] for i in chain if i in by_id],
                            self.store.conflicts_of(record_id), self.store.events(record_id=record_id))

    def search(
        self, agent_id: str, user_id: str, query: str, *, project_id: str | None = None,
        k: int | None = None, as_of: datetime | None = None,
    ) -> SearchReport:
        """Run retrieval as ``agent_id`` for ``user_id`` (what was valid at ``as_of``, when
        given) and return it with its log row."""
        if not query.strip():
            raise OperationError("the search query is empty")
        try:
            principal = Principal(agent_id, user_id, None, project_id)
        except ValueError as exc:
            raise OperationError(str(exc)) from exc
        outcome = self._search(principal, SearchRequest(queries=[query], k=k, as_of=as_of))
        self._flush_search_log()  # the row is written off the search path
        return SearchReport(outcome, self.store.search_log_row(outcome.response.search_id) or {})

    def _flush_search_log(self) -> None:
        if self._search_log is not None:
            self._search_log.flush()


def _reason(reason: str) -> str:
    if not reason or not reason.strip():
        raise OperationError("an erase needs a reason (--reason)")
    return reason.strip()
