"""VectorIndex: the in-RAM projection of compatible embedding rows.

Exact cosine search over a private, L2-normalised float32 matrix. The matrix grows by
doubling and is never handed out: callers get ids and scores, copies of a few rows
(``vector_for``, ``rows``), or pairwise cosines. One lock guards every read and write, so
a concurrent refresh cannot move a row between building the eligibility mask and the
matrix product.

A very large eligible set (``index.approximate.min_rows`` rows or more) takes its
candidates from an HNSW graph (:mod:`retold.index.approximate`) once one has been built in
the background, then scores them exactly: see ``search``.
"""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from collections.abc import Callable, Collection, Sequence
from itertools import repeat
from typing import TYPE_CHECKING, Literal

import numpy as np

from retold.config import ApproximateConfig
from retold.index.approximate import ApproximateGraph, build_graph, graph_available
from retold.store.eligible import EligibleSet

if TYPE_CHECKING:
    from retold.store import Store

__all__ = ["RefreshOutcome", "VectorIndex"]

log = logging.getLogger(__name__)

RefreshOutcome = Literal["current", "delta", "reload"]

_MIN_CAPACITY = 1024
# Below this share of rows, scoring only the eligible rows beats one full matrix product.
_GATHER_FRACTION = 0.25
# Rows per block when eligible rows are scored without being copied out first.
_CHUNK = 2048
# Candidates asked of the graph per query: a wide net, since every one is rescored exactly.
_MIN_CANDIDATES = 200


# Indexes whose graph may be building, stopped when the interpreter exits: a thread left
# inside the graph library's native code at exit aborted the process (exit status 134)
# instead of letting it end. Registered the first time a build starts, not on import.
_building: weakref.WeakSet[VectorIndex] = weakref.WeakSet()
_exit_hook = False


def _stop_at_exit(index: VectorIndex) -> None:
    global _exit_hook
    _building.add(index)
    if not _exit_hook:
        _exit_hook = True
        atexit.register(_stop_builds)


def _stop_builds() -> None:
    for index in list(_building):
        index.close()


def _capacity(rows: int) -> int:
    """The matrix rows an index keeps for ``rows`` vectors: the next power of two, so
    growth by writes copies the matrix rarely."""
    return max(_MIN_CAPACITY, 1 << max(rows - 1, 0).bit_length())


