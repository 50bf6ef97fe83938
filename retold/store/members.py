"""Scope members: which users belong to which shared (project or org) scope.

A grant says which agent may reach a shared scope; a membership says which of the users
that agent serves belongs to it. Policy combines the two; see retold.policy.grants.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from retold.clock import from_iso
from retold.models import Scope
from retold.store.base import StoreBase, ts
from retold.store.upserts import Upsert

__all__ = ["SHARED_KINDS", "Member", "MembersMixin"]

# A membership; one that exists keeps who added it and when.
_ADD_MEMBER = Upsert("scope_members", ("scope_kind", "scope_id", "user_id", "added_at", "added_by"))

# The scope kinds whose readers and writers must be members. A user scope has its one
# owner, a private agent scope its one pair, and a plain agent scope is shared by design
# among the users of that agent.
SHARED_KINDS: tuple[str, ...] = ("project", "org")


@dataclass(frozen=True)
class Member:
    scope: Scope
    user_id: str
    added_at: datetime
    added_by: str  # the operator, or the migration that assumed the membership


class MembersMixin(StoreBase):
    """Rows of ``scope_members``."""

    def put_member(self, scope: Scope, user_id: str, added_by: str) -> bool:
        """Add one user to one shared scope; False when they already belonged."""
        with self.atomic() as conn:
            added = _ADD_MEMBER.execute(conn, (scope.kind, scope.id, user_id, ts(self.clock.now()),
                                               added_by))
            return added > 0

    def delete_member(self, scope: Scope, user_id: str) -> bool:
        """Remove one membership; True when one existed."""
        with self.atomic() as conn:
            cursor = conn.execute(
                "DELETE FROM scope_members WHERE scope_kind = ? AND scope_id = ? AND user_id = ?",
                (scope.kind, scope.id, user_id),
            )
            return cursor.rowcount > 0

    def members_of(self, scope: Scope | None) -> list[Member]:
        """The explicit members of one scope (of every shared scope for None, as an
        operator lists them), by scope then user id."""
        where, params = ("", ()) if scope is None else (" WHERE scope_kind = ? AND scope_id = ?",
                                                        (scope.kind, scope.id))
        with self._lock:
            rows = self._conn.execute(
                f"SELECT scope_kind, scope_id, user_id, added_at, added_by FROM scope_members{where}"
                " ORDER BY scope_kind, scope_id, user_id", params).fetchall()
        return [Member(Scope(kind, ident), user, from_iso(added_at), by)
                for kind, ident, user, added_at, by in rows]

    def member_scopes(self, user_id: str) -> list[Scope]:
        """Every shared scope one user explicitly belongs to, in a stable order."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT scope_kind, scope_id FROM scope_members WHERE user_id = ?"
                " ORDER BY scope_kind, scope_id",
                (user_id,),
            ).fetchall()
        return [Scope(kind, ident) for kind, ident in rows]

