"""The query's embedding, computed on a helper thread while the store is read.

Encoding a query is the longest single step of a search (about 3 ms for MiniLM on ONNX
Runtime, one thread), and the lexical, alias and eligibility reads (about 1 ms at 10K
records) do not need its vector. ONNX Runtime and torch release the GIL while they run, so
the encoder on a helper thread and the store reads on the caller's thread overlap, and a
search returns about as much sooner. The encoder still runs on one thread of its own
(``embedding.torch_threads``); the search's own thread does the rest, as before
(docs/decisions.md, "The query is encoded beside the store reads").

A question that names someone may need the names' own vectors too (the dense channel
scores what a record says beyond the names, :mod:`retold.retrieve.beyond_names`). Which
names count is known only after the lexical read, but the names written as names
(capitalised words, identifiers, numbers) are visible in the text: a second helper encodes
those beside the queries, so a search that needs them finds them in the embedder's cache
instead of encoding them after the queries (3 to 5 ms on one thread). A search that turns
out not to need them spent a thread's time for nothing, never its own.

Each helper is one thread, started on first use and replaced when a forked child finds the
parent's (a thread does not survive ``fork``). While one encodes for one search, a search
from another thread encodes on its own thread, as before, rather than queue behind it.
``retrieval.encode_alongside: false`` encodes everything on the caller's thread.
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


class _Helper:
    """One encoding thread, started on first use and replaced in a forked child; busy while
    it encodes for one search."""

    def __init__(self, embedder: Embedder, name: str) -> None:
        self.embedder, self.name = embedder, name
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._pid = 0
        self._busy = False

    def submit(self, texts: list[str]) -> PendingQueries | None:
        """Encode ``texts`` on this helper; None while it serves another search."""
        pool = self._claim()
        return None if pool is None else PendingQueries(pool.submit(self._encode, texts))

    def _encode(self, texts: list[str]) -> tuple[Matrix, float]:
        try:
            return _encode(self.embedder, texts)
        finally:  # before the future completes, so the search that waited finds it free
            with self._lock:
                self._busy = False

    def _claim(self) -> ThreadPoolExecutor | None:
        with self._lock:
            if self._pool is None or self._pid != os.getpid():
                # A child of fork holds the parent's executor without its thread: a new one.
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self.name)
                self._pid = os.getpid()
                self._busy = False
            elif self._busy:
                return None
            self._busy = True
            return self._pool

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None and self._pid == os.getpid():
            pool.shutdown(wait=False)


class QueryEncoder:
    """Starts each search's query encoding, on a helper thread when ``alongside``; and the
    names the question seems to hold, on a second one."""

    def __init__(self, embedder: Embedder, alongside: bool) -> None:
        self.embedder, self.alongside = embedder, alongside
        self._queries = _Helper(embedder, "retold-encode")
        self._names = _Helper(embedder, "retold-encode-names")

    def start(self, queries: list[str]) -> PendingQueries:
        """Begin encoding ``queries``; the caller collects the vectors with ``result()``."""
        pending = self._queries.submit(queries) if self.alongside else None
        return pending if pending is not None else PendingQueries(None, _encode(self.embedder, queries))

    def start_names(self, names: list[str]) -> PendingQueries | None:
        """Begin encoding the names a question seems to hold, beside its queries, so a search
        that turns out to need their vectors finds them in the embedder's cache rather than
        encoding them after the queries. None (nothing started) when there are none, when
        encoding runs on the caller's thread, or while the helper serves another search."""
        if not (names and self.alongside):
            return None
        return self._names.submit(names)

    def close(self) -> None:
        """Let the helper threads end once they are idle; a later search starts new ones."""
        self._queries.close()
        self._names.close()
