"""Curation: keeping what a store holds useful, scope by scope.

Capacity (archive what keeps a scope over ``lifecycle.max_active_per_scope``), hygiene
(duplicate clusters, stale and unused records) and the embedding backfill (vectors for
records a write stored without one). The CLI and the Celery tasks reach it through
:class:`retold.operations.Operations`; the choices themselves are the pure rules of
:mod:`retold.policy.capacity` and :mod:`retold.policy.hygiene`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from retold.clock import Clock
from retold.config import Config
from retold.index.embedder import Embedder
from retold.index.vector import VectorIndex
from retold.models import SCOPE_KINDS, Scope
from retold.policy.capacity import Archival, choose_archivals
from retold.policy.hygiene import Cluster, duplicate_clusters, stale_provisional, unused
from retold.store import Store

__all__ = ["BackfillResult", "CapacityResult", "Curation", "HygieneReport"]


@dataclass(frozen=True)
class CapacityResult:
    """One scope over its cap: how many live records it held, what was (or, without
    apply, would be) archived, and how many stay over because they are protected."""

    scope: Scope
    live: int
    cap: int
    archived: list[Archival]
    applied: bool

    @property
    def still_over(self) -> int:
        """Records left over the cap: pins and attributes' current values are never archived."""
        return max(0, self.live - len(self.archived) - self.cap)


@dataclass(frozen=True)
class BackfillResult:
    """One backfill run: vectors written, records still waiting, and the encoder's error
    when it stopped the run."""

    embedded: int
    pending: int
    error: str | None = None


@dataclass(frozen=True)
class HygieneReport:
    """``retold hygiene`` on one scope: its duplicate clusters and the records reported as
    stale (provisional, never confirmed or used) and unused."""

    scope: Scope
    live: int
    clusters: list[Cluster]
    stale_provisional: list[str]
    unused: list[str]
    applied: bool
    merged: int = 0  # records archived into their cluster's kept record (with apply)

    @property
    def duplicate_share(self) -> float:
        """Live records that only repeat another, as a share of the scope's live records."""
        return sum(len(c.merge) for c in self.clusters) / self.live if self.live else 0.0

    @property
    def stale_share(self) -> float:
        return len(self.stale_provisional) / self.live if self.live else 0.0


