"""Age-based retention of the logs that quote user text: ``search_log`` rows and the turn
decisions that restate the same questions go, and old audit events keep their row but lose
every payload key that could hold text.

The sweeps work in bounded batches, each its own short write transaction, so agents
writing at the same time wait for one batch at most. The caller turns on
``secure_delete`` and truncates the WAL afterwards, so the removed text does not linger
in freed pages (docs/decisions.md, "Retention of search logs and event payloads").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from retold.clock import from_iso, to_iso
from retold.store.base import NewEvent, StoreBase

__all__ = ["KEPT_EVENT_KEYS", "RetentionMixin", "Swept", "kept_payload"]

BATCH_ROWS = 1000
"""Rows one retention transaction deletes or rewrites."""

RETAINED_MARK = "retention_days"
"""The key a thinned payload carries: its text went after this many days."""

KEPT_EVENT_KEYS = frozenset({
    # What the store itself looks events up by: erasure finds a user's or a session's
    # events through these, and the reinforcement rule counts ``source_ref``/``counted``.
    "user_id", "session_id", "session", "from", "to", "source_ref", "counted",
    # Other ids, outcomes and counts: the audit trail without anybody's words.
    "agent_id", "record_id", "entity_id", "source_id", "target_id", "by", "restates",
    "supersedes_id", "conflict_with", "merged", "merged_into", "superseded_on_arrival_by", "also_superseded",
    "records", "records_rewritten", "sessions", "scope", "origin_scope", "outcome", "kind",
    "status", "previous_status", "source_kind", "requested_source_kind", "stage",
    "persisted_stages", "counts", "rejection_reasons", "turns", "manual", "manual_revision",
    "read", "write", "revoked", "created", "confirmed", "replayed", "model", "version", "dims",
    "embedded", "dropped", "batches", "mode", "rows", "before", "days", "stages", "retain_days",
    "hosted",  # an extraction run's answered calls and tokens per stage
    "replaced", "pack_key", "promoted_from", "evidence_refs",  # what a memory pack rule did
    RETAINED_MARK,
})
"""Payload keys that carry ids, outcomes or counts, never text a user or agent wrote.
Everything else (quotes, reasons, names, candidates, messages) goes with age, and so
does any key a later event kind adds until it is listed here."""

# The watermark: events before the last run's cutoff were thinned already.
_LAST_CUTOFF = (
    "SELECT max(json_extract(payload, '$.before')) FROM events WHERE kind = 'events.payloads_thinned'"
)


@dataclass(frozen=True)
class Swept:
    """One retention sweep over a log: how many rows it changed, and its audit event."""

    rows: int
    event_id: str | None  # None when nothing was old enough, so nothing was logged


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _plain(value: Any) -> bool:
    """True for a value that cannot hide free text under a kept key: a scalar, a list of
    scalars, or a mapping of names to numbers (counts)."""
    if isinstance(value, list):
        return all(_scalar(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(v, int | float) and not isinstance(v, bool) for v in value.values())
    return _scalar(value)


def kept_payload(payload: dict[str, Any], days: int) -> dict[str, Any]:
    """What an event keeps of ``payload`` after ``days``: the kept keys with plain values,
    marked with the age that thinned it (an empty payload, as erasure leaves it, stays empty)."""
    if not payload:
        return {}
    kept = {k: v for k, v in payload.items() if k in KEPT_EVENT_KEYS and _plain(v)}
    kept[RETAINED_MARK] = kept.get(RETAINED_MARK, days)
    return kept


class RetentionMixin(StoreBase):
    """The retention sweeps over ``search_log``, ``turn_decisions`` and ``events``."""

    def prune_search_log(self, before: datetime, actor: str, days: int) -> Swept:
        """Delete every ``search_log`` row of a search that began before ``before``, in
        batches; one ``search_log.pruned`` event when any went."""
        deleted = self._delete_before("search_log", before)
        if not deleted:
            return Swept(0, None)
        return Swept(deleted, self.append_event(
            "search_log.pruned", actor, {"rows": deleted, "before": to_iso(before), "days": days}))

    def prune_turn_decisions(self, before: datetime) -> int:
        """Delete every turn decision made before ``before``, in batches; how many went."""
        return self._delete_before("turn_decisions", before)

    def _delete_before(self, table: str, before: datetime) -> int:
        """Delete ``table``'s rows stamped (``at``) before ``before``, a batch per
        transaction so no writer waits behind one long delete."""
        cutoff, deleted = to_iso(before), 0
        while True:
            with self.atomic() as conn:
                gone = conn.execute(
                    f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table} WHERE at < ?"
                    " ORDER BY at LIMIT ?)", (cutoff, BATCH_ROWS)).rowcount
            deleted += gone
            if gone < BATCH_ROWS:
                return deleted

    def thin_event_payloads(self, before: datetime, actor: str, days: int) -> Swept:
        """Reduce the payload of every event stamped before ``before`` to
        :func:`kept_payload`, in batches; rows, kinds, actors and ids stay. Starts a day
        before the previous run's cutoff (another process's clock may stamp a little
        late), so a re-run only reads what is new. One ``events.payloads_thinned`` event
        when any payload changed; its ``before`` is the next run's starting point."""
        cutoff = to_iso(before)
        with self._lock:
            last = self._conn.execute(_LAST_CUTOFF).fetchone()[0]
        start = to_iso(from_iso(last) - timedelta(days=1)) if last else ""
        changed, cursor = 0, ""
        while True:
            with self.atomic() as conn:
                rows = conn.execute(
                    "SELECT id, payload FROM events WHERE id > ? AND at >= ? AND at < ?"
                    " ORDER BY id LIMIT ?", (cursor, start, cutoff, BATCH_ROWS)).fetchall()
                updates = []
                for event_id, text in rows:
                    payload = json.loads(text)
                    kept = kept_payload(payload, days)
                    if kept != payload:
                        updates.append((json.dumps(kept, sort_keys=True), event_id))
                conn.executemany("UPDATE events SET payload = ? WHERE id = ?", updates)
            changed += len(updates)
            if len(rows) < BATCH_ROWS:
                break
            cursor = rows[-1][0]
        if not changed:
            return Swept(0, None)
        with self.atomic() as conn:
            event_id = self._insert_event(conn, NewEvent(
                "events.payloads_thinned", actor, {"rows": changed, "before": cutoff, "days": days}))
        return Swept(changed, event_id)

    def truncate_wal(self) -> bool:
        """Checkpoint the WAL into the file and truncate it, so frames holding removed
        text leave the disk; False when another connection kept it from completing."""
        with self._lock:
            busy = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        return int(busy) == 0
