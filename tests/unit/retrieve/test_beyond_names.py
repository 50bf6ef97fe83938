"""The cosine beyond the question's names: what a record says about what is asked."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from retold.index.vector import VectorIndex
from retold.retrieve.beyond_names import beyond_names, dense_beyond_names


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


# Orthonormal directions: a name, what is asked, and two other things a record may say.
NAME, ASKED, OTHER, MORE = np.linalg.qr(np.random.default_rng(7).standard_normal((16, 4)))[0].T


class Rows:
    """The index's ``rows`` over a fixed table of vectors."""

    def __init__(self, vectors: dict[str, np.ndarray]) -> None:
        self.vectors = vectors

    def rows(self, record_ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        present = np.array([rid in self.vectors for rid in record_ids])
        table = np.stack([self.vectors.get(rid, np.zeros(16)) for rid in record_ids])
        return table.astype(np.float32), present


def test_the_name_shared_by_every_record_no_longer_counts() -> None:
    question = unit(2 * NAME + ASKED)
    index = Rows({"answer": unit(2 * NAME + ASKED + OTHER), "neighbour": unit(2 * NAME + OTHER)})
    raw = {rid: float(question @ v) for rid, v in index.vectors.items()}
    # Both are close to the question on the name alone, the neighbour barely less so...
    assert raw["answer"] > raw["neighbour"] > 0.6
    beyond = beyond_names(index, ["answer", "neighbour", "gone"], question[None, :], NAME[None, :])
    # ...and apart once it is taken out; a record without a vector is left out.
    assert beyond["answer"] > 0.7 and abs(beyond["neighbour"]) < 1e-6
    assert "gone" not in beyond


def test_every_name_is_taken_out_and_the_best_query_counts() -> None:
    second = unit(NAME + MORE)  # a second name, not orthogonal to the first
    record = unit(NAME + MORE + ASKED)
    index = Rows({"r": record})
    # With only the first name removed, the second still lifts the cosine.
    one = beyond_names(index, ["r"], unit(NAME + MORE + OTHER)[None, :], NAME[None, :])["r"]
    both = beyond_names(index, ["r"], unit(NAME + MORE + OTHER)[None, :], np.stack([NAME, second]))["r"]
    assert one > 0.4 and abs(both) < 1e-6
    # Two queries: each record keeps its better one.
    queries = np.stack([unit(NAME + OTHER), unit(NAME + ASKED)])
    assert beyond_names(index, ["r"], queries, np.stack([NAME, second]))["r"] > 0.99


def test_nothing_to_compute_without_names_or_records() -> None:
    index = Rows({"r": unit(NAME + ASKED)})
    assert beyond_names(index, ["r"], unit(ASKED)[None, :], np.zeros((0, 16))) == {}
    assert beyond_names(index, [], unit(ASKED)[None, :], NAME[None, :]) == {}


def test_the_dense_channel_lists_what_is_asked_above_the_named_person_s_other_records() -> None:
    # "What did Oskar paint?" where Priya did the painting: on the plain cosine every record
    # about Oskar outranks hers; with half the score taken beyond the name hers comes first.
    question = unit(2 * NAME + ASKED)
    vectors = {"oskar_hike": unit(2 * NAME + OTHER), "oskar_job": unit(2 * NAME + MORE),
               "priya_paint": unit(ASKED + MORE), "unrelated": unit(OTHER + MORE)}
    index = VectorIndex("m", "1", 16)
    for rid, v in vectors.items():
        index.upsert(rid, v)
    eligible = set(vectors)
    plain = dense_beyond_names(index, question[None, :], NAME[None, :], eligible, 4, share=0.0)
    assert {rid for rid, _ in plain[:2]} == {"oskar_hike", "oskar_job"}  # tied on the name
    mixed = dense_beyond_names(index, question[None, :], NAME[None, :], eligible, 4, share=0.5)
    assert mixed[0][0] == "priya_paint"
    # The one product with the index gives the same remainder as the record-by-record one.
    beyond = beyond_names(Rows(vectors), list(vectors), question[None, :], NAME[None, :])
    for rid, score in mixed:
        assert score == pytest.approx(0.5 * float(question @ vectors[rid]) + 0.5 * beyond[rid], abs=1e-5)
    # Only eligible records are listed.
    assert {rid for rid, _ in dense_beyond_names(index, question[None, :], NAME[None, :],
                                                 {"unrelated"}, 4, share=0.5)} == {"unrelated"}
