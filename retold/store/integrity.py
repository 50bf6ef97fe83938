"""Whether a store file is whole: SQLite's own page check, the FTS index check, and the
agreement between records, their FTS rows and their vectors.

SQLite only notices a damaged page when a statement happens to read it, and a damaged
index page can make a query return too few rows without any error at all. The checks
here read everything on purpose. They are what ``retold check`` runs, what ``retold
snapshot load`` runs on a snapshot before it replaces the store, and (quick form) what
a worker runs before it starts. Every problem is returned as a :class:`Finding`; only a
file that is not a Retold store at all, or a lock that outlasts the wait, raises. The
agreement check and the report are shared with a PostgreSQL store's check
(:mod:`retold.store.postgres.integrity`). See docs/decisions.md, "Integrity checks".
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from retold.errors import NotADatabaseError, StoreError
from retold.store.damage import clear_damage, damage_noted, note_damage
from retold.store.failures import CORRUPT, IOERR, NOTADB, StoreLock, primary_code
from retold.store.family import EmbeddingFamily, read_family
from retold.store.migrations import LATEST, MIGRATIONS, check_not_newer
from retold.store.opening import connect, read_only_reason

__all__ = [
    "Finding", "IntegrityReport", "Problem", "check_agreement", "check_connection", "check_file", "finding",
    "merged",
]

Problem = Literal[
    "sqlite",             # SQLite's page and b-tree check found damage
    "fts_index",          # the full-text index disagrees with the text it indexes
    "unreadable",         # a check could not read part of the file at all
    "missing_fts_row",    # an active record the lexical search cannot find
    "stray_fts_row",      # an FTS row of no record, of a forgotten record, or of another record
    "missing_embedding",  # an active record the dense search cannot find
    "foreign_embedding",  # an active record's vector is not of the store's embedding family
    "malformed_vector",   # a vector's byte length disagrees with its declared width
    "orphan_embedding",   # a vector whose record does not exist
    "unrecorded_family",  # vectors are stored but the store records no embedding family
    "btree_index",        # PostgreSQL's amcheck found a btree index that disagrees with itself or its table
]

_SAMPLE = 10  # ids named per problem; the count covers the rest
_MAX_SQLITE_LINES = 100  # SQLite's own default cap on reported errors
_DAMAGE = (CORRUPT, NOTADB, IOERR)  # what a check reports instead of raising
_ACTIVE = "('provisional', 'confirmed')"
# A store migrated before this version has no recorded family to hold its vectors to.
_FAMILY_SINCE = next(m.version for m in MIGRATIONS if m.name == "embedding family")
_PENDING_SINCE = next(m.version for m in MIGRATIONS if m.name == "pending embeddings")


@dataclass(frozen=True)
class Finding:
    """One kind of problem: how many rows have it and a line naming the first of them."""

    problem: Problem
    count: int
    detail: str
    ids: tuple[str, ...] = ()  # record ids (or FTS rowids, or index names) named in ``detail``


@dataclass(frozen=True)
class IntegrityReport:
    """What one check run looked at and found."""

    path: str
    quick: bool
    checks: tuple[str, ...]  # the checks that ran, in order
    skipped: tuple[str, ...]  # checks that could not run here, each with why
    active_records: int
    findings: tuple[Finding, ...]
    timings_ms: dict[str, float]
    pending_vectors: int = 0  # records a write stored without a vector, for the backfill
    mark_cleared: bool = False  # this check removed the damage mark, so writes are taken again

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def damaged(self) -> bool:
        """The database itself found damage: its pages or indexes (the full-text one
        included), not only Retold's rows, are at fault."""
        return any(f.problem in ("sqlite", "unreadable", "btree_index", "fts_index") for f in self.findings)

    def summary(self) -> str:
        """``2 problems: missing_fts_row (1), orphan_embedding (3)``, or ``no problems``."""
        if self.ok:
            return "no problems"
        parts = ", ".join(f"{f.problem} ({f.count})" for f in self.findings)
        return f"{len(self.findings)} problem{'s' if len(self.findings) > 1 else ''}: {parts}"


