"""The cosine beyond the question's names: what a record says about what is asked."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from retold.retrieve.beyond_names import beyond_names


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