class VectorIndex:
    """Exact dense search restricted to an eligible id set."""

    def __init__(self, model: str, version: str, dims: int,
                 approximate: ApproximateConfig | None = None) -> None:
        self.model = model
        self.version = version
        self.dims = dims
        self._lock = threading.RLock()
        self._matrix = np.zeros((_MIN_CAPACITY, dims), dtype=np.float32)
        self._live = np.zeros(_MIN_CAPACITY, dtype=bool)
        self._ids: list[str] = []
        self._pos: dict[str, int] = {}
        # seq -> row (-1: unknown). Lets search turn an EligibleSet into positions with
        # one array lookup; ids the table does not know fall back to ``_pos``.
        self._seq_pos = np.full(_MIN_CAPACITY, -1, dtype=np.int64)
        self._applied: dict[str, int] = {}  # record id -> index_version this process holds
        self.loaded_version = -1  # records_version the projection reflects; -1: never loaded
        # Bumped by every change to rows, liveness or the seq table; keys _gathered.
        self._generation = 0
        self._out_of_step_said = False  # a refresh found a row it counted as applied missing
        # (eligible set token, generation, positions, their rows once copied): the last
        # search's eligible rows, copied when its set is searched a second time. Agents
        # search one eligible set many times between writes, and copying its rows out of
        # the matrix was most of a dense search.
        self._gathered: tuple[int, int, np.ndarray, np.ndarray | None] | None = None
        # The approximate path. ``_epoch`` numbers matrix layouts (a load renumbers rows);
        # ``_dirty`` holds the rows written since the graph's rows were read, which search
        # scores exactly, and ``_pending`` the same for a build still running.
        self._approx = approximate or ApproximateConfig()
        self._epoch = 0
        self._graph: ApproximateGraph | None = None
        self._dirty: set[int] = set()
        self._pending: set[int] | None = None
        self._builder: threading.Thread | None = None
        self._no_graph = False  # faiss is missing, or a build failed: stay exact
        self._closed = threading.Event()  # close() was called: stop building graphs
        self.approximate_searches = 0  # searches answered through the graph (diagnostics)

    # -- diagnostics (snapshots, never the live structures) ------------------------------

    @property
    def ids(self) -> list[str]:
        with self._lock:
            return list(self._ids)

    @property
    def pos(self) -> dict[str, int]:
        with self._lock:
            return dict(self._pos)

    @property
    def live(self) -> np.ndarray:
        with self._lock:
            return self._live[: len(self._ids)].copy()

    @property
    def is_loaded(self) -> bool:
        return self.loaded_version >= 0

    def __len__(self) -> int:
        """Number of live rows."""
        with self._lock:
            return int(self._live[: len(self._ids)].sum())

    @property
    def nbytes(self) -> int:
        """Bytes this index keeps for its vectors (the matrix with its spare capacity, the
        rows kept for a repeated eligible set, and the approximate graph when there is
        one): what a process budget counts."""
        with self._lock:
            kept = self._gathered[3] if self._gathered is not None else None
            graph = self._graph
            return int(self._matrix.nbytes + self._seq_pos.nbytes
                       + (0 if kept is None else kept.nbytes) + (0 if graph is None else graph.nbytes))

    # -- loading and refresh --------------------------------------------------------------

    def load(self, store: Store) -> None:
        """Rebuild the projection from every compatible row in the store."""
        snap = store.load_vectors(self.model, self.version, self.dims, room=_capacity)
        n = len(snap.ids)
        capacity = _capacity(n)
        base = snap.matrix.base
        if (isinstance(base, np.ndarray) and base.shape == (capacity, self.dims)
                and base.dtype == np.float32 and base.flags.c_contiguous
                and base.ctypes.data == snap.matrix.ctypes.data):
            matrix = base  # the store filled our capacity already: no second copy
        else:
            matrix = np.zeros((capacity, self.dims), dtype=np.float32)
            matrix[:n] = snap.matrix
        live = np.zeros(capacity, dtype=bool)
        live[:n] = True
        seq_pos = np.full(max(_MIN_CAPACITY, int(snap.seqs.max(initial=0)) * 2 + 1), -1, np.int64)
        seq_pos[snap.seqs] = np.arange(n)
        with self._lock:
            self._generation += 1
            self._matrix, self._live, self._seq_pos = matrix, live, seq_pos
            self._ids = list(snap.ids)
            self._pos = {record_id: i for i, record_id in enumerate(snap.ids)}
            self._applied = dict(zip(snap.ids, snap.index_versions.tolist(), strict=True))
            self.loaded_version = snap.records_version
            self._epoch += 1  # positions changed meaning: the graph and its dirty rows go
            self._graph, self._dirty, self._pending = None, set(), None
            self._maybe_build()

    def refresh(self, store: Store, incremental_reload_max: int, *,
                version: int | None = None) -> RefreshOutcome:
        """Catch up with other processes' writes before a dense search.

        Changes this process already applied (same or newer index_version) are skipped,
        so local writes never count towards ``incremental_reload_max``: when nothing else
        changed the index advances its version and reports ``current``. A version counts as
        applied only while this index holds the row it describes: a change this process
        made to a record another process wrote (a confirm, a reinforcement) leaves the row
        to be loaded here, and a row found missing that way is loaded (and said once).
        ``version`` is a ``records_version`` the caller has just read, which saves reading
        it again. See ``docs/architecture.md``, "Index coherence across processes".
        """
        if not self.is_loaded:
            self.load(store)
            return "reload"
        if (store.records_version() if version is None else version) == self.loaded_version:
            return "current"
        durable, changes = store.index_changes(self.loaded_version, self.model, self.version, self.dims)
        with self._lock:
            fresh = []
            for change in changes:
                mine = self._applied.get(change.record_id, -1) >= change.index_version
                if mine and (change.vector is None or self._holds(change.record_id)):
                    # our own write: learn its seq, which a local upsert may not know
                    self._learn_seq(change.record_id, change.seq)
                    continue
                if mine and not self._out_of_step_said:
                    self._out_of_step_said = True
                    log.warning("vector index: record %s was counted as applied but its row was "
                                "missing; loading it from the store", change.record_id)
                fresh.append(change)
            if not fresh:
                self.loaded_version = max(self.loaded_version, durable)
                return "current"
            if len(fresh) > incremental_reload_max:
                reload = True
            else:
                reload = False
                for change in fresh:
                    if change.vector is None:
                        self.remove(change.record_id, change.index_version)
                    else:
                        self.upsert(change.record_id, change.vector, change.index_version, change.seq)
                self.loaded_version = max(self.loaded_version, durable)
        if reload:
            self.load(store)
            return "reload"
        return "delta"

    # -- writes from this process ----------------------------------------------------------

    def upsert(
        self,
        record_id: str,
        vec: np.ndarray,
        index_version: int | None = None,
        seq: int | None = None,
    ) -> None:
        """Add or overwrite a row; ``index_version`` is the version the write committed
        and ``seq`` the record's integer key (``Record.seq``), when the caller knows it."""
        row = np.asarray(vec, dtype=np.float32).reshape(-1)
        if row.shape[0] != self.dims:
            raise ValueError(f"vector has {row.shape[0]} dims, index expects {self.dims}")
        norm = float(np.linalg.norm(row))
        if norm > 0 and abs(norm - 1.0) > 1e-3:
            row = row / norm
        with self._lock:
            self._generation += 1
            position = self._pos.get(record_id)
            if position is None:
                position = len(self._ids)
                if position == self._matrix.shape[0]:
                    self._grow()
                self._ids.append(record_id)
                self._pos[record_id] = position
            self._matrix[position] = row
            self._live[position] = True
            if self._graph is not None:
                self._dirty.add(position)
            if self._pending is not None:
                self._pending.add(position)
            self._note(record_id, index_version)
            if seq is not None:
                self._learn_seq(record_id, seq)

    def remove(self, record_id: str, index_version: int | None = None) -> None:
        """Hide a record (``live[pos] = False``) without rebuilding the matrix."""
        with self._lock:
            self._generation += 1
            position = self._pos.get(record_id)
            if position is not None:
                self._live[position] = False
            self._note(record_id, index_version)

    def acknowledge(self, record_id: str, index_version: int) -> None:
        """Record that this process committed a change (a status, a reinforcement) that
        leaves the row as it is, so refresh does not count it as another process's. A row
        this index does not hold (another process wrote the record since the last refresh)
        is not acknowledged: the refresh must still load it."""
        with self._lock:
            if self._holds(record_id):
                self._note(record_id, index_version)

    def _holds(self, record_id: str) -> bool:
        position = self._pos.get(record_id)
        return position is not None and bool(self._live[position])

    def _note(self, record_id: str, index_version: int | None) -> None:
        if index_version is not None:
            self._applied[record_id] = max(self._applied.get(record_id, -1), index_version)

    def _learn_seq(self, record_id: str, seq: int) -> None:
        position = self._pos.get(record_id)
        if position is None or seq < 0:
            return
        self._generation += 1
        if seq >= self._seq_pos.shape[0]:
            grown = np.full(max(seq + 1, self._seq_pos.shape[0] * 2), -1, dtype=np.int64)
            grown[: self._seq_pos.shape[0]] = self._seq_pos
            self._seq_pos = grown
        self._seq_pos[seq] = position

    def _positions(self, eligible_ids: Collection[str]) -> np.ndarray:
        """Matrix rows of the eligible ids that this index holds (live or not)."""
        if isinstance(eligible_ids, EligibleSet):
            seqs = eligible_ids.seqs
            positions = np.full(seqs.shape[0], -1, dtype=np.int64)
            known = seqs < self._seq_pos.shape[0]
            positions[known] = self._seq_pos[seqs[known]]
            unknown = np.flatnonzero(positions < 0)
            if unknown.size:  # not embedded, or upserted here without its seq
                ids = eligible_ids.ids
                positions[unknown] = [self._pos.get(ids[i], -1) for i in unknown.tolist()]
        else:
            # map(dict.get, ids, repeat(-1)) runs in C, but stays the dominant cost at
            # 50K ids: callers on the hot path pass the store's EligibleSet instead.
            positions = np.fromiter(
                map(self._pos.get, eligible_ids, repeat(-1)), dtype=np.int64, count=len(eligible_ids)
            )
        return positions[positions >= 0]

    def _grow(self) -> None:
        capacity = self._matrix.shape[0] * 2
        matrix = np.zeros((capacity, self.dims), dtype=np.float32)
        matrix[: self._matrix.shape[0]] = self._matrix
        live = np.zeros(capacity, dtype=bool)
        live[: self._live.shape[0]] = self._live
        self._matrix, self._live = matrix, live

    # -- the approximate graph -------------------------------------------------------------

    @property
    def approximate_ready(self) -> bool:
        """Whether a graph for the current rows is built, so large eligible sets use it."""
        with self._lock:
            return self._graph is not None and self._approx.enabled

    @property
    def approximate_stale_rows(self) -> int:
        """Rows written since the graph was built: searched exactly until the next build."""
        with self._lock:
            return len(self._dirty)

    def wait_for_graph(self, timeout: float | None = None) -> bool:
        """Start a graph build if one is due, wait up to ``timeout`` seconds for the build
        in flight, and say whether a graph is ready (for tools and tests; searches never
        wait)."""
        with self._lock:
            self._maybe_build()
            builder = self._builder
        if builder is not None:
            builder.join(timeout)
        return self.approximate_ready

    def _maybe_build(self) -> None:
        """Start a background graph build when the index is large enough and has no graph
        for its current rows, or its graph's share of rows written since has grown past
        ``rebuild_fraction``. Searches keep their current path until the build lands.
        Called with the lock held."""
        cfg = self._approx
        if not cfg.enabled or self._no_graph or self._builder is not None or self._closed.is_set():
            return
        n = len(self._ids)
        if n < cfg.min_rows:
            return
        graph = self._graph
        if graph is not None and len(self._dirty) <= cfg.rebuild_fraction * graph.rows:
            return
        if not graph_available():  # looked for once: no faiss, no graph
            self._no_graph = True
            return
        # The graph reads the live matrix without a copy: a row overwritten while it reads
        # is in ``_pending``, so it is scored exactly and kept out of the selector anyway,
        # and a growth or reload leaves this array to the builder alone.
        rows, epoch = self._matrix[:n], self._epoch
        self._pending = set()
        self._builder = threading.Thread(target=self._build, args=(rows, epoch),
                                         name="retold-vector-graph", daemon=True)
        _stop_at_exit(self)
        self._builder.start()

    def _build(self, rows: np.ndarray, epoch: int) -> None:
        """The builder thread: build outside the lock, install under it unless a reload
        renumbered the rows meanwhile (then start over on the new rows)."""
        cfg = self._approx
        failed = False
        try:
            # None when close() stopped it: the index is going away
            graph = build_graph(rows, cfg.m, cfg.ef_construction, epoch, self._closed)
        except Exception:  # an optional accelerator: a failure leaves search exact
            log.warning("vector index: building the approximate graph failed; searches stay"
                        " exact", exc_info=True)
            graph, failed = None, True
        with self._lock:
            self._builder = None
            self._no_graph = self._no_graph or failed
            if graph is not None and epoch == self._epoch:
                self._graph, self._dirty = graph, self._pending or set()
            self._pending = None
            self._maybe_build()

    def close(self) -> None:
        """Stop a graph build in progress and wait for its thread (a batch of rows at most),
        and start no other. Search stays possible, on the exact path or the graph already
        built. A process must not exit with a build inside the library's native code."""
        self._closed.set()
        with self._lock:
            builder = self._builder
        if builder is not None and builder is not threading.current_thread():
            builder.join()

    # -- reads -----------------------------------------------------------------------------

    def search(
        self, qvec: np.ndarray, eligible_ids: Collection[str], k: int,
        score: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> list[tuple[str, float]]:
        """Top ``k`` eligible live records by cosine, best first.

        ``qvec`` is one query vector or a (q, dims) matrix; with several queries each
        record keeps its best cosine (the union of the queries' hits). ``score``, when
        given, turns each record's row of products with the matrix into its one score
        instead (the dense channel's cosine beyond a question's names). The eligible
        positions are built from ``eligible_ids`` (cost grows with that set, not the index)
        and the product runs under the same lock hold.

        An eligible set of ``index.approximate.min_rows`` live rows or more, and at least
        ``index.approximate.min_share`` of the graph's rows, is searched approximately once
        the graph is built: the graph proposes candidates per query among
        the eligible rows it holds, the rows written since it was built join them, and
        every candidate is scored exactly as above. The scores are exact cosines; only a
        record the graph failed to propose can be missed.
        """
        queries = np.asarray(qvec, dtype=np.float32)
        if queries.ndim == 1:
            queries = queries[None, :]
        if k <= 0 or not eligible_ids:
            return []
        with self._lock:
            n = len(self._ids)
            self._maybe_build()
            graph = self._graph if self._approx.enabled else None
            gather_below = n * _GATHER_FRACTION
            graph_from = np.inf
            if graph is not None:  # a set the graph serves is never copied out
                # A filter that admits few of the graph's rows leaves a walk through it too
                # few admitted neighbours to find the best ones: such a set is scored exactly.
                graph_from = max(self._approx.min_rows, self._approx.min_share * graph.rows)
                gather_below = min(gather_below, graph_from)
            positions, rows = self._eligible_rows(eligible_ids, n, gather_below)
            if positions.size == 0:
                return []
            if graph is not None and positions.size >= graph_from:
                self.approximate_searches += 1
                positions = self._graph_candidates(graph, positions, queries, k)
                scores = self._chunked_products(positions, queries)
            elif rows is not None:
                scores = rows @ queries.T
            elif positions.size < n * _GATHER_FRACTION:
                scores = self._chunked_products(positions, queries)
            else:
                scores = (self._matrix[:n] @ queries.T)[positions]
            if score is not None:
                best = score(scores)
            else:
                best = scores.max(axis=1) if scores.shape[1] > 1 else scores[:, 0]
            if best.size > k:
                top = np.argpartition(-best, k - 1)[:k]
            else:
                top = np.arange(best.size)
            top = top[np.argsort(-best[top], kind="stable")]
            return [(self._ids[int(positions[i])], float(best[i])) for i in top]

    def _graph_candidates(self, graph: ApproximateGraph, positions: np.ndarray,
                          queries: np.ndarray, k: int) -> np.ndarray:
        """The rows to score exactly for these live eligible ``positions``: what the graph
        proposes among the eligible rows it holds unchanged, and every eligible row written
        since its build. The selector is built from ``positions`` under the caller's lock
        hold, so a removed or ineligible row can never be proposed. Called with the lock
        held."""
        dirty = np.fromiter(self._dirty, dtype=np.int64, count=len(self._dirty))
        allowed = np.zeros(graph.rows, dtype=bool)
        allowed[positions[positions < graph.rows]] = True
        changed = np.zeros(len(self._ids), dtype=bool)
        changed[dirty] = True
        changed[graph.rows:] = True  # appended after the build (already dirty; made sure)
        allowed &= ~changed[: graph.rows]
        fresh = positions[changed[positions]]
        per_query = max(4 * k, _MIN_CANDIDATES)
        found = graph.candidates(queries, allowed, per_query, self._approx.ef_search)
        return np.union1d(found, fresh)

    def _chunked_products(self, positions: np.ndarray, queries: np.ndarray) -> np.ndarray:
        """The products of these rows with ``queries``, a block of rows at a time: copying
        every eligible row out first and then multiplying read them twice, and took twice
        as long at 27K rows. Called with the lock held."""
        return np.concatenate([self._matrix[positions[start:start + _CHUNK]] @ queries.T
                               for start in range(0, positions.size, _CHUNK)])

    def _eligible_rows(
        self, eligible_ids: Collection[str], n: int, gather_below: float
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """The live eligible positions, and their rows when the same set is searched again
        (None: score them a block at a time, or, when they are a quarter of the matrix or
        more, score every row and pick these positions).

        For the store's EligibleSet the positions are kept until the set or the index
        changes, and the rows are copied out the second time the same set is searched: an
        agent searches one set many times between writes, and the next search copies
        nothing; a set used once (a write's duplicate search, a search right after a write)
        pays no copy. The kept rows are fewer than ``gather_below`` (a quarter of the matrix,
        less when the graph would search them). Called with the lock held.
        """
        token = eligible_ids.token if isinstance(eligible_ids, EligibleSet) else None
        cached = self._gathered
        if token is not None and cached is not None and cached[:2] == (token, self._generation):
            positions, rows = cached[2], cached[3]
            if rows is None and positions.size < gather_below:
                rows = self._matrix[positions]
                self._gathered = (token, self._generation, positions, rows)
            return positions, rows
        positions = self._positions(eligible_ids)
        positions = positions[self._live[positions]]
        if positions.size < n * _GATHER_FRACTION:
            if token is None:  # the store's set is unique
                positions = np.unique(positions)
        else:
            mask = np.zeros(n, dtype=bool)
            mask[positions] = True
            positions = np.flatnonzero(mask)  # sorted and de-duplicated
        if token is not None:
            self._gathered = (token, self._generation, positions, None)
        return positions, None

    def vector_for(self, record_id: str) -> np.ndarray | None:
        """A copy of one live row, or None."""
        with self._lock:
            position = self._pos.get(record_id)
            if position is None or not self._live[position]:
                return None
            row: np.ndarray = self._matrix[position].copy()
            return row

    def rows(self, record_ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Copies of these records' rows, read under one lock hold, and which of them have a
        live vector (a row without one is zeros)."""
        with self._lock:
            positions = np.fromiter((self._pos.get(rid, -1) for rid in record_ids), dtype=np.int64,
                                    count=len(record_ids))
            present = positions >= 0
            present[present] = self._live[positions[present]]
            rows = np.zeros((len(record_ids), self.dims), dtype=np.float32)
            rows[present] = self._matrix[positions[present]]
        return rows, present

    def cosine_matrix(self, record_ids: Sequence[str]) -> np.ndarray:
        """Pairwise cosines of these records, read under one lock hold; a row or column is
        nan where a record has no live vector. Copies len(ids) rows, never the matrix."""
        rows, present = self.rows(record_ids)
        gram: np.ndarray = (rows @ rows.T).astype(np.float64)
        gram[~present, :] = np.nan
        gram[:, ~present] = np.nan
        return gram

    def cosine(self, first_id: str, second_id: str) -> float:
        """Cosine of two indexed records, read under the lock; nan when either is absent."""
        with self._lock:
            a, b = self._pos.get(first_id), self._pos.get(second_id)
            if a is None or b is None or not (self._live[a] and self._live[b]):
                return float("nan")
            return float(self._matrix[a] @ self._matrix[b])
