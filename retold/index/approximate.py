"""ApproximateGraph: an HNSW graph over a VectorIndex's rows, for very large eligible sets.

The graph comes from faiss (the ``scale`` extra); without it :func:`graph_available` is
false and the index stays exact. Node ids are the index's matrix row positions, so an
eligible set becomes a bitmap over positions that the graph traversal itself honours: rows
outside it are walked through but never returned, which keeps a small eligible share from
being crowded out of the candidates by rows a post-filter would drop.

The graph only proposes candidates. :class:`~retold.index.vector.VectorIndex` scores them
exactly against the matrix, so a row that changed after the build cannot be ranked on its
old vector.
"""

from __future__ import annotations

import importlib
import importlib.util
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["ApproximateGraph", "build_graph", "graph_available"]

# Rows added to the graph between two looks at the stop flag: a fraction of a second of
# building, so closing an index mid-build waits no longer than that.
_ADD_BATCH = 2048


def graph_available() -> bool:
    """Whether faiss can be imported here (checked without importing it)."""
    try:
        return importlib.util.find_spec("faiss") is not None
    except (ImportError, ValueError):
        return False


@dataclass(frozen=True, slots=True)
class ApproximateGraph:
    """An HNSW graph over rows ``0 .. rows-1`` of the matrix it was built from.

    ``epoch`` names the matrix layout it belongs to: a reload renumbers the rows, and a
    graph of another epoch is never used."""

    index: Any  # faiss.IndexHNSWFlat; faiss ships no type information
    rows: int
    epoch: int

    @property
    def nbytes(self) -> int:
        """Bytes the graph keeps: its own copy of the rows and its neighbour lists."""
        return int(self.rows * self.index.d * 4 + self.index.hnsw.neighbors.size() * 4)

    def candidates(self, queries: np.ndarray, allowed: np.ndarray, per_query: int,
                   ef_search: int) -> np.ndarray:
        """Sorted unique row positions the graph proposes for any of ``queries`` (float32,
        (q, dims)), restricted to ``allowed`` (bool over the graph's rows), up to
        ``per_query`` each. faiss releases the GIL while it searches."""
        faiss = importlib.import_module("faiss")
        bitmap = np.packbits(allowed, bitorder="little")  # bit i of byte i // 8 is row i
        selector = faiss.IDSelectorBitmap(self.rows, faiss.swig_ptr(bitmap))
        params = faiss.SearchParametersHNSW(sel=selector, efSearch=max(ef_search, per_query))
        # ``bitmap`` stays referenced until the search returns: the selector holds only a
        # pointer into it.
        _, found = self.index.search(np.ascontiguousarray(queries, dtype=np.float32),
                                     per_query, params=params)
        return np.unique(found[found >= 0]).astype(np.int64)


def build_graph(rows: np.ndarray, m: int, ef_construction: int, epoch: int,
                stop: threading.Event | None = None) -> ApproximateGraph | None:
    """An inner-product HNSW graph over ``rows`` (float32, L2-normalised, so inner product is
    cosine), or None when ``stop`` was set before it was done. Slow (seconds per hundred
    thousand rows): run it off the search thread.

    The rows go in a batch at a time, and ``stop`` is looked at between batches: a process
    that closes its index, or exits, while a graph is being built must not leave a thread
    inside the library's native code, which aborted the whole process at exit."""
    faiss = importlib.import_module("faiss")
    index = faiss.IndexHNSWFlat(rows.shape[1], m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = ef_construction
    for start in range(0, rows.shape[0], _ADD_BATCH):
        if stop is not None and stop.is_set():
            return None
        index.add(np.ascontiguousarray(rows[start:start + _ADD_BATCH], dtype=np.float32))
    return ApproximateGraph(index=index, rows=int(rows.shape[0]), epoch=epoch)
