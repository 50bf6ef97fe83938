"""The query's embedding, computed on a helper thread while the store is read.

Encoding a query is the longest single step of a search (about 3 ms for MiniLM on ONNX
Runtime, one thread), and the lexical, alias and eligibility reads (about 1 ms at 10K
records) do not need its vector. ONNX Runtime and torch release the GIL while they run, so
the encoder on a helper thread and the store reads on the caller's thread overlap, and a
search returns about as much sooner. The encoder still runs on one thread of its own
(``embedding.torch_threads``); the search's own thread does the rest, as before
(docs/decisions.md, "The query is encoded beside the store reads").

The helper is one thread, started on the first search and replaced when a forked child
finds the parent's (a thread does not survive ``fork``). While it encodes for one search,
a search from another thread encodes on its own thread, as before, rather than queue
behind it. ``retrieval.encode_alongside: false`` encodes on the caller's thread.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from retold.index.embedder import Embedder, Matrix

__all__ = ["PendingQueries", "QueryEncoder"]


class PendingQueries:
    """The vectors of one search's queries, being computed or already there."""

    def __init__(self, future: Future[tuple[Matrix, float]] | None,
                 done: tuple[Matrix, float] | None = None) -> None:
        self._future, self._done = future, done

    def result(self) -> tuple[Matrix, float]:
        """``(vectors, ms the encoder spent)``; re-raises what the encoder raised."""
        if self._done is None:
            assert self._future is not None
            self._done = self._future.result()
        return self._done


def _encode(embedder: Embedder, queries: list[str]) -> tuple[Matrix, float]:
    started = time.perf_counter()
    vectors = embedder.embed_queries(queries)
    return vectors, (time.perf_counter() - started) * 1000.0


class QueryEncoder:
    """Starts each search's query encoding, on a helper thread when ``alongside``."""

    def __init__(self, embedder: Embedder, alongside: bool) -> None:
        self.embedder, self.alongside = embedder, alongside
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._pid = 0
        self._busy = False  # the helper is encoding for a search

    def start(self, queries: list[str]) -> PendingQueries:
        """Begin encoding ``queries``; the caller collects the vectors with ``result()``."""
        pool = self._claim() if self.alongside else None
        if pool is None:
            return PendingQueries(None, _encode(self.embedder, queries))
        return PendingQueries(pool.submit(self._encode_on_helper, queries))

    def _encode_on_helper(self, queries: list[str]) -> tuple[Matrix, float]:
        try:
            return _encode(self.embedder, queries)
        finally:  # before the future completes, so the search that waited finds it free
            with self._lock:
                self._busy = False

    def _claim(self) -> ThreadPoolExecutor | None:
        """The helper's executor, marked busy; None while it serves another search."""
        with self._lock:
            if self._pool is None or self._pid != os.getpid():
                # A child of fork holds the parent's executor without its thread: a new one.
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="retold-encode")
                self._pid = os.getpid()
                self._busy = False
            elif self._busy:
                return None
            self._busy = True
            return self._pool

    def close(self) -> None:
        """Let the helper thread end once it is idle; a later search starts a new one."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None and self._pid == os.getpid():
            pool.shutdown(wait=False)
