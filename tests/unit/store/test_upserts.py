"""Upserts built from the declared tables: a row binds its columns in the order its caller
names them, on both backends, and the key a stored row is matched by is the table's own."""

from __future__ import annotations

from retold.models import Scope
from retold.store import Store
from retold.store.upserts import Upsert

# The grants table declares agent_id, scope_kind, scope_id, can_read, can_write; this names
# them in another order, as a caller may.
_SHUFFLED = Upsert("grants", ("can_write", "scope_id", "agent_id", "can_read", "scope_kind"),
                   update=("can_write", "can_read"))
_KEEP = Upsert("grants", ("agent_id", "scope_kind", "scope_id", "can_read", "can_write"))


def test_an_upsert_binds_columns_in_its_callers_order_and_updates_by_key(store: Store) -> None:
    with store.atomic() as conn:
        assert _SHUFFLED.execute(conn, (0, "apollo", "agent-a", 1, "project")) == 1
    [grant] = store.grants_for("agent-a")
    assert (grant.scope, grant.can_read, grant.can_write) == (Scope("project", "apollo"), True, False)

    with store.atomic() as conn:
        _SHUFFLED.executemany(conn, [(1, "apollo", "agent-a", 0, "project"),
                                     (1, "zeus", "agent-a", 1, "project")])
    assert {(g.scope.id, g.can_read, g.can_write) for g in store.grants_for("agent-a")} == {
        ("apollo", False, True), ("zeus", True, True)}


def test_an_upsert_without_updates_leaves_the_stored_row(store: Store) -> None:
    store.put_grant("agent-a", Scope("project", "apollo"), read=True, write=True)
    with store.atomic() as conn:
        assert _KEEP.execute(conn, ("agent-a", "project", "apollo", 0, 0)) == 0
    [grant] = store.grants_for("agent-a")
    assert (grant.can_read, grant.can_write) == (True, True)
