"""Opening a store says what is wrong: a held lock, a read-only file, a full disk, a file
that is not SQLite or not Retold's, a newer schema, a damaged page, each its own error and
none of them "not a Retold store". An up-to-date store opens without the write lock, and a
read-only one opens for reading.

Tests may run as root, where chmod stops no write: those cases open the copy with
``read_only=True`` (SQLite's ``mode=ro``, the open the permission check picks), and the
checks that need a real permission denial skip under root."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from retold.errors import (
    NotADatabaseError,
    StoreCorruptError,
    StoreError,
    StoreFullError,
    StoreLockedError,
    StoreReadOnlyError,
)
from retold.models import Scope
from retold.store import Store
from retold.store.integrity import check_file
from retold.store.migrations import LATEST
from retold.testing import make_record
from tests.conditions import FullDiskStore, corrupt_page, write_lock_held
from tests.sql import execute

USER = Scope("user", "aditya")
AS_ROOT = os.geteuid() == 0
needs_non_root = pytest.mark.skipif(AS_ROOT, reason="root writes through chmod; read_only=True covers it")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _store_with_a_record(path: Path) -> str:
    with_record = Store(path)
    record = make_record(scope=USER)
    with_record.write_record(record)
    with_record.close()
    return record.id


# -- locked ------------------------------------------------------------------------------------


def test_an_up_to_date_store_opens_and_reads_while_another_write_holds_the_lock(store_path: Path) -> None:
    record_id = _store_with_a_record(store_path)
    with write_lock_held(store_path):
        started = time.monotonic()
        opened = Store(store_path, busy_timeout_seconds=5)
        assert time.monotonic() - started < 1  # no migration pending: no wait for the lock
        assert opened.get_record(record_id) is not None
        opened.close()


def test_a_write_that_outwaits_the_busy_timeout_says_locked_and_how_long(store_path: Path) -> None:
    _store_with_a_record(store_path)
    opened = Store(store_path, busy_timeout_seconds=0.2)
    before = opened.row_counts()
    with write_lock_held(store_path), pytest.raises(StoreLockedError) as caught:
        opened.write_record(make_record(scope=USER))
    message = str(caught.value)
    assert "is locked by another connection" in message and "waiting 0.2 s" in message
    assert "\n" not in message and "not a Retold store" not in message
    assert opened.row_counts() == before
    opened.close()


def test_a_migration_that_outwaits_the_lock_says_locked_and_leaves_the_file(store_path: Path) -> None:
    _store_with_a_record(store_path)
    execute(store_path, "DELETE FROM schema_migrations WHERE version = ?", LATEST)  # one pending
    before = _digest(store_path)
    with write_lock_held(store_path), pytest.raises(StoreLockedError, match=r"waiting 0\.\d s"):
        Store(store_path, busy_timeout_seconds=0.3)
    assert _digest(store_path) == before


# -- read-only ---------------------------------------------------------------------------------


def _read_only_copy(source: Path, folder: Path, *, with_wal: bool) -> Path:
    """A copy of an open store's file (and its -wal, holding changes not yet in the file),
    made read-only with chmod 0444."""
    folder.mkdir()
    for suffix in ("", "-wal") if with_wal else ("",):
        shutil.copy(f"{source}{suffix}", folder / f"copy.sqlite{suffix}")
        (folder / f"copy.sqlite{suffix}").chmod(0o444)
    return folder / "copy.sqlite"


def test_a_read_only_store_serves_reads_and_refuses_writes_with_one_line(store_path: Path) -> None:
    record_id = _store_with_a_record(store_path)
    before = _digest(store_path)
    opened = Store(store_path, read_only=True)
    assert opened.get_record(record_id) is not None
    with pytest.raises(StoreReadOnlyError) as caught:
        opened.write_record(make_record(scope=USER))
    assert "is read-only (store.read_only is set" in str(caught.value)
    assert "\n" not in str(caught.value)
    opened.close()
    assert _digest(store_path) == before


def test_a_read_only_copy_with_a_wal_shows_the_changes_in_its_wal(store_path: Path, tmp_path: Path) -> None:
    live = Store(store_path)
    record = make_record(scope=USER)
    live.write_record(record)  # committed to the -wal; no checkpoint while the store is open
    copy = _read_only_copy(store_path, tmp_path / "copy", with_wal=True)
    live.close()
    assert Path(f"{copy}-wal").stat().st_size > 0
    opened = Store(copy, read_only=True)
    assert opened.get_record(record.id) is not None
    with pytest.raises(StoreReadOnlyError):
        opened.append_event("probe", "test")
    opened.close()


@needs_non_root
def test_a_file_this_process_cannot_write_opens_read_only(store_path: Path, tmp_path: Path) -> None:
    record_id = _store_with_a_record(store_path)
    copy = _read_only_copy(store_path, tmp_path / "copy", with_wal=False)
    opened = Store(copy)
    assert opened.read_only and opened.get_record(record_id) is not None
    with pytest.raises(StoreReadOnlyError, match="the file is not writable by this process"):
        opened.write_record(make_record(scope=USER))
    opened.close()


@needs_non_root
def test_a_read_only_folder_serves_a_checkpointed_store_and_explains_a_pending_wal(
    store_path: Path, tmp_path: Path,
) -> None:
    record_id = _store_with_a_record(store_path)
    copy = _read_only_copy(store_path, tmp_path / "quiet", with_wal=False)
    copy.parent.chmod(0o555)
    try:
        opened = Store(copy)  # no -shm can be created, and none is needed
        assert opened.get_record(record_id) is not None
        opened.close()
    finally:
        copy.parent.chmod(0o755)
    live = Store(store_path)
    live.write_record(make_record(scope=USER))
    pending = _read_only_copy(store_path, tmp_path / "pending", with_wal=True)
    live.close()
    pending.parent.chmod(0o555)
    try:
        with pytest.raises(StoreReadOnlyError, match="-wal file holds changes"):
            Store(pending)
    finally:
        pending.parent.chmod(0o755)


def test_a_read_only_store_that_needs_a_migration_is_refused_untouched(store_path: Path) -> None:
    _store_with_a_record(store_path)
    execute(store_path, "DELETE FROM schema_migrations WHERE version = ?", LATEST)
    before = _digest(store_path)
    with pytest.raises(StoreReadOnlyError, match=f"needs a migration to {LATEST}"):
        Store(store_path, read_only=True)
    assert _digest(store_path) == before


def test_no_store_is_created_when_it_must_be_read_only(tmp_path: Path) -> None:
    with pytest.raises(StoreReadOnlyError, match="none is created"):
        Store(tmp_path / "missing.sqlite", read_only=True)
    assert list(tmp_path.iterdir()) == []


# -- full disk ---------------------------------------------------------------------------------


def test_a_full_disk_refuses_the_write_whole_and_keeps_serving_reads(store_path: Path) -> None:
    record_id = _store_with_a_record(store_path)
    full = FullDiskStore(store_path)
    before = full.row_counts()
    with pytest.raises(StoreFullError, match="the disk is full") as caught:
        full.write_record(make_record(scope=USER, content="x" * 200_000))
    assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
    assert full.row_counts() == before
    assert full.get_record(record_id) is not None
    full.close()


# -- not SQLite, not Retold's, damaged ------------------------------------------------------------


def test_another_applications_database_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "app.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    before = _digest(path)
    with pytest.raises(NotADatabaseError, match="another application"):
        Store(path)
    assert _digest(path) == before


def test_a_damaged_schema_page_is_reported_as_damage_when_opening(store_path: Path) -> None:
    _store_with_a_record(store_path)
    corrupt_page(store_path)
    before = _digest(store_path)
    with pytest.raises(StoreCorruptError, match="is damaged") as caught:
        Store(store_path)
    assert "not a Retold store" not in str(caught.value)
    assert _digest(store_path) == before


def test_a_damaged_table_page_is_reported_as_damage_when_read(store_path: Path) -> None:
    record_id = _store_with_a_record(store_path)
    corrupt_page(store_path, "records")
    opened = Store(store_path)  # the pages read while opening are intact
    with pytest.raises(StoreCorruptError, match="malformed"):
        opened.get_record(record_id)
    opened.close()


def test_a_second_store_on_a_file_keeps_other_processes_seeing_this_one(tmp_path: Path) -> None:
    # Opening a second Store in this process (as a runtime does for its search log writer)
    # must not drop this process's hold on the file: otherwise another process that
    # closes its connection believes it is the last one, deletes the WAL index, and this
    # process goes on reading a store frozen at that moment.
    import subprocess
    import sys

    path = tmp_path / "memory.sqlite"
    first = Store(path)
    second = first.second_connection()
    script = ("import sys; from retold.store import Store; s = Store(sys.argv[1]); "
              "[s.append_event('test.other_process', 'other', {'n': n}) for n in range(3)]; s.close()")
    for round_ in range(2):
        subprocess.run([sys.executable, "-c", script, str(path)], check=True, timeout=60)
        assert Path(f"{path}-shm").exists()
        assert len(first.events(kind="test.other_process")) == 3 * (round_ + 1)
        assert len(second.events(kind="test.other_process")) == 3 * (round_ + 1)
    second.close()
    first.close()


def test_a_postgresql_url_without_psycopg_is_one_line_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from retold.cli import main
    from retold.store import open_store

    monkeypatch.setitem(sys.modules, "psycopg", None)  # the `postgres` extra not installed
    url = "postgresql://retold:secret@127.0.0.1:5432/nowhere"
    with pytest.raises(StoreError, match="needs psycopg: install the `postgres` extra"):
        open_store(url)
    code = main(["search", "--store", url, "--agent", "a", "--user", "u", "anything"])
    err = capsys.readouterr().err
    assert code != 0 and len(err.strip().splitlines()) == 1, err
    assert "install the `postgres` extra" in err and "secret" not in err and "Traceback" not in err


@pytest.fixture
def read_only_mount(tmp_path: Path) -> Iterator[Path]:
    """A folder on a tmpfs of its own, to be remounted read-only: what a store on a
    read-only volume or backup mount sees, which no chmod reproduces for root. Skipped
    where this process may not mount."""
    folder = tmp_path / "mounted"
    folder.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(folder)],
                          capture_output=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot mount here: {made.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, check=False)


def _remount_read_only(folder: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True, capture_output=True)


def test_a_store_on_a_read_only_file_system_opens_for_reading(
        store_path: Path, read_only_mount: Path) -> None:
    record_id = _store_with_a_record(store_path)
    shutil.copy(store_path, read_only_mount / "memory.sqlite")  # checkpointed: no -wal
    _remount_read_only(read_only_mount)
    opened = Store(read_only_mount / "memory.sqlite")
    try:
        assert opened.read_only and opened.get_record(record_id) is not None
        with pytest.raises(StoreReadOnlyError, match="read-only file system"):
            opened.write_record(make_record(scope=USER))
    finally:
        opened.close()
    report = check_file(read_only_mount / "memory.sqlite")  # `retold check`: not damaged
    assert not report.damaged and "integrity_check" in report.checks, report.summary()
    assert sorted(p.name for p in read_only_mount.iterdir()) == ["memory.sqlite"]
