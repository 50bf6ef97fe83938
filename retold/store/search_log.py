"""One search_log row per memory_search (LLD 3.6, 10.1)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from retold.store.base import StoreBase

__all__ = ["SEARCH_LOG_COLUMNS", "SearchLogMixin"]

SEARCH_LOG_COLUMNS = (
    "id", "at", "agent_id", "user_id", "session_id", "trigger", "request", "context",
    "rewrite_status", "rewritten_queries", "readable_scopes", "dense", "lexical", "entity",
    "fused", "freshness", "gated_out", "deduped_out", "reranked", "reranked_out",
    "rerank_status", "rerank_error", "budget_out", "returned", "explanations", "config_flags",
    "warm", "timings_ms",
)


class SearchLogMixin(StoreBase):
    """Rows of ``search_log``: written once by the retriever, read by replay and evaluation."""

    def insert_search_log(self, row: Mapping[str, Any]) -> None:
        """Insert one complete row; JSON columns arrive already serialised."""
        missing = [c for c in SEARCH_LOG_COLUMNS if c not in row]
        if missing:
            raise ValueError(f"search_log row lacks {', '.join(missing)}")
        marks = ", ".join("?" for _ in SEARCH_LOG_COLUMNS)
        with self.atomic() as conn:
            conn.execute(
                f"INSERT INTO search_log({', '.join(SEARCH_LOG_COLUMNS)}) VALUES ({marks})",
                [row[c] for c in SEARCH_LOG_COLUMNS],
            )

    def search_log_row(self, search_id: str) -> dict[str, Any] | None:
        """One logged search as a column -> value dict (JSON left as text)."""
        rows = self.search_log_rows("id = ?", (search_id,))
        return rows[0] if rows else None

    def search_log_rows(
        self, where: str = "1", params: tuple[Any, ...] = (), limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Logged searches matching a trusted condition, oldest first."""
        sql = f"SELECT {', '.join(SEARCH_LOG_COLUMNS)} FROM search_log WHERE {where} ORDER BY at, id"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self._lock:
            rows = self._conn.execute(sql, params).fetchall()
        return [dict(zip(SEARCH_LOG_COLUMNS, row, strict=True)) for row in rows]