def check_file(path: str | Path, *, quick: bool = False, busy_timeout: float = 30.0) -> IntegrityReport:
    """Check the store file at ``path`` without changing it, and set or clear its damage
    mark (:mod:`retold.store.damage`): set when the check finds damage, cleared when a
    check with every part run finds none.

    The FTS index check is a statement SQLite treats as a write, so it holds the write
    lock while it runs and is skipped where the file cannot be written. Raises
    NotADatabaseError (or SchemaTooNewError) for a file that is not a Retold store this
    code can judge, and StoreLockedError when another write keeps the lock past
    ``busy_timeout``.
    """
    report = _check_file(str(path), quick, busy_timeout)
    if report.damaged:
        note_damage(report.path, f"retold check: {report.summary()}")
    elif not report.skipped and damage_noted(report.path) is not None:
        return replace(report, mark_cleared=clear_damage(report.path))
    return report


def _check_file(target: str, quick: bool, busy_timeout: float) -> IntegrityReport:
    file = Path(target)
    if not file.is_file():
        raise StoreError(f"no store file at {target}")
    reason = read_only_reason(target, asked=False)
    lock = StoreLock(target, busy_timeout, reason)
    with lock:
        try:
            conn = connect(target, busy_timeout, reason)
        except sqlite3.DatabaseError as exc:
            return _unreadable(target, quick, exc)
        except NotADatabaseError as exc:
            # SQLite's own signature at the start with the rest of the header unreadable is
            # a damaged store, what check exists to report; a file without it is something
            # else, refused as before. No connection of this process holds the file now,
            # so reading its first bytes drops no lock.
            with file.open("rb") as head:
                if head.read(len(_SQLITE_MAGIC)) != _SQLITE_MAGIC:
                    raise
            return _unreadable(target, quick, exc)
    with closing(conn), lock:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        try:
            version = check_not_newer(conn, target)
        except sqlite3.DatabaseError as exc:
            if primary_code(exc) not in _DAMAGE:
                raise
            return _unreadable(target, quick, exc)
        if version == 0:
            raise NotADatabaseError(f"{target} is not a Retold store (no schema migration was applied)")
        fts_skip = None if reason is None else f"fts index check: needs write access ({reason})"
        return check_connection(conn, target, quick=quick, schema_version=version, fts_skip=fts_skip)


def check_connection(
    conn: sqlite3.Connection, path: str, *, quick: bool = False, schema_version: int = LATEST,
    fts_skip: str | None = None,
) -> IntegrityReport:
    """Run every check on ``conn`` (in autocommit mode, outside a transaction).

    ``fts_skip`` names why the FTS index check cannot run on this connection. A store
    whose schema predates the recorded embedding family is not faulted for lacking one.
    """
    findings: list[Finding] = []
    timings: dict[str, float] = {}
    checks: list[str] = []
    skipped = [fts_skip] if fts_skip else []
    active = pending = 0

    def stage(name: str, run: Callable[[], list[Finding]]) -> None:
        started = time.perf_counter()
        checks.append(name)
        try:
            findings.extend(run())
        except sqlite3.DatabaseError as exc:
            if primary_code(exc) not in _DAMAGE:
                raise
            findings.append(Finding("unreadable", 1, f"{name} could not read the file: {_line(exc)}"))
        timings[name] = round((time.perf_counter() - started) * 1000, 3)

    def agreement() -> list[Finding]:
        nonlocal active, pending
        active, pending, found = check_agreement(conn, family_expected=schema_version >= _FAMILY_SINCE,
                                                 pending_table=schema_version >= _PENDING_SINCE)
        return found

    stage("quick_check" if quick else "integrity_check", lambda: _sqlite_check(conn, quick))
    if fts_skip is None:
        stage("fts_index", lambda: _fts_check(conn))
    stage("agreement", agreement)
    return IntegrityReport(path, quick, tuple(checks), tuple(skipped), active, merged(findings), timings,
                           pending)


def merged(findings: list[Finding]) -> tuple[Finding, ...]:
    """One finding per problem: a damaged page can make several checks fail alike."""
    by_problem: dict[str, Finding] = {}
    for found in findings:
        seen = by_problem.get(found.problem)
        by_problem[found.problem] = found if seen is None else Finding(
            found.problem, seen.count + found.count, f"{seen.detail}; {found.detail}", seen.ids + found.ids)
    return tuple(by_problem.values())


