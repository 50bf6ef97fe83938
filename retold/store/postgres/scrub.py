"""Removing what deleted rows leave behind in a PostgreSQL server's files.

A DELETE only marks row versions dead, and a plain VACUUM frees their space without
overwriting it: the text stays in the table's pages and in its TOAST and index pages
(the full-text index keeps the words), in the planner's statistics (ANALYZE samples
values into ``pg_statistic``, whose replaced rows are dead versions in turn), and in the
WAL segments that logged the inserts and the pages' full images. :func:`scrub` rewrites
the tables into new files, refreshes their statistics and rewrites ``pg_statistic``, then
ends the WAL segment and checkpoints, so every segment that logged the rows falls behind
the redo point and is removed. Whatever the login role may not do, or the server's
settings keep, is said in the lines it returns and logged, never skipped silently. See
docs/decisions.md, "Dropping a tenant rewrites the store's tables on PostgreSQL".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["scrub"]

log = logging.getLogger(__name__)

# The part of a WAL segment's name that orders it: log and segment number, without the
# timeline, so a segment of an older timeline is compared by position alone.
_SEGMENT_ORDER = "substr(name, 9)"

# What may still see the rows deleted before ``?`` (a transaction id): a transaction
# running since before it in any database (transaction ids are the server's, and a new
# snapshot's horizon counts them all), a snapshot taken before it in this database or by
# a standby's feedback, or a replication slot's horizon.
_OLDER = ("SELECT 'server process ' || pid FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND ("
          "(backend_xid IS NOT NULL AND age(backend_xid) >= age(?1::xid))"
          " OR ((datname = current_database() OR backend_type = 'walsender')"
          " AND backend_xmin IS NOT NULL AND age(backend_xmin) >= age(?1::xid)))"
          " UNION ALL SELECT 'replication slot ' || slot_name FROM pg_replication_slots"
          " WHERE age(xmin) >= age(?1::xid) OR (database = current_database()"
          " AND age(catalog_xmin) >= age(?1::xid)) ORDER BY 1")
_OLDER_RUNNING = "SELECT pg_snapshot_xmin(pg_current_snapshot()) <= ?::xid8"
_WAIT_LOG_SECONDS = 30.0


def scrub(conn: Any, tables: Sequence[str]) -> list[str]:
    """Rewrite ``tables`` (with their indexes and TOAST) and the planner's statistics, then
    move the WAL past everything the rewrite replaced; one line per step for the operator.
    ``conn`` is an autocommit connection as the tables' owner. Each table is locked
    exclusively while it is rewritten, so its readers and writers wait for it."""
    return [_rewrite(conn, tables), _statistics(conn), *_wal(conn)]


def _await_older_transactions(conn: Any) -> None:
    """Wait until no transaction that could still see the rows deleted so far is open. A
    rewrite keeps every deleted row version some open snapshot may read, so without this
    one long transaction anywhere on the server would carry the rows into the new files."""
    (mark,) = conn.execute("SELECT pg_current_xact_id()::text").fetchone()
    short = str(int(mark) % 2**32)  # the 32-bit form the activity view shows
    waited = logged = 0.0
    while True:
        holders = [str(holder) for (holder,) in conn.execute(_OLDER, (short,)).fetchall()]
        if not holders and not conn.execute(_OLDER_RUNNING, (mark,)).fetchone()[0]:
            return
        if waited - logged >= _WAIT_LOG_SECONDS:
            logged = waited
            log.warning("the tenant drop waits for older transactions to end before it rewrites the"
                        " tables: %s", ", ".join(holders) or "a prepared transaction")
        time.sleep(0.2)
        waited += 0.2


def _rewrite(conn: Any, tables: Sequence[str]) -> str:
    _await_older_transactions(conn)
    for table in tables:
        # FULL copies the live rows into new files and rebuilds every index, and the old
        # files are truncated when it commits; ANALYZE then samples only the live rows.
        conn.execute(f"VACUUM (FULL, ANALYZE) {table}")
    return f"rewritten: {len(tables)} tables with their indexes, statistics refreshed"


def _statistics(conn: Any) -> str:
    """Rewrite ``pg_statistic``: refreshing a table's statistics leaves its old samples as
    dead row versions there, and only a superuser may rewrite a system catalog."""
    if conn.execute("SELECT current_setting('is_superuser')").fetchone()[0] != "on":
        log.warning("this role is not a superuser, so the replaced statistics stay in pg_statistic's free"
                    " space; a superuser may run VACUUM FULL pg_catalog.pg_statistic")
        return ("pg_statistic: not rewritten (needs a superuser); the replaced samples stay in its"
                " free space until a superuser runs VACUUM FULL pg_catalog.pg_statistic")
    _await_older_transactions(conn)  # the samples the refresh replaced, as for the tables' rows
    conn.execute("VACUUM FULL pg_catalog.pg_statistic")
    return "pg_statistic: rewritten"


def _wal(conn: Any) -> list[str]:
    """End the WAL segment the scrub wrote last and checkpoint, so that segment and every
    one before it lie behind the redo point; then say whether the server removed them."""
    import psycopg

    (last,) = conn.execute("SELECT pg_walfile_name(pg_current_wal_lsn())").fetchone()
    try:
        conn.execute("SELECT pg_switch_wal()")
        switched = True
    except psycopg.errors.InsufficientPrivilege:
        switched = False
    try:
        conn.execute("CHECKPOINT")
    except psycopg.errors.InsufficientPrivilege:
        log.warning("this role may not CHECKPOINT; the server's next checkpoint writes the rewritten pages"
                    " and releases the WAL that held the dropped rows")
        return ["checkpoint: left to the server (this role may not run CHECKPOINT)",
                "wal: the segments that held the rows stay until the server's next checkpoints pass them"]
    if not switched:
        log.warning("this role may not run pg_switch_wal(); the current WAL segment keeps the dropped"
                    " rows until it fills and a later checkpoint passes it")
        return ["checkpoint: done",
                f"wal: segment {last} keeps the rows until it fills and a later checkpoint passes it"
                " (this role may not run pg_switch_wal)"]
    return ["checkpoint: done", _wal_left(conn, last)]


def _wal_left(conn: Any, last: str) -> str:
    """What the server kept of the segments up to ``last``, the one the scrub ended."""
    import psycopg

    if conn.execute("SELECT current_setting('wal_recycle')").fetchone()[0] == "on":
        log.warning("wal_recycle is on: the removed WAL segments were renamed for reuse and keep their"
                    " contents until overwritten; set wal_recycle = off")
        return ("wal: the segments that held the rows were recycled with their contents (wal_recycle = on;"
                " set it off)")
    try:
        (kept,) = conn.execute(f"SELECT count(*) FROM pg_ls_waldir() WHERE name ~ '^[0-9A-F]{{24}}$'"
                               f" AND {_SEGMENT_ORDER} <= substr(?, 9)", (last,)).fetchone()
    except psycopg.errors.InsufficientPrivilege:
        return "wal: segments up to the checkpoint released (not verified: listing pg_wal needs pg_monitor)"
    if kept:
        log.warning("the server keeps %d WAL segments that held the dropped rows (wal_keep_size, a"
                    " replication slot or archiving holds them)", kept)
        return (f"wal: {kept} segments that held the rows are kept by the server (wal_keep_size, a"
                " replication slot or archiving); they go when it releases them")
    return "wal: every segment that held the rows removed"
