"""A scope's memory as an export file, streamed a page at a time.

Live records always go; ``include_history`` adds superseded and expired ones, so the
supersession chains arrive whole; forgotten records never go (forget means no tool shows
it, and an export is read by tools elsewhere). The entities they link go first, so an
importer can resolve each one before a record needs it; records go in the order they were
written, so a record's predecessor always comes before it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TextIO

from retold.clock import Clock
from retold.models import ACTIVE_STATUSES, Scope
from retold.portable.lines import dumps, entity_line, header_line, record_line
from retold.store import Store

__all__ = ["ExportResult", "export_scope"]

HISTORY_STATUSES = ("superseded", "expired")
PAGE = 500  # records per read: memory stays flat whatever the scope's size


@dataclass(frozen=True)
class ExportResult:
    scope: Scope
    records: int
    entities: int
    events: int
    vectors: int
    seconds: float


def export_scope(store: Store, scope: Scope, out: TextIO, clock: Clock, *, include_history: bool = False,
                 include_events: bool = False) -> ExportResult:
    """Write ``scope`` to ``out`` as export lines; returns the counts written."""
    started = time.perf_counter()
    statuses = ACTIVE_STATUSES + (HISTORY_STATUSES if include_history else ())
    since = store.records_version()  # what the closing check compares the rows read with
    family = store.embedding_family()
    entity_ids = store.portable_entity_ids(scope, statuses)
    entities = [e for e in (store.get_entity(i) for i in entity_ids) if e is not None]
    counts = {"entities": len(entities), "records": store.portable_count(scope, statuses)}
    out.write(dumps(header_line(scope, family, counts, include_history=include_history,
                                include_events=include_events, at=clock.now(), tenant=store.tenant)) + "\n")
    for entity in entities:
        out.write(dumps(entity_line(entity)) + "\n")
    records = vectors = events = 0
    after = 0
    while page := store.portable_page(scope, statuses, after, PAGE, family):
        for record in page:
            out.write(dumps(record_line(record)) + "\n")
            vectors += record.vector is not None
        records += len(page)
        after = page[-1].seq
        if include_events:
            for event in store.portable_events([r.columns["id"] for r in page]):
                out.write(dumps({"line": "event", **event}) + "\n")
                events += 1
    store.portable_agrees(scope, statuses, after, written=records,
                          since_version=since)  # refuse what a damaged index left out
    return ExportResult(scope, records, len(entities), events, vectors, time.perf_counter() - started)