_SQLITE_MAGIC = b"SQLite format 3\x00"


def _unreadable(path: str, quick: bool, exc: Exception) -> IntegrityReport:
    found = Finding("unreadable", 1, f"the schema cannot be read: {_line(exc)}")
    return IntegrityReport(path, quick, ("open",), (), 0, (found,), {})


def _line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _sqlite_check(conn: sqlite3.Connection, quick: bool) -> list[Finding]:
    pragma = "quick_check" if quick else "integrity_check"
    try:
        lines = [line for row in conn.execute(f"PRAGMA {pragma}({_MAX_SQLITE_LINES})")
                 for line in str(row[0]).splitlines() if not line.startswith("*** in database")]
    except sqlite3.DatabaseError as exc:
        # integrity_check gives up on a page it cannot parse, where quick_check, which
        # skips the index-content checks, still lists what is wrong.
        if quick or primary_code(exc) not in _DAMAGE:
            raise
        return [Finding("sqlite", 1, f"PRAGMA integrity_check stopped: {_line(exc)}"),
                *_sqlite_check(conn, quick=True)]
    if lines == ["ok"]:
        return []
    shown = "; ".join(lines[:3]) + ("; ..." if len(lines) > 3 else "")
    return [Finding("sqlite", len(lines), f"PRAGMA {pragma} reports {len(lines)} problem(s): {shown}")]


def _fts_check(conn: sqlite3.Connection) -> list[Finding]:
    """FTS5's own check: every indexed term matches the text stored beside it."""
    try:
        conn.execute("INSERT INTO records_fts(records_fts) VALUES ('integrity-check')")
    except sqlite3.DatabaseError as exc:
        if primary_code(exc) != CORRUPT:  # FTS5 reports a mismatched index as corrupt
            raise
        return [Finding("fts_index", 1, f"the full-text index disagrees with its text ({_line(exc)}); "
                        "lexical search may miss or misreport records")]
    except MemoryError:
        # A damaged segment can hold a garbage length that FTS5 then tries to allocate;
        # SQLite answers that as out of memory, which here means the index is unreadable.
        return [Finding("fts_index", 1, "the full-text index is damaged: reading it asked SQLite for "
                        "more memory than it could have; lexical search may miss or misreport records")]
    return []


def check_agreement(conn: Any, *, family_expected: bool, postgres: bool = False,
                    pending_table: bool = True) -> tuple[int, int, list[Finding]]:
    """Every active record has its one FTS row and one vector of the store's family, and no
    FTS row or vector lacks its record: the number of active records, how many of them wait
    for their vector (stored pending, which is no fault), and what disagrees.

    Read in one snapshot, so a concurrent write (which commits all three together) never
    shows as a problem; on PostgreSQL (``conn`` a PgConnection) that snapshot is a
    read-only REPEATABLE READ transaction, and the two SQL forms that differ are the ones
    :func:`_absent` and :func:`_differs` write.
    """
    no_fts = _absent("records.seq", "records_fts", "rowid", postgres)
    no_vector = _absent("records.id", "embeddings", "record_id", postgres)
    if pending_table:
        no_vector += " AND " + _absent("records.id", "pending_embeddings", "record_id", postgres)
    no_record = _absent("embeddings.record_id", "records", "id", postgres)
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY" if postgres else "BEGIN")
    try:
        active = int(conn.execute(f"SELECT count(*) FROM records WHERE status IN {_ACTIVE}").fetchone()[0])
        pending = 0 if not pending_table else int(
            conn.execute("SELECT count(*) FROM pending_embeddings").fetchone()[0])
        found = [
            _rows(conn, "missing_fts_row", "active record(s) without an FTS row, so lexical search "
                  "cannot find them",
                  f"SELECT id FROM records WHERE status IN {_ACTIVE}"
                  f" AND {no_fts} ORDER BY seq"),
            _rows(conn, "stray_fts_row", "FTS row(s) of no record, of a forgotten record or naming "
                  "another record, so lexical search can return what it must not",
                  "SELECT 'fts rowid ' || f.rowid || ' (' || coalesce(f.record_id, '?') || ')'"
                  " FROM records_fts f LEFT JOIN records r ON r.seq = f.rowid"
                  " WHERE r.id IS NULL OR r.status = 'deleted' OR"
                  f" {_differs('r.id', 'f.record_id', postgres)}"
                  " ORDER BY f.rowid"),
            _rows(conn, "missing_embedding", "active record(s) without a vector, so dense search "
                  "cannot find them",
                  f"SELECT id FROM records WHERE status IN {_ACTIVE}"
                  f" AND {no_vector} ORDER BY seq"),
            _rows(conn, "orphan_embedding", "vector(s) whose record does not exist",
                  f"SELECT record_id FROM embeddings WHERE {no_record} ORDER BY record_id"),
        ]
        family = read_family(conn) if family_expected else None
        if family is None and family_expected:
            found.append(_rows(
                conn, "unrecorded_family", "vector(s) stored while the store records no embedding "
                "family; `retold reembed` settles one", "SELECT record_id FROM embeddings"))
        found += _vector_rows(conn, family)
    finally:
        conn.execute("COMMIT")
    return active, pending, [f for f in found if f is not None]


