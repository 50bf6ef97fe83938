"""Extraction claims and persisted stage outputs (LLD 8.2, DESIGN.md decisions 1 and 2).

A session is extracted by whoever claims it: ``sessions.extraction_started_at`` is the
timed claim, ``sessions.extracted_at`` the finish line. Each stage (``extract``,
``review``) saves its output in ``extraction_stages`` before the next stage starts, so a
worker killed after a hosted call resumes without paying for that call again.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, get_args

import numpy as np

from retold.models import Record, Scope
from retold.store.base import StoreBase
from retold.util import from_iso, to_iso

__all__ = ["ClaimOutcome", "ExtractionMixin", "Stage", "StageRow"]

Stage = Literal["extract", "review"]
ClaimOutcome = Literal["claimed", "reclaimed", "busy", "done", "missing", "open"]
_STAGES: tuple[str, ...] = get_args(Stage)
_ACTIVE_SQL = "('provisional', 'confirmed')"


@dataclass(frozen=True)
class StageRow:
    """One persisted stage output with the model and prompt version that produced it."""

    session_id: str
    stage: Stage
    output: dict[str, Any]
    model: str
    prompt_version: str
    at: datetime


def _scope_sql(scopes: Sequence[Scope], prefix: str = "") -> tuple[str, list[str]]:
    sql = " OR ".join([f"({prefix}scope_kind = ? AND {prefix}scope_id = ?)"] * len(scopes))
    return f"({sql})", [part for scope in scopes for part in (scope.kind, scope.id)]


class ExtractionMixin(StoreBase):
    """Claims on sessions, the ``extraction_stages`` table and session summaries."""

    if TYPE_CHECKING:
        # Provided by RecordsMixin and EntitiesMixin on the combined Store.
        def insert_record(self, record: Record, aliases: str = "") -> int: ...
        def link_record(self, record_id: str, links: Sequence[tuple[str, str]]) -> None: ...
        def put_embedding(self, record_id: str, model: str, version: str, vector: np.ndarray) -> int: ...

    # -- claims (LLD 8.2 "timed claim") ----------------------------------------------------

    def claim_session(
        self, session_id: str, now: datetime, claim_timeout: timedelta, *, force: bool = False
    ) -> ClaimOutcome:
        """Claim an ended session for extraction, atomically.

        ``claimed``: nobody held it; ``reclaimed``: an earlier claim was older than
        ``claim_timeout`` (its worker is presumed dead); ``busy``: a live claim exists;
        ``done``: already extracted (unless ``force``, which claims it again for a
        re-run); ``missing``: no such session; ``open``: not ended yet. The check and the
        conditional UPDATE run under one ``BEGIN IMMEDIATE``, so two workers never both
        win the same claim.
        """
        stamp, cutoff = to_iso(now), to_iso(now - claim_timeout)
        with self.atomic() as conn:
            row = conn.execute(
                "SELECT ended_at, extracted_at, extraction_started_at FROM sessions WHERE id = ?",
                (session_id,),
            ).fetchone()
            if row is None:
                return "missing"
            ended_at, extracted_at, started_at = row
            if ended_at is None:
                return "open"
            if extracted_at is not None and not force:
                return "done"
            done_clause = "" if force else " AND extracted_at IS NULL"
            cursor = conn.execute(
                "UPDATE sessions SET extraction_started_at = ? WHERE id = ? AND ended_at IS NOT NULL"
                f"{done_clause} AND (extraction_started_at IS NULL OR extraction_started_at < ?)",
                (stamp, session_id, cutoff),
            )
            if cursor.rowcount != 1:
                return "busy"
            return "claimed" if started_at is None else "reclaimed"

    def claim_started_at(self, session_id: str) -> datetime | None:
        """The current claim's timestamp, or None when the session is unclaimed."""
        with self._lock:
            row = self._conn.execute(
                "SELECT extraction_started_at FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
        return None if row is None or row[0] is None else from_iso(row[0])

    def release_claim(self, session_id: str, *, claimed_at: datetime | None = None) -> bool:
        """Drop the claim so recovery may retry at once; True when a claim was dropped.

        With ``claimed_at`` only that claim is released: a worker whose claim expired
        and was taken over must not release its successor's.
        """
        sql = "UPDATE sessions SET extraction_started_at = NULL WHERE id = ?"
        params: list[str] = [session_id]
        if claimed_at is not None:
            sql += " AND extraction_started_at = ?"
            params.append(to_iso(claimed_at))
        with self.atomic() as conn:
            return conn.execute(sql, params).rowcount == 1

    def finish_session(self, conn: sqlite3.Connection, session_id: str, at: datetime) -> bool:
        """Set ``extracted_at`` and clear the claim inside the caller's apply transaction
        (LLD 8.2: the writes, the summary and ``extracted_at`` commit together)."""
        cursor = conn.execute(
            "UPDATE sessions SET extracted_at = ?, extraction_started_at = NULL WHERE id = ?",
            (to_iso(at), session_id),
        )
        return cursor.rowcount == 1

    def pending_sessions(self, now: datetime, claim_timeout: timedelta) -> list[tuple[str, str]]:
        """Ended, unextracted sessions with no live claim, oldest end first, each with the
        stage it would resume at (``extract`` or ``review``): what recovery re-enqueues
        (DESIGN.md decision 1)."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT s.id, EXISTS (SELECT 1 FROM extraction_stages x"
                "                     WHERE x.session_id = s.id AND x.stage = 'extract')"
                " FROM sessions s WHERE s.ended_at IS NOT NULL AND s.extracted_at IS NULL"
                " AND (s.extraction_started_at IS NULL OR s.extraction_started_at < ?)"
                " ORDER BY s.ended_at, s.id",
                (to_iso(now - claim_timeout),),
            ).fetchall()
        return [(str(sid), "review" if has_extract else "extract") for sid, has_extract in rows]

    # -- persisted stage outputs (DESIGN.md decision 2) ---------------------------------------

    def save_stage(
        self, session_id: str, stage: Stage, output_json: dict[str, Any], model: str, prompt_version: str
    ) -> None:
        """Persist one stage's output (replacing an earlier one) in its own transaction, so
        it is durable before the next stage starts."""
        if stage not in _STAGES:
            raise ValueError(f"stage must be one of {', '.join(_STAGES)}, got {stage!r}")
        with self.atomic() as conn:
            conn.execute(
                "INSERT INTO extraction_stages(session_id, stage, output, model, prompt_version, at)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(session_id, stage) DO UPDATE SET"
                " output = excluded.output, model = excluded.model,"
                " prompt_version = excluded.prompt_version, at = excluded.at",
                (session_id, stage, json.dumps(output_json, sort_keys=True), model, prompt_version,
                 to_iso(self.clock.now())),
            )

    def stage_row(self, session_id: str, stage: Stage) -> StageRow | None:
        """The persisted stage with its provenance, or None."""
        with self._lock:
            row = self._conn.execute(
                "SELECT output, model, prompt_version, at FROM extraction_stages"
                " WHERE session_id = ? AND stage = ?",
                (session_id, stage),
            ).fetchone()
        if row is None:
            return None
        return StageRow(session_id, stage, json.loads(row[0]), row[1], row[2], from_iso(row[3]))

    def load_stage(self, session_id: str, stage: Stage) -> dict[str, Any] | None:
        """The persisted output of one stage, or None when that stage has not run."""
        found = self.stage_row(session_id, stage)
        return None if found is None else found.output

    def clear_stages(self, session_id: str) -> int:
        """Forget every persisted stage of a session (the next run calls the models again)."""
        with self.atomic() as conn:
            return conn.execute(
                "DELETE FROM extraction_stages WHERE session_id = ?", (session_id,)
            ).rowcount

    # -- extraction context reads (LLD 8.2 step 2) ---------------------------------------------

    def readable_entities(self, scopes: Sequence[Scope], limit: int) -> list[tuple[str, str, str]]:
        """``(entity_id, kind, canonical)`` of active entities in ``scopes``, confirmed
        first then newest, at most ``limit``."""
        if not scopes or limit <= 0:
            return []
        where, params = _scope_sql(scopes)
        with self._lock:
            rows = self._conn.execute(
                f"SELECT id, kind, canonical FROM entities WHERE {where}"
                " AND status IN ('provisional', 'confirmed')"
                " ORDER BY status = 'confirmed' DESC, created_at DESC, id LIMIT ?",
                [*params, limit],
            ).fetchall()
        return [(str(i), str(k), str(c)) for i, k, c in rows]

    def active_subjects(self, scopes: Sequence[Scope], now: datetime, limit: int) -> list[str]:
        """Distinct subjects of active, unexpired semantic and procedural records in
        ``scopes``, most recently touched first, at most ``limit``."""
        if not scopes or limit <= 0:
            return []
        where, params = _scope_sql(scopes)
        with self._lock:
            rows = self._conn.execute(
                f"SELECT subject FROM records WHERE {where} AND status IN {_ACTIVE_SQL}"
                " AND type != 'episodic' AND (expires_at IS NULL OR expires_at >= ?)"
                " GROUP BY subject ORDER BY max(coalesce(last_reinforced_at, created_at)) DESC,"
                " subject LIMIT ?",
                [*params, to_iso(now), limit],
            ).fetchall()
        return [str(r[0]) for r in rows]

    # -- session summaries (LLD 6.2, 8.2 step 7) -----------------------------------------------

    def put_session_summary(
        self, record: Record, links: Sequence[tuple[str, str]], vector: np.ndarray,
        embedding: tuple[str, str], payload: dict[str, Any],
    ) -> str:
        """Insert a session summary with its links, FTS row and vector (``embedding`` is the
        model and version); return its ``record.created`` event id.

        When ``record.supersedes_id`` names the session's live summary, that one is retired
        first: the ``records_live_summary`` index admits one live summary per session, and
        the retired row stays as history (``record.superseded``).
        """
        with self.atomic() as conn:
            if record.supersedes_id is not None:
                version = self.bump_version(conn)
                conn.execute("UPDATE records SET status = 'superseded', index_version = ? WHERE id = ?",
                             (version, record.supersedes_id))
                self.insert_event(conn, "record.superseded", record.creator_agent_id, {"by": record.id},
                                  record.supersedes_id)
            self.insert_record(record)
            self.link_record(record.id, links)  # also rebuilds the FTS row with the aliases
            self.put_embedding(record.id, embedding[0], embedding[1], vector)
            return self.insert_event(conn, "record.created", record.creator_agent_id, payload, record.id)
