"""SearchLogWriter: a search's log row reaches the store without the search waiting for it.

Writing the row takes the store's write lock, and with several processes on one file the
wait for that lock was most of a slow search's time. In the default ``background`` mode a
search hands its finished row to :meth:`SearchLogWriter.submit` and returns; one daemon
thread writes queued rows in batches, one transaction per batch, through a second
connection to the same file, so while it queues on ``busy_timeout`` this process's reads
go on through the store's own connection. ``inline`` mode (and an in-memory store, which
no second connection can share) writes the row inside the search instead.

A row's JSON columns may arrive as :class:`LogJson` values, serialised when the row is
written: in background mode that work happens on the writer thread, after the search
has answered.

A caller that does more work with the answer (the tool layer renders the result) can hold
its rows with :meth:`SearchLogWriter.held` until that work is done: a woken writer thread
serialising a row contends for the interpreter lock with the thread still answering.

Either way a log row never costs a search its answer: a full queue drops the row, and a
failed write (the lock held past ``busy_timeout``, a read-only file, a full disk) drops its
batch. Both are counted in :meth:`SearchLogWriter.stats` and logged once per burst. See
docs/decisions.md, "Search-log rows are written off the search path".
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from retold.clock import to_iso
from retold.config import SearchLogConfig
from retold.store import Store

__all__ = ["LogJson", "SearchLogStats", "SearchLogWriter", "log_json"]

log = logging.getLogger(__name__)

Row = Mapping[str, Any]
# An idle writer thread ends after this long, closing its connection; the next row starts
# a new one. A process that stopped searching holds no second connection.
_IDLE_SECONDS = 30.0


def log_json(value: Any) -> str:
    """A search-log JSON column: datetimes as store text, anything else unknown as str."""
    return json.dumps(value, default=lambda v: to_iso(v) if isinstance(v, datetime) else str(v))


class LogJson:
    """A JSON column whose text is made when the row is written, not during the search.

    ``build`` returns the value to serialise. It must read only what the search will not
    change after it hands the row over (values built for the row, frozen hits), because
    it may run on the writer thread after the search has returned.
    """

    __slots__ = ("_build",)

    def __init__(self, build: Callable[[], Any]) -> None:
        self._build = build

    def text(self) -> str:
        return log_json(self._build())


def _materialise(row: Row) -> dict[str, Any]:
    return {key: value.text() if isinstance(value, LogJson) else value for key, value in row.items()}


@dataclass(frozen=True)
class SearchLogStats:
    """What happened to the rows handed to one writer since it was built."""

    submitted: int  # rows handed over by searches
    written: int  # committed to search_log
    dropped: int  # never attempted: the queue was full or the writer closed
    failed: int  # their write failed (lock timeout, read-only file, full disk, ...)
    erased: int  # left out because their user or session was erased after the search began
    pending: int  # queued or being written now


class SearchLogWriter:
    """Writes search_log rows for one process, in the background unless configured inline."""

    def __init__(self, store: Store, config: SearchLogConfig, *,
                 idle_seconds: float = _IDLE_SECONDS, discard: bool = False) -> None:
        self._store = store
        self._config = config
        # Searches that are no user's (comparing two stores after a move) leave no row, so
        # the log and the metrics read from it keep describing what users asked.
        self.discard = discard
        self.background = config.writes == "background" and store.path != ":memory:"
        self._idle_seconds = idle_seconds
        self._queue: queue.Queue[Row | None] = queue.Queue(maxsize=config.queue_size)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # a row was settled
        self._thread: threading.Thread | None = None
        self._closed = False
        self._submitted = self._written = self._dropped = self._failed = self._erased = 0
        self._failing = 0  # rows failed in the current burst (0: the last write succeeded)
        self._dropping = 0  # rows dropped in the current burst of a full queue
        self._holds = threading.local()  # rows a thread holds back until its answer is out

    # -- the search side -----------------------------------------------------------------

    @contextmanager
    def held(self) -> Iterator[None]:
        """Keep this thread's rows until the block ends, then hand them over.

        The writer starts on a row at once; while it serialises the row it competes for
        the interpreter lock with the thread still building its answer (about a third of a
        millisecond of a tool call at 10K records on two cores). Holding the rows until the
        answer is built moves that work after it. Rows are handed over even when the block
        raises; nested blocks hand over at the outermost one. Inline writes are not held:
        no thread competes with them, and the search's log stage keeps counting the write.
        """
        rows: list[Row] | None = getattr(self._holds, "rows", None)
        if rows is not None or not self.background:
            yield
            return
        self._holds.rows = rows = []
        try:
            yield
        finally:
            self._holds.rows = None
            for row in rows:
                self.submit(row)

    def submit(self, row: Row) -> None:
        """Hand over one complete row; never raises and, in background mode, never waits.

        Inside :meth:`held` the row waits in this thread's list until the block ends."""
        if self.discard:
            return
        holding: list[Row] | None = getattr(self._holds, "rows", None)
        if holding is not None:
            holding.append(row)
            return
        if not self.background:
            with self._lock:
                self._submitted += 1
            self._write([row], self._store)
            return
        with self._lock:
            self._submitted += 1
            if self._closed:
                self._drop("the search log writer is closed")
                return
            try:
                self._queue.put_nowait(row)
            except queue.Full:
                self._drop(f"the search log queue is full ({self._config.queue_size} rows)")
                return
            if self._dropping:
                log.warning("search log queue accepts rows again; %d rows were dropped", self._dropping)
                self._dropping = 0
            if self._thread is None:
                # Started on the first row, never at construction: building a runtime
                # starts no thread.
                self._thread = threading.Thread(target=self._run, name="retold-search-log",
                                                daemon=True)
                self._thread.start()

    def _drop(self, why: str) -> None:
        """Count a row that will not be written (the caller holds the lock)."""
        self._dropped += 1
        if not self._dropping:
            log.warning("search log row dropped: %s; the search is unaffected", why)
        self._dropping += 1
        self._changed.notify_all()

    # -- waiting and closing ---------------------------------------------------------------

    def flush(self, timeout_seconds: float | None = None) -> bool:
        """Wait until every row submitted so far is written, failed or dropped; False when
        ``timeout_seconds`` (default ``flush_timeout_seconds``) ran out first."""
        timeout = self._config.flush_timeout_seconds if timeout_seconds is None else timeout_seconds
        with self._changed:
            target = self._submitted
            return self._changed.wait_for(lambda: self._settled() >= target, timeout)

    def close(self, timeout_seconds: float | None = None) -> bool:
        """Refuse new rows, write the queued ones (waiting at most ``timeout_seconds``) and
        stop the thread; True when nothing was left behind. Safe to call twice."""
        started = time.monotonic()
        with self._lock:
            self._closed = True
        flushed = self.flush(timeout_seconds)
        with self._lock:
            thread = self._thread
            left = self._submitted - self._settled()
        if thread is not None:
            try:
                self._queue.put_nowait(None)  # the stop mark, after every queued row
            except queue.Full:
                pass  # still blocked on a write; it is a daemon thread and dies with us
            else:
                budget = self._config.flush_timeout_seconds if timeout_seconds is None else timeout_seconds
                thread.join(max(0.0, budget - (time.monotonic() - started)))
        if left:
            log.warning("search log writer closed with %d rows not written", left)
        return flushed

    def stats(self) -> SearchLogStats:
        """Counts since this writer was built."""
        with self._lock:
            return SearchLogStats(self._submitted, self._written, self._dropped, self._failed,
                                  self._erased, self._submitted - self._settled())

    def _settled(self) -> int:
        return self._written + self._dropped + self._failed + self._erased

    # -- the writer thread -----------------------------------------------------------------

    def _run(self) -> None:
        store: Store | None = None
        try:
            while True:
                try:
                    first = self._queue.get(timeout=self._idle_seconds)
                except queue.Empty:
                    with self._lock:
                        # Under the lock: a row submitted from now on starts a new thread.
                        if self._queue.empty():
                            self._thread = None
                            return
                    continue
                if first is None:
                    return
                batch = [first]
                stop = False
                while len(batch) < self._config.batch_size:
                    try:
                        more = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        stop = True
                        break
                    batch.append(more)
                if store is None:
                    store = self._open(len(batch))
                if store is not None:
                    self._write(batch, store)
                if stop:
                    return
        finally:
            with self._lock:
                if self._thread is threading.current_thread():
                    self._thread = None
            if store is not None:
                store.close()

    def _open(self, rows: int) -> Store | None:
        """The writer's own connection; a failure fails this batch, and the next batch tries
        again."""
        try:
            return self._store.second_connection()
        except Exception as exc:  # noqa: BLE001 - see _write
            self._failed_rows(rows, exc)
            return None

    def _write(self, batch: Sequence[Row], store: Store) -> None:
        try:
            # Inside the try: a column that fails to serialise fails its batch, never the
            # writer thread.
            written = store.insert_search_logs([_materialise(row) for row in batch])
        except Exception as exc:  # noqa: BLE001 - a log row must never fail or stop a search
            self._failed_rows(len(batch), exc)
            return
        with self._lock:
            self._written += written
            self._erased += len(batch) - written
            if self._failing:
                log.warning("search log writes succeed again; %d rows failed before", self._failing)
                self._failing = 0
            self._changed.notify_all()

    def _failed_rows(self, rows: int, exc: Exception) -> None:
        with self._lock:
            self._failed += rows
            if not self._failing:
                log.warning("search log write failed (%s: %s); rows are dropped until a write"
                            " succeeds, searches are unaffected", type(exc).__name__, exc)
            self._failing += rows
            self._changed.notify_all()