def _absent(key: str, table: str, column: str, postgres: bool) -> str:
    """``key`` has no row in ``table``. SQLite runs ``NOT IN`` by building one b-tree of the
    table's keys, three times faster for the FTS5 table than a lookup per row; PostgreSQL
    plans ``NOT IN`` over a table larger than ``work_mem`` as a scan of it per row (150 s
    instead of 0.13 s at 50K records with a small ``work_mem``), and ``NOT EXISTS`` as one
    anti-join."""
    if postgres:
        return f"NOT EXISTS (SELECT 1 FROM {table} x WHERE x.{column} = {key})"
    return f"{key} NOT IN (SELECT {column} FROM {table})"


def _differs(left: str, right: str, postgres: bool) -> str:
    """``left`` and ``right`` differ, NULL counting as a value: PostgreSQL has no ``IS NOT``
    between values, and SQLite before 3.39 no ``IS DISTINCT FROM``."""
    return f"{left} {'IS DISTINCT FROM' if postgres else 'IS NOT'} {right}"


def _vector_rows(conn: Any, family: EmbeddingFamily | None) -> list[Finding | None]:
    """Malformed vectors, and active records whose vector is of another family, found in
    one pass over the vectors (the largest table by far)."""
    model, version, dims = (family.model, family.version, family.dims) if family else ("", "", 0)
    rows = conn.execute(
        "SELECT e.record_id, length(e.vector) != e.dims * 4, r.status IN ('provisional', 'confirmed')"
        " FROM embeddings e LEFT JOIN records r ON r.id = e.record_id"
        " WHERE length(e.vector) != e.dims * 4 OR (?1 AND NOT (e.model = ?2 AND e.version = ?3"
        " AND e.dims = ?4)) ORDER BY e.record_id", (family is not None, model, version, dims)).fetchall()
    malformed = [str(rid) for rid, bad, _ in rows if bad]
    foreign = [str(rid) for rid, bad, active in rows if active and not bad]
    return [
        finding("malformed_vector", "vector(s) whose length is not their declared width", malformed),
        finding("foreign_embedding", f"active record(s) whose vector is not of the store's family, "
                 f"{family}, so the index never loads it", foreign),
    ]


def _rows(conn: Any, problem: Problem, what: str, sql: str,
          params: tuple[object, ...] = ()) -> Finding | None:
    """A finding for the rows ``sql`` returns (the first column names each), or None."""
    return finding(problem, what, [str(row[0]) for row in conn.execute(sql, params)])


def finding(problem: Problem, what: str, names: list[str]) -> Finding | None:
    """``problem`` for the rows ``names`` names: the count, ``what`` they are and the first
    ten of them; None for no rows."""
    if not names:
        return None
    sample = tuple(names[:_SAMPLE])
    more = f" and {len(names) - len(sample)} more" if len(names) > len(sample) else ""
    return Finding(problem, len(names), f"{len(names)} {what}: {', '.join(sample)}{more}", sample)
