"""The query encoded beside the store reads: the same answer, the encoder's own failure,
and a helper thread that a forked child replaces."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest

from retold.errors import ModelError
from retold.index.embedder import FakeEmbedder
from retold.models import SearchRequest
from retold.retrieve.query_encoding import QueryEncoder
from retold.testing import World


class ThreadNotingEmbedder(FakeEmbedder):
    """The fake embedder, noting which thread encoded each query."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[str] = []

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        self.threads.append(threading.current_thread().name)
        return super().embed_queries(texts)


class BrokenEmbedder(FakeEmbedder):
    def embed_queries(self, texts: list[str]) -> np.ndarray:
        raise ModelError("the encoder failed")


def test_a_search_answers_the_same_with_the_encoder_beside_the_reads(world: World) -> None:
    world.write(content="Aditya prefers concise technical explanations.", attribute="style")
    world.write(content="Aditya reviews pull requests before lunch.", attribute="review_habit")
    retriever = world.rt.retriever
    request = SearchRequest(queries=["concise technical explanations", "pull requests"])
    beside = retriever.search(world.p, request).response
    retriever.encoder = QueryEncoder(world.rt.embedder, alongside=False)
    inline = retriever.search(world.p, request).response
    assert [(r.record.id, r.score) for r in beside.results] == \
        [(r.record.id, r.score) for r in inline.results]
    assert beside.results  # the question has an answer
    for timings in (beside.timings_ms, inline.timings_ms):
        assert timings["embed_wait"] <= timings["total"] and timings["embed"] >= 0


def test_the_encoder_runs_on_its_helper_thread_only_when_asked() -> None:
    embedder = ThreadNotingEmbedder()
    QueryEncoder(embedder, alongside=True).start(["a question"]).result()
    QueryEncoder(embedder, alongside=False).start(["another question"]).result()
    assert embedder.threads[0].startswith("retold-encode")
    assert embedder.threads[1] == threading.current_thread().name


class GatedEmbedder(ThreadNotingEmbedder):
    """Holds the encoding of "slow" until released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        if texts == ["slow"]:
            self.release.wait(5)
        return super().embed_queries(texts)


def test_a_second_search_does_not_queue_behind_a_busy_helper() -> None:
    # Two threads of a host search at once: the second encodes on its own thread.
    embedder = GatedEmbedder()
    encoder = QueryEncoder(embedder, alongside=True)
    slow = encoder.start(["slow"])
    fast, _ = encoder.start(["fast"]).result()  # would wait for "slow" if it queued
    assert fast.shape == (1, 384)
    assert embedder.threads == [threading.current_thread().name]  # "slow" still held
    embedder.release.set()
    slow.result()
    assert embedder.threads[-1].startswith("retold-encode")
    encoder.start(["again"]).result()  # the helper is free again
    assert embedder.threads[-1].startswith("retold-encode")


def test_an_encoder_failure_reaches_the_search_as_itself(world: World) -> None:
    world.rt.retriever.encoder = QueryEncoder(BrokenEmbedder(), alongside=True)
    with pytest.raises(ModelError, match="the encoder failed"):
        world.rt.retriever.search(world.p, SearchRequest(queries=["anything"]))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_encodes_on_a_thread_of_its_own(tmp_path: Path) -> None:
    # A thread does not survive fork: a child using the parent's executor would wait forever.
    encoder = QueryEncoder(FakeEmbedder(), alongside=True)
    encoder.start(["before the fork"]).result()
    done = tmp_path / "child-encoded"
    pid = os.fork()
    if pid == 0:  # the child: exit without running the parent's cleanup
        try:
            vectors, _ = encoder.start(["after the fork"]).result()
            done.write_text(str(vectors.shape))
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert status == 0 and done.read_text() == "(1, 384)"


def test_closing_the_runtime_ends_the_helper_thread(world: World) -> None:
    def encoders() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name.startswith("retold-encode")}

    before = encoders()
    world.rt.retriever.search(world.p, SearchRequest(queries=["warm the helper"]))
    started = encoders() - before
    assert len(started) == 1
    world.rt.close()
    for thread in started:
        thread.join(5)
        assert not thread.is_alive()


class TextNotingEmbedder(FakeEmbedder):
    """The fake embedder, noting which thread encoded which texts (cache misses only)."""

    def __init__(self) -> None:
        super().__init__()
        self.encoded: list[tuple[str, list[str]]] = []

    def _encode(self, texts: list[str]) -> np.ndarray:
        self.encoded.append((threading.current_thread().name, list(texts)))
        return super()._encode(texts)


def test_a_name_written_in_the_question_is_encoded_beside_it(tmp_path: Path) -> None:
    from retold.testing import make_world

    world = make_world(tmp_path)
    world.write(content="Mateo painted the lighthouse mural.", attribute="painting",
                entities=[("person", "Mateo", "about")])
    world.write(content="Priya painted the harbour at dusk.", attribute="painting_2",
                entities=[("person", "Priya", "about")])
    embedder = TextNotingEmbedder()
    retriever = world.rt.retriever
    retriever.embedder = retriever.encoder.embedder = embedder
    retriever.encoder = QueryEncoder(embedder, alongside=True)
    found = retriever.search(world.p, SearchRequest(queries=["What did Mateo paint?"])).response
    assert found.results and "Mateo" in found.results[0].record.content
    by_text = {text: thread for thread, texts in embedder.encoded for text in texts}
    # The name went to the names helper while the query went to the query helper, and the
    # search's own thread encoded neither: the dense channel's names pass found it cached.
    assert by_text["mateo"] == "retold-encode-names_0"
    assert by_text["What did Mateo paint?"].startswith("retold-encode_")
    assert threading.current_thread().name not in by_text.values()
    world.rt.close()
