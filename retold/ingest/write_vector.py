"""A write's document vector within a deadline, or the reason there is none.

A memory is worth keeping even when its vector cannot be had now: the lexical and entity
channels find it at once, and the backfill gives it its vector later. So a write waits
``embedding.write_timeout_ms`` for the encoder and otherwise goes on without the vector,
marking the record pending; an encoder that raises is treated the same way. The deadline
does not cover the first call of a process, which loads the model (seconds, once): a cold
agent would otherwise store its first memories without vectors for no fault of the encoder.
"""

from __future__ import annotations

import logging
import queue
import threading

import numpy as np

from retold.index.embedder import Embedder

__all__ = ["WriteVector"]

log = logging.getLogger(__name__)
_Result = tuple[np.ndarray | None, str | None]


class WriteVector:
    """Embeds one write's content under the configured deadline.

    The encoding runs on long-lived daemon threads fed by a queue: a hand-off costs a
    fraction of a millisecond where starting a thread per write cost several times that,
    and a daemon thread stuck in an encoder that never returns holds no write and no exit.
    """

    _WORKERS = 2  # writes of a process's threads are encoded two at a time

    def __init__(self, embedder: Embedder, timeout_ms: int) -> None:
        self.embedder, self.timeout_ms = embedder, timeout_ms
        self._jobs: queue.SimpleQueue[tuple[str, queue.SimpleQueue[_Result]]] = queue.SimpleQueue()
        self._started = False
        self._start_lock = threading.Lock()

    def __call__(self, text: str) -> _Result:
        """The vector, or None and why (the reason goes into the write's event)."""
        if not self.embedder.is_loaded:
            return self._embed(text)
        self._start()
        done: queue.SimpleQueue[_Result] = queue.SimpleQueue()
        self._jobs.put((text, done))
        try:
            return done.get(timeout=self.timeout_ms / 1000)
        except queue.Empty:
            log.warning("the encoder gave no vector within %d ms; the memory is stored and waits for"
                        " the backfill", self.timeout_ms)
            return None, f"no vector within {self.timeout_ms} ms"

    def _start(self) -> None:
        if self._started:
            return
        with self._start_lock:
            if not self._started:
                for n in range(self._WORKERS):
                    threading.Thread(target=self._serve, daemon=True, name=f"retold-write-embed-{n}").start()
                self._started = True

    def _serve(self) -> None:
        while True:
            text, done = self._jobs.get()
            done.put(self._embed(text))

    def _embed(self, text: str) -> _Result:
        try:
            return np.asarray(self.embedder.embed_documents([text])[0], dtype=np.float32), None
        except Exception as exc:  # noqa: BLE001 - any encoder failure leaves the write pending
            log.warning("the encoder failed (%s: %s); the memory is stored and waits for the backfill",
                        type(exc).__name__, exc)
            return None, f"encoder failed: {type(exc).__name__}"