class Curation:
    """Capacity, hygiene and the backfill over one store and this process's index.

    ``flush_search_log`` lands queued search-log rows first: a search that just returned
    a record counts as its use.
    """

    def __init__(self, store: Store, index: VectorIndex, embedder: Embedder, config: Config, clock: Clock,
                 flush_search_log: Callable[[], None]) -> None:
        self.store, self.index, self.embedder = store, index, embedder
        self.config, self.clock, self._flush_search_log = config, clock, flush_search_log

    def capacity(self, actor: str = "admin", *, apply: bool = True) -> list[CapacityResult]:
        """Bring every scope over ``lifecycle.max_active_per_scope`` back to its cap by
        archiving its lowest-scoring live records (:mod:`retold.policy.capacity`), one
        ``record.archived`` event each with the score's parts. Without ``apply`` it only
        reports what it would archive. Scopes within their cap are not read."""
        caps, now = self.config.lifecycle.max_active_per_scope, self.clock.now()
        ranks = dataclasses.asdict(self.config.policy.source_rank)
        used: dict[str, datetime] | None = None
        out = []
        for kind in SCOPE_KINDS:
            cap = getattr(caps, kind)
            if cap is None:
                continue
            for scope_id, live in sorted(self.store.live_counts(kind).items()):
                if live <= cap:
                    continue
                scope = Scope(kind, scope_id)  # type: ignore[arg-type]
                if used is None:  # read once, and only when some scope is over
                    used = self._last_uses()
                chosen = choose_archivals(self.store.capacity_rows(scope, used), cap, now, ranks)
                if apply:
                    payloads = [(a.row.record_id, {"reason": "over capacity", "scope": str(scope),
                                                   "cap": cap, "score": a.parts.as_dict()}) for a in chosen]
                    changed = self.store.archive(payloads, actor)
                    for row in changed:  # as for expiry: the vector stays, for include_history
                        self.index.acknowledge(row.record_id, row.index_version)
                    kept = {row.record_id for row in changed}
                    chosen = [a for a in chosen if a.row.record_id in kept]
                out.append(CapacityResult(scope, live, cap, chosen, apply))
        return out

    def hygiene(self, scope: Scope, actor: str = "admin", *, apply: bool = False) -> HygieneReport:
        """Find ``scope``'s duplicate clusters, stale provisional and unused records
        (:mod:`retold.policy.hygiene`); with ``apply``, fold each cluster into its kept
        record (:meth:`Store.merge_duplicates`). Stale and unused records are only
        reported: the expiry sweep and capacity already retire records by age and use."""
        return self._hygiene(scope, actor, apply, self._last_uses())

    def _last_uses(self) -> dict[str, datetime]:
        self._flush_search_log()  # a search that just returned a record counts as its use
        return self.store.last_uses(self.clock.now() - timedelta(days=self.config.retention.search_log_days))

    def _hygiene(self, scope: Scope, actor: str, apply: bool, used: dict[str, datetime]) -> HygieneReport:
        now, life = self.clock.now(), self.config.lifecycle
        rows = self.store.capacity_rows(scope, used)
        texts = self.store.live_texts(scope)
        family = self.store.embedding_family()
        vectors = {} if family is None else self.store.live_vectors(scope, family)
        conflicts = self.store.conflict_pairs([r.record_id for r in rows])
        clusters = duplicate_clusters(rows, texts, vectors, conflicts, life.duplicate_cosine, now,
                                      dataclasses.asdict(self.config.policy.source_rank))
        merged = 0
        if apply:
            for cluster in clusters:
                changed = self.store.merge_duplicates(cluster.keep, cluster.merge, actor,
                                                      f"duplicate ({cluster.reason})")
                for row in changed:  # the kept one reinforced, the others history: vectors stay
                    self.index.acknowledge(row.record_id, row.index_version)
                merged += max(0, len(changed) - 1)
        return HygieneReport(scope, len(rows), clusters,
                             stale_provisional(rows, now, life.stale_provisional_days),
                             unused(rows, now, life.unused_days), apply, merged)

    def hygiene_shares(self) -> dict[str, tuple[float, float]]:
        """(duplicate share, stale share) of every scope holding live records."""
        out, used = {}, self._last_uses()
        for kind in SCOPE_KINDS:
            for scope_id in sorted(self.store.live_counts(kind)):
                report = self._hygiene(Scope(kind, scope_id), "admin", False, used)  # type: ignore[arg-type]
                out[str(report.scope)] = (report.duplicate_share, report.stale_share)
        return out

    def backfill(self, max_batches: int = 50) -> BackfillResult:
        """Embed records stored without their vector, ``embedding.reembed_batch_size`` at a
        time, at most ``max_batches`` batches per call (the beat task runs every few
        minutes). An encoder that fails stops the run; the records stay pending."""
        size = self.config.embedding.reembed_batch_size
        embedded, error = 0, None
        for _ in range(max_batches):
            batch = self.store.pending_batch(size)
            if not batch:
                break
            try:
                vectors = self.embedder.embed_documents([content for _, content in batch])
            except Exception as exc:  # noqa: BLE001 - report it; the records wait for the next run
                error = f"{type(exc).__name__}: {exc}"
                break
            rows = [(record_id, vector) for (record_id, _), vector in zip(batch, vectors, strict=True)]
            version = self.store.fill_pending(rows, self.embedder.name, self.embedder.version)
            if self.index.is_loaded:  # an index not loaded yet reads them on first use
                for record_id, vector in rows:
                    self.index.upsert(record_id, vector, version)
            embedded += len(rows)
        return BackfillResult(embedded, self.store.pending_count(), error)
