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
import threading

import numpy as np

from retold.index.embedder import Embedder

__all__ = ["WriteVector"]

log = logging.getLogger(__name__)


class WriteVector:
    """Embeds one write's content under the configured deadline."""

    def __init__(self, embedder: Embedder, timeout_ms: int) -> None:
        self.embedder, self.timeout_ms = embedder, timeout_ms

    def __call__(self, text: str) -> tuple[np.ndarray | None, str | None]:
        """The vector, or None and why (the reason goes into the write's event)."""
        if not self.embedder.is_loaded:
            return self._embed(text)
        out: list[tuple[np.ndarray | None, str | None]] = []
        # A daemon thread, so an encoder that never returns holds no write and no exit.
        worker = threading.Thread(target=lambda: out.append(self._embed(text)), daemon=True,
                                  name="retold-write-embed")
        worker.start()
        worker.join(self.timeout_ms / 1000)
        if not out:
            log.warning("the encoder gave no vector within %d ms; the memory is stored and waits for"
                        " the backfill", self.timeout_ms)
            return None, f"no vector within {self.timeout_ms} ms"
        return out[0]

    def _embed(self, text: str) -> tuple[np.ndarray | None, str | None]:
        try:
            return np.asarray(self.embedder.embed_documents([text])[0], dtype=np.float32), None
        except Exception as exc:  # noqa: BLE001 - any encoder failure leaves the write pending
            log.warning("the encoder failed (%s: %s); the memory is stored and waits for the backfill",
                        type(exc).__name__, exc)
            return None, f"encoder failed: {type(exc).__name__}"
