"""Rerankers: the optional cross-encoder pass after duplicate collapse.

``BgeReranker`` is the cross-encoder, ``NoReranker`` the disabled stand-in, ``FakeReranker``
the test double. ``rerank_with_timeout`` runs one search's pass in a thread it can abandon;
``apply_reranker_floor`` is the final keep-or-drop decision. No torch import at import time.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np

from retold.errors import ConfigError, ModelError, RetoldError
from retold.index.local_models import LazyModel, load_local, predict_logits

if TYPE_CHECKING:
    from retold.config import RerankerConfig
    from retold.models import Candidate

RerankStatus = Literal["applied", "timeout", "failed"]
# (record_id, rank_before, rank_after, score, winning_query): the search log's reranked rows.
RerankLogRow = tuple[str, int, int, float, str]


class RerankError(RetoldError):
    """The rerank pass timed out or failed and ``reranker.on_failure`` is ``fail``."""


class Reranker(Protocol):
    """Scores query-record pairs; higher is more relevant."""

    name: str

    def score(self, query: str, docs: list[str]) -> list[float]: ...
    # Every query-record pair of one search goes through as one call, not one per query.
    def score_pairs(self, pairs: list[tuple[str, str]]) -> list[float]: ...


class _ScoresPairs:
    """``score`` for every reranker, as one ``score_pairs`` batch."""

    def score_pairs(self, pairs: list[tuple[str, str]]) -> list[float]:
        raise NotImplementedError

    def score(self, query: str, docs: list[str]) -> list[float]:
        """Score each document against one query; see ``score_pairs``."""
        return self.score_pairs([(query, doc) for doc in docs])


def _sigmoid(logits: Any) -> list[float]:
    x = np.asarray(logits, dtype=np.float64).reshape(-1)
    # tanh form: the same values as 1 / (1 + exp(-x)) without overflow for large |x|.
    return [float(v) for v in 0.5 * (1.0 + np.tanh(0.5 * x))]


class BgeReranker(_ScoresPairs, LazyModel):
    """A single-label sentence-transformers ``CrossEncoder``.

    Loaded lazily and at most once, only from local files, so a search never waits on a
    model hub. Scores
    are sigmoid values in (0, 1), computed here from the raw logit, so ``reranker.floor``
    is compared on one fixed scale whatever activation the model config names.
    """

    def __init__(self, model: str, batch_size: int = 32, device: str = "cpu") -> None:
        if batch_size < 1:
            raise ConfigError(f"reranker.batch_size: must be at least 1, got {batch_size}")
        LazyModel.__init__(self)
        self.model = model
        self.name = model
        self.batch_size = batch_size
        self.device = device

    def warm(self) -> None:
        """Load and score one tiny pair, so the first search does not spend its timeout on it."""
        self.score_pairs([("warm up", "warm up")])

    def _load(self) -> Any:
        model = load_local(
            "reranker", self.model, self.model, self.device,
            lambda st, device: st.CrossEncoder(self.model, device=device, local_files_only=True),
        )
        labels = int(getattr(model.config, "num_labels", 0))
        if labels != 1:  # the floor assumes one relevance logit per pair
            raise ModelError(f"reranker model {self.model} has {labels} output labels, not 1")
        return model

    def score_pairs(self, pairs: list[tuple[str, str]]) -> list[float]:
        """Sigmoid relevance in (0, 1) for each ``(query, doc)``, in one predict call."""
        if not pairs:
            return []
        self.load()
        # The sigmoid is applied below, on the raw logit, so the floor's scale is fixed.
        logits = predict_logits("reranker", self.model, self._model, pairs, self.batch_size)
        return _sigmoid(logits)


class NoReranker(_ScoresPairs):
    """The reranker when ``reranker.enabled`` is false; the retriever never calls it."""

    name: str = "none"
    is_loaded: bool = True

    def warm(self) -> None:
        """Do nothing; present so callers can warm every reranker alike."""

    def score_pairs(self, pairs: list[tuple[str, str]]) -> list[float]:
        """Zeros, one per pair."""
        return [0.0] * len(pairs)


class FakeReranker(_ScoresPairs):
    """Table-driven reranker for tests: ``scores[(query, doc)]`` or ``default``.

    Scored pairs go to ``calls``, each call's size to ``batches``; ``delay_s`` and ``fail``
    drive the timeout and failure paths of ``rerank_with_timeout``.
    """

    name: str = "fake"
    is_loaded: bool = True

    def __init__(
        self, scores: Mapping[tuple[str, str], float] | None = None, default: float = 0.0,
        delay_s: float = 0.0, fail: Exception | None = None,
    ) -> None:
        self.scores: dict[tuple[str, str], float] = dict(scores or {})
        self.default = default
        self.delay_s = delay_s
        self.fail = fail
        self.calls: list[tuple[str, str]] = []
        self.batches: list[int] = []

    def warm(self) -> None:
        """Do nothing; present so callers can warm every reranker alike."""

    def score_pairs(self, pairs: list[tuple[str, str]]) -> list[float]:
        """Record the pairs, wait ``delay_s``, then raise ``fail`` or return the table."""
        self.calls.extend(pairs)
        self.batches.append(len(pairs))
        if self.delay_s > 0:
            time.sleep(self.delay_s)
        if self.fail is not None:
            raise self.fail
        return [self.scores.get(pair, self.default) for pair in pairs]


@dataclass
class RerankOutcome:
    """What one rerank pass produced."""

    status: RerankStatus
    candidates: list[Candidate]  # applied: copies, reordered by best score; else the input list
    logged: list[RerankLogRow] | None  # set only when applied, in rank_after order
    error: str | None


def _score_shortlist(
    reranker: Reranker, copies: list[Candidate], documents: Mapping[str, str], queries: list[str]
) -> tuple[list[Candidate], list[RerankLogRow]]:
    # Every query against every record in one batch; a record keeps its best score, so it
    # ranks by the query it answers best.
    pairs = [(q, documents[c.record_id]) for c in copies for q in queries]
    scores = reranker.score_pairs(pairs)
    if len(scores) != len(pairs):
        raise ModelError(f"reranker {reranker.name} returned {len(scores)} scores for {len(pairs)} pairs")
    if not all(math.isfinite(s) for s in scores):  # a NaN would make the sort order meaningless
        raise ModelError(f"reranker {reranker.name} returned a non-finite score")
    best: list[tuple[float, str]] = []
    for i in range(len(copies)):
        row = scores[i * len(queries):(i + 1) * len(queries)]
        top = max(range(len(queries)), key=lambda j: row[j])  # first query wins a tie
        best.append((float(row[top]), queries[top]))
    order = sorted(range(len(copies)), key=lambda i: -best[i][0])  # stable: the fused order breaks ties
    for after, i in enumerate(order, start=1):
        copies[i].rerank_score, copies[i].rank_after_rerank = best[i][0], after
    logged = [(copies[i].record_id, i + 1, after, *best[i]) for after, i in enumerate(order, start=1)]
    return [copies[i] for i in order], logged


def rerank_with_timeout(
    reranker: Reranker, candidates: list[Candidate], documents: Mapping[str, str], queries: list[str],
    *, timeout_ms: int, on_failure: Literal["fallback", "fail"],
) -> RerankOutcome:
    """Rerank the shortlist ``candidates`` (in fused order) within ``timeout_ms``.

    ``documents`` maps each record id to the text the reranker scores. Copies of the
    candidates are scored in a daemon thread, abandoned at ``timeout_ms`` (a cold model
    load counts), so a late or failed pass cannot write into the caller's
    candidates. On timeout or error, ``fallback`` returns the input list untouched with
    status ``timeout``/``failed``; ``fail`` raises ``RerankError``.
    """
    if not queries:
        raise ValueError("rerank_with_timeout needs at least one query")
    if not candidates:
        return RerankOutcome("applied", [], [], None)
    copies = [replace(c) for c in candidates]
    done = threading.Event()
    result: list[tuple[list[Candidate], list[RerankLogRow]]] = []
    failure: list[BaseException] = []

    def work() -> None:
        try:
            result.append(_score_shortlist(reranker, copies, documents, queries))
        except BaseException as exc:  # handed to the caller, never lost in the thread
            failure.append(exc)
        finally:
            done.set()

    # A daemon thread, not an executor: an abandoned pass stuck in a model call must not
    # hold up interpreter exit, which ThreadPoolExecutor's atexit join would.
    threading.Thread(target=work, name="retold-rerank", daemon=True).start()
    if not done.wait(max(timeout_ms, 0) / 1000.0):
        status: RerankStatus = "timeout"
        error = f"reranker {reranker.name} did not finish within {timeout_ms} ms"
        cause: BaseException | None = None
    elif failure:
        status, cause = "failed", failure[0]
        first = (str(cause).strip().splitlines() or [""])[0]
        error = f"reranker {reranker.name} failed: {type(cause).__name__}: {first}"
    else:
        ranked, logged = result[0]
        return RerankOutcome("applied", ranked, logged, None)
    if on_failure == "fail":
        raise RerankError(error) from cause
    return RerankOutcome(status, candidates, None, error)


def apply_reranker_floor(
    candidates: list[Candidate], floor: float
) -> tuple[list[Candidate], list[tuple[str, str, float]]]:
    """Split reranked candidates at ``floor``, the final keep-or-drop decision when reranking.

    Returns the kept candidates in order, and ``(record_id, reason, score)`` for each one
    whose best rerank score is below the floor.
    """
    kept: list[Candidate] = []
    dropped: list[tuple[str, str, float]] = []  # logged as reranked_out, not budget_out
    for cand in candidates:
        score = cand.rerank_score
        if score is None:
            raise ValueError(f"candidate {cand.record_id} has no rerank score; rerank it first")
        if score >= floor:
            kept.append(cand)
            continue
        shown = f"{score:.3g}"
        if float(shown) >= floor:  # rounding must not print a dropped score as reaching the floor
            shown = repr(score)
        dropped.append((cand.record_id, f"rerank {shown} < floor {floor:g}", score))
    return kept, dropped


def reranker_from_config(cfg: RerankerConfig, device: str = "cpu") -> Reranker:
    """``BgeReranker`` (not loaded yet) when ``reranker.enabled``, else ``NoReranker``."""
    return BgeReranker(cfg.model, cfg.batch_size, device) if cfg.enabled else NoReranker()
