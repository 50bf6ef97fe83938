"""The fitness registry: evaluation results recorded for bundles, the configurations of
host-issued memory (``retold.utility.bundles``).

A bundle may serve regenerated replies in a store only while its newest recorded result
is a pass: recording a failure later takes the permission back. Results are kept, never
edited, so the registry is also the history of what was evaluated, by whom, on what.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from retold.clock import new_id, to_iso
from retold.store.base import NewEvent, StoreBase

__all__ = ["BundleResult", "BundlesMixin"]


@dataclass(frozen=True)
class BundleResult:
    id: str
    bundle: str
    at: str
    passed: bool
    evidence: str
    by: str
    components: dict[str, Any]


class BundlesMixin(StoreBase):
    """Record and read bundle results."""

    def record_bundle_result(self, bundle: str, components: dict[str, Any], *, passed: bool,
                             evidence: str, by: str) -> BundleResult:
        """Keep one result for ``bundle``; one ``bundle.recorded`` event."""
        result = BundleResult(new_id(), bundle, to_iso(self.clock.now()), passed, evidence, by, components)
        with self.atomic() as conn:
            conn.execute("INSERT INTO bundle_results(id, bundle, at, passed, evidence, recorded_by,"
                         " components) VALUES (?, ?, ?, ?, ?, ?, ?)",
                         (result.id, bundle, result.at, int(passed), evidence, by,
                          json.dumps(components, sort_keys=True)))
            self._insert_event(conn, NewEvent("bundle.recorded", by, {
                "bundle": bundle, "passed": passed, "result_id": result.id}))
        return result

    def bundle_results(self, bundle: str | None = None) -> list[BundleResult]:
        """Every recorded result (of one bundle when given), newest first."""
        where, params = ("WHERE bundle = ?", [bundle]) if bundle else ("", [])
        with self._lock:
            rows = self._conn.execute(
                "SELECT id, bundle, at, passed, evidence, recorded_by, components FROM bundle_results"
                f" {where} ORDER BY at DESC, id DESC", params).fetchall()
        return [BundleResult(i, b, at, bool(p), e, by, json.loads(c)) for i, b, at, p, e, by, c in rows]

    def bundle_passed(self, bundle: str) -> bool:
        """Whether ``bundle``'s newest recorded result is a pass."""
        with self._lock:
            row = self._conn.execute(
                "SELECT passed FROM bundle_results WHERE bundle = ? ORDER BY at DESC, id DESC LIMIT 1",
                (bundle,)).fetchone()
        return bool(row and row[0])
