"""OnnxEmbedder: the packaged MiniLM run by ONNX Runtime, with no torch in the process.

It gives the vectors sentence-transformers gives (same tokenizer file and truncation
length, mean pooling over the attention mask, L2 normalisation), so it keeps the model's
name and version tag and stored vectors stay valid. The int8 variant runs the same way on
a quantised graph, under a name of its own. The ONNX file comes from the cache of
``onnx_export``; only when it is missing does the first load make it (a few seconds, with
the onnx package; never torch).
Neither onnxruntime nor tokenizers is imported before the first load.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from retold.errors import ConfigError, ModelError
from retold.index.encoding import (
    DEFAULT_MODEL,
    CachedEmbedder,
    Matrix,
    mean_pool,
    normalise,
    resolve_model_path,
)
from retold.index.local_models import LazyModel
from retold.index.onnx_export import configured_cache_dir, ensure_onnx_file, max_seq_length

__all__ = ["OnnxEmbedder"]

log = logging.getLogger(__name__)

# Texts per forward pass. They are sorted by length first, as sentence-transformers does,
# so a long document does not pad a whole batch of short ones.
_BATCH_SIZE = 32


@dataclass(frozen=True, slots=True)
class _Loaded:
    tokenizer: Any  # tokenizers.Tokenizer, untyped
    session: Any  # onnxruntime.InferenceSession
    inputs: frozenset[str]
    pad_id: int
    path: Path


class OnnxEmbedder(CachedEmbedder, LazyModel):
    """The packaged all-MiniLM-L6-v2 on ONNX Runtime (CPU), loaded lazily and at most once."""

    def __init__(
        self, model: str = DEFAULT_MODEL, version: str = "1", dims: int = 384,
        max_chars: int = 2000, query_cache_entries: int = 4096, threads: int | None = None,
        cache_dir: str | None = None,
    ) -> None:
        CachedEmbedder.__init__(self, dims, max_chars, query_cache_entries)
        LazyModel.__init__(self)
        if threads is not None and threads < 1:
            raise ConfigError(f"embedding.torch_threads: must be at least 1, got {threads}")
        self.name = model
        self.version = version
        self.threads = threads
        self.cache_dir = cache_dir

    @property
    def onnx_path(self) -> Path | None:
        """The ONNX file in use, once loaded."""
        loaded: _Loaded | None = self._model
        return loaded.path if loaded else None

    def _load(self) -> _Loaded:
        try:
            import onnxruntime
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise ModelError(f"embedding model {self.name} on ONNX needs onnxruntime and tokenizers; "
                             f"install the `onnx` extra ({exc})") from exc
        model_dir = Path(resolve_model_path(self.name))
        length = max_seq_length(model_dir)
        path = ensure_onnx_file(self.name, self.version, model_dir,
                                configured_cache_dir(self.cache_dir), length)
        try:
            tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
            # The file pads to and truncates at 128 tokens; sentence-transformers pads each
            # batch to its longest text and truncates at max_seq_length, and so do we.
            pad_id = int((tokenizer.padding or {}).get("pad_id", 0))
            tokenizer.no_padding()
            tokenizer.enable_truncation(length)
            options = onnxruntime.SessionOptions()
            if self.threads is not None:
                options.intra_op_num_threads = self.threads
            session = onnxruntime.InferenceSession(str(path), options,
                                                   providers=["CPUExecutionProvider"])
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [""])[0]
            raise ModelError(f"cannot load embedding model {self.name} from {path}: "
                             f"{type(exc).__name__}: {first} (delete the file to make it again)"
                             ) from exc
        loaded = _Loaded(tokenizer, session, frozenset(i.name for i in session.get_inputs()),
                         pad_id, path)
        width = int(self._run(loaded, ["probe"]).shape[1])
        if width != self.dims:  # stored vectors and the index assume the configured width
            raise ConfigError(f"embedding.dims: is {self.dims} but model {self.name} "
                              f"produces {width}-dimensional vectors")
        log.info("embedding: %s on ONNX Runtime from %s", self.name, path)
        return loaded

    def _encode(self, texts: list[str]) -> Matrix:
        self.load()
        try:
            return normalise(self._run(self._model, texts))
        except ModelError:
            raise
        except Exception as exc:
            raise ModelError(f"embedding model {self.name} failed: {exc}") from exc

    def _run(self, loaded: _Loaded, texts: list[str]) -> Matrix:
        """Mean-pooled (not yet normalised) vectors of ``texts``, in order."""
        # Truncate what the model sees; stored content is never truncated. One text at a
        # time: the batch call would start the tokenizer's own thread pool, beyond the
        # configured thread count, to save microseconds.
        encodings = [loaded.tokenizer.encode(text[: self.max_chars]) for text in texts]
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        out: Matrix | None = None
        for start in range(0, len(order), _BATCH_SIZE):
            rows = order[start : start + _BATCH_SIZE]
            batch = [encodings[i] for i in rows]
            # Sorted by length, so equal first and last lengths mean no padding (always so
            # for a single query): the mask is all ones and pooling is a plain mean, the
            # same numbers without filling and weighting by a mask.
            unpadded = len(batch[0].ids) == len(batch[-1].ids)
            if unpadded:
                ids = np.array([enc.ids for enc in batch], dtype=np.int64)
                mask = np.ones_like(ids)
                types = np.array([enc.type_ids for enc in batch], dtype=np.int64)
            else:
                ids, mask, types = _padded(batch, loaded.pad_id)
            feeds = {name: array for name, array in
                     (("input_ids", ids), ("attention_mask", mask), ("token_type_ids", types))
                     if name in loaded.inputs}
            (hidden,) = loaded.session.run(["last_hidden_state"], feeds)
            hidden = np.asarray(hidden, dtype=np.float32)
            pooled = hidden.mean(axis=1, dtype=np.float32) if unpadded else mean_pool(hidden, mask)
            if out is None:
                out = np.empty((len(texts), pooled.shape[1]), dtype=np.float32)
            out[rows] = pooled
        assert out is not None  # texts is never empty here
        return out


def _padded(batch: list[Any], pad_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Input ids, attention mask and token types of ``batch``, padded to its longest row."""
    width = max(len(enc.ids) for enc in batch)
    ids = np.full((len(batch), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(batch), width), dtype=np.int64)
    types = np.zeros((len(batch), width), dtype=np.int64)
    for row, enc in enumerate(batch):
        n = len(enc.ids)
        ids[row, :n], mask[row, :n], types[row, :n] = enc.ids, enc.attention_mask, enc.type_ids
    return ids, mask, types
