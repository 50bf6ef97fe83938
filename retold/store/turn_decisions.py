"""Turn decisions: one row per user turn whose host-issued memory the orchestrator decided.

A row says how the turn ended, under which bundle, and why: the gaps the planner named
(they quote the user's needs), the searches by their log ids, the candidates, the
verdicts with their reasons, the time per stage and the hosted tokens spent. Gaps and
reasons restate user text, so the rows age out with the search log and go with an
erased session or user.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from retold.clock import to_iso
from retold.store.base import StoreBase

__all__ = ["DecisionSummary", "TurnDecisionsMixin"]

_COLUMNS = ("id", "at", "agent_id", "user_id", "session_id", "turn", "bundle", "disposition",
            "failed_stage", "error", "body", "total_ms", "hosted_calls", "hosted_tokens")
_BODY = ("gaps", "searches", "candidates", "verdicts", "timings_ms")


@dataclass(frozen=True)
class DecisionSummary:
    """The columns ``retold metrics`` aggregates, for one stored decision."""

    bundle: str
    disposition: str
    failed_stage: str | None
    total_ms: float
    hosted_tokens: int
    admitted: int


class TurnDecisionsMixin(StoreBase):
    """Keep and read turn decisions (retention ages them out with the search log)."""

    def append_turn_decision(self, decision: Any) -> None:
        """Store one :class:`~retold.utility.decision.TurnDecision`."""
        row = decision.as_row()
        row["body"] = json.dumps({key: row[key] for key in _BODY}, sort_keys=True)
        row["total_ms"] = float(row["timings_ms"].get("total", 0.0))
        with self.atomic() as conn:
            conn.execute(f"INSERT INTO turn_decisions({', '.join(_COLUMNS)}, admitted)"
                         f" VALUES ({', '.join('?' for _ in _COLUMNS)}, ?)",
                         (*(row[name] for name in _COLUMNS), len(decision.admitted)))

    def turn_decisions(self, session_id: str | None = None, *, limit: int = 100) -> list[dict[str, Any]]:
        """The newest decisions first (of one session when given), each a plain dict with
        the body's fields spread out."""
        where, params = ("WHERE session_id = ?", [session_id]) if session_id else ("", [])
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM turn_decisions {where} ORDER BY at DESC, id DESC"
                " LIMIT ?", (*params, limit)).fetchall()
        out = []
        for row in rows:
            item = dict(zip(_COLUMNS, row, strict=True))
            item.update(json.loads(item.pop("body")))
            out.append(item)
        return out

    def decision_summaries(self, since: datetime | None = None,
                           bundle: str | None = None) -> list[DecisionSummary]:
        """What the metrics aggregate, for every kept decision at or after ``since``."""
        sql = ("SELECT bundle, disposition, failed_stage, total_ms, hosted_tokens, admitted"
               " FROM turn_decisions WHERE at >= ?")
        params: list[Any] = ["" if since is None else to_iso(since)]
        if bundle:
            sql += " AND bundle = ?"
            params.append(bundle)
        with self._lock:
            rows = self._conn.execute(sql, params).fetchall()
        return [DecisionSummary(str(b), str(d), s, float(t), int(h), int(a)) for b, d, s, t, h, a in rows]
