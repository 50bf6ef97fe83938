"""The eligible set a write searches, kept by delta, against the store's own read of it."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from retold.clock import ManualClock
from retold.ingest.write_scope import WriteScopes
from retold.models import Scope
from retold.store import Store, open_store
from retold.testing import ADITYA, T0, make_record

OTHER = Scope("user", "vera")


def _same_as_fresh(scopes: WriteScopes, store: Store, clock: ManualClock, scope: Scope = ADITYA,
                   type_: str = "semantic") -> list[str]:
    kept = scopes.eligible(scope, type_, clock.now())
    fresh = store.eligible_ids([scope], [type_], now=clock.now())
    if store.backend == "sqlite":
        assert kept.ids == fresh.ids  # the order too: equal scores rank as over a fresh read
    else:
        assert sorted(kept.ids) == sorted(fresh.ids)
    assert dict(zip(kept.ids, kept.seqs.tolist(), strict=True)) == dict(
        zip(fresh.ids, fresh.seqs.tolist(), strict=True))
    return kept.ids


def test_a_kept_set_follows_writes_status_changes_and_expiry(store: Store, clock: ManualClock) -> None:
    scopes = WriteScopes(store)
    soon = make_record(content="Aditya is in Lisbon this week.", expires_at=T0 + timedelta(days=2))
    later = make_record(content="Aditya drafts the release notes.", expires_at=T0 + timedelta(days=9),
                        status="provisional")
    kept = make_record(content="Aditya prefers neovim.")
    for record in (soon, later, kept, make_record(scope=OTHER), make_record(type="procedural")):
        store.write_record(record)
    assert set(_same_as_fresh(scopes, store, clock)) == {soon.id, later.id, kept.id}

    added = make_record(content="Aditya reviews code on Fridays.", event_at=T0 - timedelta(days=30))
    store.write_record(added)
    store.transition(kept.id, "superseded", from_statuses=["confirmed"])
    assert set(_same_as_fresh(scopes, store, clock)) == {soon.id, later.id, added.id}

    clock.advance(days=3)  # past soon's expiry, which no sweep has recorded yet
    assert soon.id not in _same_as_fresh(scopes, store, clock)
    store.pin(soon.id, "host", "keep it", limit=10)  # a pin clears the expiry: live again
    assert soon.id in _same_as_fresh(scopes, store, clock)

    store.transition(later.id, "confirmed", from_statuses=["provisional"], clear_expiry=True)
    clock.advance(days=30)
    assert set(_same_as_fresh(scopes, store, clock)) == {soon.id, later.id, added.id}
    clock.set(T0)  # a clock set back: what it had let expire is live again
    _same_as_fresh(scopes, store, clock)


def test_a_kept_set_sees_what_another_process_changed(store: Store, store_target: str,
                                                      clock: ManualClock) -> None:
    scopes = WriteScopes(store, delta_max=2)
    first = make_record()
    store.write_record(first)
    _same_as_fresh(scopes, store, clock)
    other = open_store(store_target, clock=clock)
    try:
        theirs = make_record(content="Aditya uses tmux.")
        other.write_record(theirs)
        other.transition(first.id, "deleted", from_statuses=["confirmed"])
        assert _same_as_fresh(scopes, store, clock) == [theirs.id]
        for n in range(4):  # more changes than a delta is worth: read whole
            other.write_record(make_record(content=f"Aditya's note {n}."))
    finally:
        other.close()
    assert len(_same_as_fresh(scopes, store, clock)) == 5


@pytest.mark.sqlite_only("loads a snapshot file")
def test_a_kept_set_is_dropped_when_a_snapshot_replaces_the_store(store: Store, clock: ManualClock,
                                                                  tmp_path: Path) -> None:
    scopes = WriteScopes(store)
    before = make_record()
    store.write_record(before)
    store.backup_to(tmp_path / "snapshot.sqlite")
    for n in range(3):
        store.write_record(make_record(content=f"Aditya's note {n}."))
    assert len(_same_as_fresh(scopes, store, clock)) == 4
    store.restore_from(tmp_path / "snapshot.sqlite")
    for n in range(3):  # the store is back at the version the set was kept at, with other rows
        store.write_record(make_record(content=f"Aditya's note {n} after the snapshot."))
    assert before.id in _same_as_fresh(scopes, store, clock)
    assert len(scopes.eligible(ADITYA, "semantic", clock.now())) == 4


def test_a_set_read_inside_a_larger_transaction_keeps_nothing(store: Store, clock: ManualClock) -> None:
    scopes = WriteScopes(store)
    _same_as_fresh(scopes, store, clock)
    with pytest.raises(RuntimeError), store.atomic():
        store.write_record(make_record(content="Aditya's note that is rolled back."))
        assert len(scopes.eligible(ADITYA, "semantic", clock.now(), keep=False)) == 1
        raise RuntimeError("the caller's transaction fails")
    assert _same_as_fresh(scopes, store, clock) == []
