"""A write waits ``embedding.write_timeout_ms`` for its vector and no longer; a failing
encoder gives no vector and says why; the one-time model load is not held to the deadline."""

from __future__ import annotations

import time

import numpy as np

from retold.index.embedder import FakeEmbedder
from retold.ingest.write_vector import WriteVector


class _Slow(FakeEmbedder):
    def __init__(self, seconds: float, loaded: bool = True) -> None:
        super().__init__()
        self.seconds, self.loaded = seconds, loaded

    @property
    def is_loaded(self) -> bool:
        return self.loaded

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        time.sleep(self.seconds)
        return super().embed_documents(texts)


class _Down(FakeEmbedder):
    def embed_documents(self, texts: list[str]) -> np.ndarray:
        raise RuntimeError("the encoder is down")


def test_a_slow_encoder_leaves_the_write_without_a_vector_at_the_deadline() -> None:
    started = time.monotonic()
    vector, why = WriteVector(_Slow(1.0), 50)("Aditya cycles to work.")
    assert vector is None and why == "no vector within 50 ms"
    assert time.monotonic() - started < 0.5


def test_an_encoder_in_time_gives_the_vector_it_would_give_anyway() -> None:
    vector, why = WriteVector(_Slow(0.0), 2000)("Aditya cycles to work.")
    assert why is None and vector is not None
    assert np.allclose(vector, FakeEmbedder().embed_documents(["Aditya cycles to work."])[0])


def test_the_first_call_may_load_the_model_past_the_deadline() -> None:
    vector, why = WriteVector(_Slow(0.2, loaded=False), 50)("Aditya cycles to work.")
    assert why is None and vector is not None


def test_a_failing_encoder_says_so() -> None:
    assert WriteVector(_Down(), 2000)("Aditya cycles to work.") == (None, "encoder failed: RuntimeError")
