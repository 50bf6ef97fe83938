"""Irreversible erasure of a record, a session or a user, with compaction.

Ids, kinds and timestamps remain; every place the erased text can reach is blanked, and
the file is compacted afterwards (secure_delete, WAL checkpoint, VACUUM) so freed pages
and the WAL hold no residue.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from retold.errors import StoreError
from retold.store.activation import delete_activation_rows
from retold.store.base import NewEvent, StoreBase, chunks, marks
from retold.store.profiles import blank_profiles_of_records, blank_profiles_of_user

__all__ = ["Erasure", "ErasureMixin"]

# The private scopes of user U are agent:<agent>/<U>; agent ids never contain '/',
# so the text after the first '/' is the user.
_USER_SCOPES = (
    "((scope_kind = 'user' AND scope_id = ?1) OR (scope_kind = 'agent'"
    " AND instr(scope_id, '/') > 0 AND substr(scope_id, instr(scope_id, '/') + 1) = ?1))"
)
_BLANK = "UPDATE events SET payload = '{}' WHERE payload != '{}' AND "
# The session a 'session:<id>' or 'session:<id><turn:n>' source reference names.
_REF_SESSION = (
    "CASE WHEN instr({ref}, '<') > 0 THEN substr({ref}, 9, instr({ref}, '<') - 9)"
    " ELSE substr({ref}, 9) END"
)



@dataclass
class Erasure:
    """What one erase changed: ids and counts, never the erased text."""

    target: str  # record | session | user
    target_id: str
    record_ids: list[str] = field(default_factory=list)  # tombstoned and blanked
    evidence_cleared: list[str] = field(default_factory=list)  # content kept, quote removed
    index_version: int | None = None
    counts: dict[str, int] = field(default_factory=dict)
    event_id: str = ""


def _mode(cascade: bool) -> str:
    """The memory pack's ``governance.erasure`` value an erase ran under."""
    return "cascade_to_derived" if cascade else "record_only"


