"""The late write lock: a transaction that reads before it takes the store's write lock,
then learns what other writers changed meanwhile. On SQLite the lock is held from the
start, so the window is always empty; every write still happens under the lock, and
records_version values commit in the order they are taken."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from retold.errors import StoreLockedError
from retold.models import Scope
from retold.store import Embedding, Store, open_store
from retold.testing import make_record

ADITYA = Scope("user", "aditya")
VECTOR = np.ones(4, dtype=np.float32) / 2


def _other(store_target: str, wait: float = 30.0) -> Store:
    return open_store(store_target, migrate_schema=False, busy_timeout_seconds=wait)


def _locked_out(store_target: str) -> bool:
    """Whether another connection waits for the store's write lock (and gives up). It
    only takes the lock, so no row lock of this transaction's writes stands in its way."""
    other = _other(store_target, wait=0.2)
    try:
        with other.atomic():
            pass
    except StoreLockedError:
        return True
    finally:
        other.close()
    return False


def test_a_late_transaction_learns_what_another_writer_committed_meanwhile(
    store: Store, store_target: str, backend: str,
) -> None:
    other = _other(store_target, wait=2.0)
    try:
        with store.atomic(late_lock=True):
            if backend == "sqlite":
                assert _locked_out(store_target)  # the lock is already held
                assert store.lock_for_write(model="m", version="1").changes == []
                return
            written = make_record(attribute="editor", content="Aditya uses neovim.")
            other.write_record(written, embedding=Embedding("m", "1", VECTOR))  # no wait: no lock held
            window = store.lock_for_write(model="m", version="1")
            (change,) = window.changes
            assert (change.record_id, change.index_version) == (written.id, written.index_version)
            assert (change.scope, change.type, change.attribute, change.status) == (
                ADITYA, "semantic", "editor", "confirmed")
            assert change.content == "Aditya uses neovim." and change.vector is not None
            assert np.allclose(change.vector, VECTOR)
            # Reported once: a second call covers only what changed since the first.
            assert store.lock_for_write(model="m", version="1").changes == []
    finally:
        other.close()


def test_a_write_in_a_late_transaction_holds_the_lock_until_it_commits(
    store: Store, store_target: str,
) -> None:
    with store.atomic(late_lock=True):
        store.write_record(make_record())
        assert _locked_out(store_target)


def test_records_versions_commit_in_the_order_they_are_taken(store: Store, store_target: str) -> None:
    other = _other(store_target)
    versions: list[int] = []
    try:
        with store.atomic(late_lock=True):
            mine = make_record()
            store.write_record(mine)
            waiter = threading.Thread(
                target=lambda: versions.append(other.write_record(make_record()).index_version))
            waiter.start()
            time.sleep(0.3)
            assert versions == []  # the other writer waits for this transaction's commit
        waiter.join(10)
        assert versions == [mine.index_version + 1]
    finally:
        other.close()


def test_an_entity_merged_meanwhile_is_reported(store: Store, store_target: str, backend: str) -> None:
    if backend == "sqlite":
        pytest.skip("SQLite holds the lock from the start; nothing can change meanwhile")
    source = store.create_entity("person", "Dana", ADITYA)
    target = store.create_entity("person", "Dana Reyes", ADITYA)
    other = _other(store_target)
    try:
        with store.atomic(late_lock=True):
            assert store.get_entity(source.id) is not None  # read before the lock
            other.merge_entities(source.id, target.id, "test", "same person")
            window = store.lock_for_write([source.id, target.id])
            assert window.entity_gone
    finally:
        other.close()


def test_a_lock_released_with_a_rolled_back_savepoint_is_taken_again(
    store: Store, store_target: str, backend: str,
) -> None:
    if backend == "sqlite":
        pytest.skip("SQLite holds the lock from the start")
    with store.atomic(late_lock=True):
        with pytest.raises(RuntimeError), store.atomic(late_lock=True):
            store.write_record(make_record())  # takes the lock inside the savepoint
            raise RuntimeError("roll the savepoint back")
        # PostgreSQL released the lock with the savepoint; the next write takes it again.
        store.write_record(make_record())
        assert _locked_out(store_target)
