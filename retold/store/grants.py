"""Scope grants: which agent may read or write which scope. Policy decides what they
mean; see retold.policy.grants."""

from __future__ import annotations

from dataclasses import dataclass

from retold.models import Scope
from retold.store.base import StoreBase
from retold.store.upserts import Upsert

__all__ = ["Grant", "GrantsMixin"]

_PUT_GRANT = Upsert("grants", ("agent_id", "scope_kind", "scope_id", "can_read", "can_write"),
                    update=("can_read", "can_write"))


@dataclass(frozen=True)
class Grant:
    agent_id: str
    scope: Scope
    can_read: bool
    can_write: bool


class GrantsMixin(StoreBase):
    """Rows of ``grants``. The implicit private scope never has one."""

    def put_grant(self, agent_id: str, scope: Scope, *, read: bool, write: bool) -> None:
        """Create or replace one agent's grant on one scope."""
        with self.atomic() as conn:
            _PUT_GRANT.execute(conn, (agent_id, scope.kind, scope.id, int(read), int(write)))

    def delete_grant(self, agent_id: str, scope: Scope) -> bool:
        """Remove a grant; True when one existed."""
        with self.atomic() as conn:
            cursor = conn.execute(
                "DELETE FROM grants WHERE agent_id = ? AND scope_kind = ? AND scope_id = ?",
                (agent_id, scope.kind, scope.id),
            )
            return cursor.rowcount > 0

    def grants_for(self, agent_id: str | None) -> list[Grant]:
        """Every grant row of one agent (of every agent for None, as an operator lists
        them), by scope."""
        where, params = ("", ()) if agent_id is None else (" WHERE agent_id = ?", (agent_id,))
        with self._lock:
            rows = self._conn.execute(
                f"SELECT agent_id, scope_kind, scope_id, can_read, can_write FROM grants{where}"
                " ORDER BY scope_kind, scope_id, agent_id", params).fetchall()
        return [Grant(agent, Scope(kind, ident), bool(r), bool(w)) for agent, kind, ident, r, w in rows]