class ErasureMixin(StoreBase):
    """The three erase operations and the compaction that follows them."""

    # -- erasure ---------------------------------------------------------------------------------

    def erase_record(self, record_id: str, actor: str, reason: str, *, cascade: bool = False) -> Erasure:
        """Tombstone one record and remove its text, evidence, tags, embedding, FTS row,
        entity links, the stored profiles that quote it and its events' payloads; one
        ``record.erased`` event. ``cascade`` (a memory pack's ``governance.erasure:
        cascade_to_derived``) also erases what was derived from it: the session summaries
        of the sessions that stated or reinforced it, and the search-log rows that
        returned it or them."""
        with self.atomic() as conn:
            if cascade:
                self._exclude_search_log(conn)
            if conn.execute("SELECT 1 FROM records WHERE id = ?", (record_id,)).fetchone() is None:
                raise StoreError(f"no record {record_id}")
            result = Erasure("record", record_id)
            derived = self._summaries_restating(conn, [record_id]) if cascade else []
            self._erase_records(conn, [record_id, *derived], result)
            if cascade:
                self._erase_derived(conn, [record_id, *derived], derived, result)
            result.event_id = self._insert_event(conn, NewEvent("record.erased", actor, {
                "record_id": record_id, "reason": reason, "mode": _mode(cascade),
                "counts": result.counts}, record_id))
            return result

    def erase_session(self, session_id: str, actor: str, reason: str, *, cascade: bool = False) -> Erasure:
        """Blank a session's turns (rows kept), the evidence quotes of records sourced from
        it, its search logs and turn decisions and the payloads of events about it; one
        ``session.erased``. ``cascade`` also erases the session's summaries (derived from
        its transcript) and the search-log rows that returned them."""
        with self.atomic() as conn:
            self._exclude_search_log(conn)
            if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is None:
                raise StoreError(f"no session {session_id}")
            result = Erasure("session", session_id)
            sourced = self._erase_sessions(conn, [session_id], result)
            if cascade:
                summaries = [r[0] for r in conn.execute(
                    "SELECT id FROM records WHERE source_kind = 'session_summary' AND source_ref = ?"
                    " AND content != '' ORDER BY seq", (f"session:{session_id}",))]
                self._erase_records(conn, summaries, result)
                self._erase_derived(conn, summaries, summaries, result)
                sourced = [r for r in sourced if r not in summaries]
            if sourced:
                # The quote is transcript text; the claim itself stays (erase it with --record).
                version = self.bump_version(conn)
                result.index_version = version
                for chunk in chunks(sourced):
                    conn.execute(f"UPDATE records SET evidence = NULL, index_version = ? WHERE id IN"
                                 f" ({marks(chunk)})", [version, *chunk])
                result.evidence_cleared = sourced
            result.counts["evidence_cleared"] = len(sourced)
            result.event_id = self._insert_event(conn, NewEvent("session.erased", actor, {
                "session_id": session_id, "reason": reason, "mode": _mode(cascade),
                "counts": result.counts}))
            return result

    def erase_user(self, user_id: str, actor: str, reason: str) -> Erasure:
        """Erase every place a user's text can reach: their sessions, the records
        of ``user:<U>`` and every ``agent:*/<U>`` scope, records in any scope sourced from
        their sessions, their search logs and turn decisions, their scope memberships, the
        payloads of events about all of these, and the entities and aliases of their scopes.
        One ``user.erased`` event."""
        with self.atomic() as conn:
            self._exclude_search_log(conn)
            known = conn.execute(
                "SELECT EXISTS (SELECT 1 FROM sessions WHERE user_id = ?1)"
                " OR EXISTS (SELECT 1 FROM search_log WHERE user_id = ?1)"
                " OR EXISTS (SELECT 1 FROM turn_decisions WHERE user_id = ?1)"
                " OR EXISTS (SELECT 1 FROM scope_members WHERE user_id = ?1)"
                f" OR EXISTS (SELECT 1 FROM records WHERE {_USER_SCOPES})"
                f" OR EXISTS (SELECT 1 FROM entities WHERE {_USER_SCOPES})",
                (user_id,)).fetchone()[0]
            if not known:
                raise StoreError(f"no user {user_id} in this store")
            result = Erasure("user", user_id)
            sessions = [r[0] for r in conn.execute(
                "SELECT id FROM sessions WHERE user_id = ? ORDER BY id", (user_id,))]
            sourced = self._erase_sessions(conn, sessions, result)
            owned = [r[0] for r in conn.execute(
                f"SELECT id FROM records WHERE {_USER_SCOPES} ORDER BY seq", (user_id,))]
            self._erase_records(conn, list(dict.fromkeys([*owned, *sourced])), result)
            result.counts["search_logs"] += conn.execute(
                "DELETE FROM search_log WHERE user_id = ?", (user_id,)).rowcount
            result.counts["turn_decisions"] += conn.execute(
                "DELETE FROM turn_decisions WHERE user_id = ?", (user_id,)).rowcount
            result.counts["events_blanked"] += conn.execute(
                _BLANK + "json_extract(payload, '$.user_id') = ?", (user_id,)).rowcount
            # A membership names the user; a new user who later gets the id starts outside.
            result.counts["memberships"] = conn.execute(
                "DELETE FROM scope_members WHERE user_id = ?", (user_id,)).rowcount
            result.counts["profile_blocks"] += blank_profiles_of_user(conn, user_id)
            self._erase_entities(conn, user_id, result)
            result.event_id = self._insert_event(conn, NewEvent("user.erased", actor,
                {"user_id": user_id, "reason": reason, "sessions": sessions,
                 "records": result.record_ids, "counts": result.counts}))
            return result

    def _erase_records(self, conn: sqlite3.Connection, record_ids: list[str], result: Erasure) -> None:
        counts = result.counts
        for key in ("records", "embeddings", "entity_links", "events_blanked", "profile_blocks"):
            counts.setdefault(key, 0)
        if not record_ids:
            return
        # A stored profile quoted the record's text; its activation goes with it.
        counts["profile_blocks"] += blank_profiles_of_records(conn, record_ids)
        delete_activation_rows(conn, record_ids)
        version = self.bump_version(conn)
        result.index_version = version
        for chunk in chunks(record_ids):
            # The attribute is a slug of the writer's words, so it goes with the content, as
            # does the content's redacted form (masked, but still the record's words);
            # subject keeps only the entity id, in the usual '<entity>/<attribute>' form.
            seqs = [row[0] for row in conn.execute(
                "UPDATE records SET content = '', redacted_content = NULL, evidence = NULL, tags = '[]',"
                " attribute = NULL,"
                " subject = coalesce(subject_entity_id, '-') || '/-', status = 'deleted',"
                f" index_version = ? WHERE id IN ({marks(chunk)}) RETURNING seq",
                [version, *chunk])]
            conn.execute(f"DELETE FROM records_fts WHERE rowid IN ({marks(seqs)})", seqs)
            counts["records"] += len(seqs)
            counts["embeddings"] += conn.execute(
                f"DELETE FROM embeddings WHERE record_id IN ({marks(chunk)})", chunk).rowcount
            # A vector staged by an unfinished re-embed is as much the record's as its live one.
            counts["embeddings"] += conn.execute(
                f"DELETE FROM reembed_vectors WHERE record_id IN ({marks(chunk)})", chunk).rowcount
            conn.execute(f"DELETE FROM record_pins WHERE record_id IN ({marks(chunk)})", chunk)
            counts["entity_links"] += conn.execute(
                f"DELETE FROM record_entities WHERE record_id IN ({marks(chunk)})", chunk).rowcount
            # Erasure is the one exception to append-only events: payloads quote text.
            counts["events_blanked"] += conn.execute(
                _BLANK + f"record_id IN ({marks(chunk)})", chunk).rowcount
        result.record_ids.extend(record_ids)

    def _summaries_restating(self, conn: sqlite3.Connection, record_ids: list[str]) -> list[str]:
        """The session summaries, any version, of the sessions that stated or reinforced
        these records: each restates what its session said, so it was derived from them."""
        ref = _REF_SESSION.format(ref="source_ref")
        said = _REF_SESSION.format(ref="json_extract(payload, '$.source_ref')")
        sessions: set[str] = set()
        for chunk in chunks(record_ids):
            sessions.update(r[0] for r in conn.execute(
                f"SELECT {ref} FROM records WHERE id IN ({marks(chunk)}) AND source_ref LIKE 'session:%'"
                f" UNION SELECT {said} FROM events WHERE record_id IN ({marks(chunk)})"
                " AND kind = 'record.reinforced' AND json_extract(payload, '$.source_ref') LIKE 'session:%'",
                [*chunk, *chunk]))
        refs = sorted(f"session:{s}" for s in sessions if s)
        found: list[str] = []
        for chunk in chunks(refs):
            found += [r[0] for r in conn.execute(
                "SELECT id FROM records WHERE source_kind = 'session_summary' AND content != ''"
                f" AND source_ref IN ({marks(chunk)}) ORDER BY seq", chunk)]
        return [r for r in dict.fromkeys(found) if r not in record_ids]

    def _erase_derived(self, conn: sqlite3.Connection, record_ids: list[str], summaries: list[str],
                       result: Erasure) -> None:
        """Delete the search-log rows that returned these (just erased) records (a row
        keeps the question that found them and where each ranked), and the persisted
        extraction stages of the erased summaries' sessions (the model's reading of the
        session, which the summary was written from)."""
        counts = result.counts
        counts["summaries"] = counts.get("summaries", 0) + len(summaries)
        for key in ("search_logs", "extraction_stages"):
            counts.setdefault(key, 0)
        sessions = sorted({r[0] for chunk in chunks(summaries) for r in conn.execute(
            f"SELECT {_REF_SESSION.format(ref='source_ref')} FROM records WHERE id IN ({marks(chunk)})"
            " AND source_ref LIKE 'session:%'", chunk)})
        for chunk in chunks(sessions):
            counts["extraction_stages"] += conn.execute(
                f"DELETE FROM extraction_stages WHERE session_id IN ({marks(chunk)})", chunk).rowcount
        for chunk in chunks(record_ids):
            # search_returned empties itself through its foreign key as the rows go.
            counts["search_logs"] += conn.execute(
                "DELETE FROM search_log WHERE id IN (SELECT search_id FROM search_returned"
                f" WHERE record_id IN ({marks(chunk)}))", chunk).rowcount

    def _erase_sessions(self, conn: sqlite3.Connection, session_ids: list[str], result: Erasure) -> list[str]:
        """Blank the turns, search logs and event payloads of these sessions; return the
        ids of records (any scope) whose source_ref points into them."""
        counts = result.counts
        for key in ("sessions", "turns", "search_logs", "turn_decisions", "events_blanked"):
            counts.setdefault(key, 0)
        if not session_ids:
            return []
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS retold_erase_sessions(id TEXT PRIMARY KEY)")
        conn.execute("DELETE FROM temp.retold_erase_sessions")
        picked = "(SELECT id FROM temp.retold_erase_sessions)"
        try:
            # each id once: the table's key takes no repeat
            conn.executemany("INSERT INTO temp.retold_erase_sessions(id) VALUES (?)",
                             [(s,) for s in dict.fromkeys(session_ids)])
            counts["sessions"] += len(session_ids)
            counts["turns"] += conn.execute(
                f"UPDATE session_turns SET content = '' WHERE session_id IN {picked}").rowcount
            counts["search_logs"] += conn.execute(
                f"DELETE FROM search_log WHERE session_id IN {picked}").rowcount
            # Gaps and verdict reasons restate what the user asked.
            counts["turn_decisions"] += conn.execute(
                f"DELETE FROM turn_decisions WHERE session_id IN {picked}").rowcount
            # Persisted extraction stages quote the transcript.
            counts["extraction_stages"] = counts.get("extraction_stages", 0) + conn.execute(
                f"DELETE FROM extraction_stages WHERE session_id IN {picked}").rowcount
            ref = _REF_SESSION.format(ref="json_extract(payload, '$.source_ref')")
            counts["events_blanked"] += conn.execute(
                _BLANK + f"(json_extract(payload, '$.session_id') IN {picked}"
                f" OR (kind = 'session.split' AND (json_extract(payload, '$.from') IN {picked}"
                f"     OR json_extract(payload, '$.to') IN {picked}))"
                f" OR (json_extract(payload, '$.source_ref') LIKE 'session:%' AND {ref} IN {picked}))"
            ).rowcount
            return [r[0] for r in conn.execute(
                "SELECT id FROM records WHERE source_ref LIKE 'session:%'"
                f" AND {_REF_SESSION.format(ref='source_ref')} IN {picked} ORDER BY seq")]
        finally:
            conn.execute("DELETE FROM temp.retold_erase_sessions")

    def _erase_entities(self, conn: sqlite3.Connection, user_id: str, result: Erasure) -> None:
        entity_ids = [r[0] for r in conn.execute(
            f"SELECT id FROM entities WHERE {_USER_SCOPES} ORDER BY id", (user_id,))]
        result.counts["entities"] = len(entity_ids)
        result.counts["aliases"] = 0
        relinked: list[str] = []
        for chunk in chunks(entity_ids):
            result.counts["aliases"] += conn.execute(
                f"DELETE FROM entity_aliases WHERE entity_id IN ({marks(chunk)})", chunk).rowcount
            conn.execute(
                f"UPDATE entities SET canonical = '', status = 'deleted' WHERE id IN ({marks(chunk)})",
                chunk)
            result.counts["events_blanked"] += conn.execute(
                _BLANK + f"entity_id IN ({marks(chunk)})", chunk).rowcount
            relinked += [r[0] for r in conn.execute(
                f"SELECT DISTINCT record_id FROM record_entities WHERE entity_id IN ({marks(chunk)})", chunk)]
        # Records elsewhere that still link these entities carried their aliases in FTS.
        self._write_fts(conn, relinked)

    def compact(self) -> bool:
        """Make freed pages and the WAL hold no residue after an erase.

        Merges the FTS segments (so deleted terms leave the inverted index), then
        checkpoints, VACUUMs and truncates the WAL, outside any transaction. Returns False
        when another connection kept the final checkpoint from completing.
        """
        with self._lock:
            if self._depth:
                raise StoreError("compact() cannot run inside a transaction")
            with self.atomic() as conn:
                conn.execute("INSERT INTO records_fts(records_fts) VALUES ('optimize')")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("VACUUM")  # rebuilds every page: no freed page keeps old cells
            busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            return int(busy) == 0

    def set_secure_delete(self, on: bool) -> None:
        """Zero deleted content in place (``PRAGMA secure_delete``) on this connection."""
        with self._lock:
            self._conn.execute(f"PRAGMA secure_delete = {'ON' if on else 'OFF'}")

