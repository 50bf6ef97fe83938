"""Embedders: the sentence-transformers model, a fake, and the rule that picks a backend
from ``embedding:`` (the ONNX Runtime one is in ``onnx_embedder``; the protocol and what
all of them share in ``encoding``).

Nothing here imports torch, sentence-transformers or onnxruntime at module import time:
they cost seconds (onnxruntime less) and the fake (unit tests, ``embedding.model: fake``)
needs none of them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from retold.errors import ConfigError, ModelError, ModelMissingError
from retold.index.encoding import (
    DEFAULT_MODEL,
    INT8_MODEL,
    CachedEmbedder,
    Embedder,
    Matrix,
    has_onnx_export,
    is_int8,
    mean_pool,
    normalise,
    packaged_model,
    resolve_model_path,
)
from retold.index.local_models import LazyModel, load_local, missing_local_model

if TYPE_CHECKING:
    from retold.config import EmbeddingConfig

# The shared names are re-exported: callers pick an embedder here and need no second import.
__all__ = ["DEFAULT_MODEL", "INT8_MODEL", "Backend", "Embedder", "FakeEmbedder", "Matrix",
           "SentenceTransformerEmbedder", "check_model_files", "choose_backend", "embedder_from_config",
           "mean_pool", "normalise", "packaged_model", "resolve_model_path"]

Backend = Literal["fake", "onnx", "sentence-transformers"]


class SentenceTransformerEmbedder(CachedEmbedder, LazyModel):
    """A sentence-transformers model, loaded lazily and at most once."""

    def __init__(
        self, model: str = DEFAULT_MODEL, version: str = "1", dims: int = 384,
        device: str = "auto", max_chars: int = 2000, query_cache_entries: int = 4096,
        torch_threads: int | None = None,
    ) -> None:
        CachedEmbedder.__init__(self, dims, max_chars, query_cache_entries)
        LazyModel.__init__(self)
        self.name = model
        self.version = version
        self.device = device
        self.torch_threads = torch_threads

    def _load(self) -> Any:
        path = resolve_model_path(self.name)

        def build(st: Any, device: str) -> tuple[Any, int]:
            if self.torch_threads is not None:
                import torch

                torch.set_num_threads(self.torch_threads)
            model = st.SentenceTransformer(path, device=device, local_files_only=True)
            return model, int(model.encode(["probe"], convert_to_numpy=True,
                                                     show_progress_bar=False).shape[1])

        model, width = load_local("embedding", path, self.name, self.device, build)
        if width != self.dims:  # stored vectors and the index assume the configured width
            raise ConfigError(f"embedding.dims: is {self.dims} but model {self.name} "
                              f"produces {width}-dimensional vectors")
        return model

    def _encode(self, texts: list[str]) -> Matrix:
        self.load()
        # Truncate what the model sees; stored content is never truncated.
        clipped = [t[: self.max_chars] for t in texts]
        try:
            out = self._model.encode(clipped, convert_to_numpy=True, show_progress_bar=False)
        except Exception as exc:
            raise ModelError(f"embedding model {self.name} failed: {exc}") from exc
        return normalise(out)


_TOKEN = re.compile(r"\w+")


def _token_vector(token: str, dims: int) -> Matrix:
    # blake2b, not hash(): Python salts str hashes per process, and the fake must agree
    # across processes (workers and agents share one store).
    seed = int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest(), "big")
    return np.random.default_rng(seed).standard_normal(dims).astype(np.float32)


class FakeEmbedder(CachedEmbedder):
    """Deterministic bag-of-words embedder for tests; no torch.

    Texts that share words are similar, unrelated texts are near-orthogonal, and
    ``pin``/``make_similar`` set exact vectors where a test needs a given cosine.
    """

    def __init__(
        self, dims: int = 384, version: str = "fake-1", name: str = "fake",
        max_chars: int = 2000, query_cache_entries: int = 4096,
    ) -> None:
        super().__init__(dims, max_chars, query_cache_entries)
        self.name = name
        self.version = version
        self._pins: dict[str, Matrix] = {}

    @property
    def is_loaded(self) -> bool:
        """Always true: there is nothing to load."""
        return True

    def load(self) -> None:
        """Do nothing; present so callers can treat every embedder alike."""

    def vector(self, text: str) -> Matrix:
        """The unit vector this embedder gives ``text`` (pins included)."""
        pinned = self._pins.get(text)
        if pinned is not None:
            return pinned.copy()
        tokens = _TOKEN.findall(text[: self.max_chars].lower())
        if not tokens:
            tokens = ["\x00" + text]  # still a unit vector for blank or symbol-only text
        total = np.stack([_token_vector(t, self.dims) for t in tokens]).sum(axis=0)
        row: Matrix = normalise(total[None, :])[0]
        return row

    def pin(self, text: str, vector: npt.ArrayLike) -> None:
        """Make ``text`` embed to ``vector`` (normalised) for queries and documents."""
        vec = np.asarray(vector, dtype=np.float32).reshape(-1)
        if vec.shape != (self.dims,) or not np.linalg.norm(vec) > 0.0:
            raise ValueError(f"pin needs a non-zero vector of length {self.dims}")
        unit = normalise(vec[None, :])[0]
        unit.setflags(write=False)
        self._pins[text] = unit
        with self._cache_lock:  # a cached query vector would hide the pin
            self._cache.pop(text, None)

    def make_similar(self, text: str, to_text: str, cosine: float) -> Matrix:
        """Pin ``text`` to a unit vector whose cosine with ``to_text``'s vector is ``cosine``."""
        if not -1.0 <= cosine <= 1.0:
            raise ValueError(f"cosine must be within [-1, 1], got {cosine}")
        base = self.vector(to_text).astype(np.float64)
        # A direction orthogonal to base, deterministic per text (a random Gram-Schmidt step).
        other = _token_vector("\x01" + text, self.dims).astype(np.float64)
        other -= other.dot(base) * base
        norm = float(np.linalg.norm(other))
        if norm < 1e-6:
            raise ValueError(f"make_similar needs dims >= 2, got {self.dims}")
        target = cosine * base + np.sqrt(max(0.0, 1.0 - cosine * cosine)) * (other / norm)
        self.pin(text, target)
        return self.vector(text)

    def _encode(self, texts: list[str]) -> Matrix:
        return np.stack([self.vector(t) for t in texts]).astype(np.float32, copy=False)


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _onnx_file_exists(cfg: EmbeddingConfig) -> bool:
    from retold.index.onnx_export import configured_cache_dir, onnx_cache_path

    try:
        model_dir = Path(resolve_model_path(cfg.model))
        path = onnx_cache_path(cfg.model, cfg.version, model_dir, configured_cache_dir(cfg.onnx_cache_dir))
    except ModelError:
        return False  # no packaged weights: sentence-transformers reports that on load
    return path.is_file()


# Making the file needs this on top of what loading needs: the graph is written from the
# weights with the onnx package, without torch (onnx_build).
_EXPORT_NEEDS = ("onnx",)
_ONNX_NEEDS = ("onnxruntime", "tokenizers")


def choose_backend(
    cfg: EmbeddingConfig, *, installed: Callable[[str], bool] = _installed,
    exported: Callable[[EmbeddingConfig], bool] = _onnx_file_exists,
) -> Backend:
    """Which embedder ``embedding:`` selects, decided without importing any model library.

    ``auto`` picks ONNX Runtime for the packaged model on the CPU when onnxruntime is
    installed and the ONNX file exists or can be made; anything else keeps
    sentence-transformers. ``onnx`` asks for ONNX and is a ConfigError where it cannot
    apply. ``installed`` and ``exported`` are seams for tests.
    """
    if cfg.model == "fake":
        return "fake"
    on_cpu = cfg.device in ("auto", "cpu")
    if is_int8(cfg.model):
        # Only ONNX Runtime runs the quantised graph; falling back to the float model
        # would write vectors of another family under this name.
        if cfg.backend == "sentence-transformers" or not on_cpu:
            raise ConfigError(f"embedding.model: {cfg.model} runs on ONNX Runtime on the CPU only; "
                              f"set embedding.backend to auto or onnx and embedding.device to auto or cpu")
        return "onnx"
    if cfg.backend == "sentence-transformers":
        return "sentence-transformers"
    if cfg.backend == "onnx":
        if not has_onnx_export(cfg.model):
            raise ConfigError(f"embedding.backend: onnx has an export path only for the packaged "
                              f"{DEFAULT_MODEL}, not {cfg.model}; use auto or sentence-transformers")
        if not on_cpu:
            raise ConfigError(f"embedding.backend: onnx runs on the CPU, but embedding.device is "
                              f"{cfg.device}; use auto or sentence-transformers")
        return "onnx"
    if not (has_onnx_export(cfg.model) and on_cpu and all(map(installed, _ONNX_NEEDS))):
        return "sentence-transformers"
    # Checking for the file hashes the weights (~0.15 s), so it is asked only when making
    # it is impossible here.
    if all(map(installed, _EXPORT_NEEDS)) or exported(cfg):
        return "onnx"
    return "sentence-transformers"


def check_model_files(cfg: EmbeddingConfig, *, installed: Callable[[str], bool] = _installed) -> None:
    """Raise :class:`ModelMissingError` now when the embedder ``embedding:`` names cannot
    load: its library is not installed, or its files are not where ``embedding.model``
    says. Only files are looked at; the weights still load on first use. ``installed``
    is a seam for tests."""
    backend = choose_backend(cfg, installed=installed)
    if backend == "fake":
        return
    needs, extra = (_ONNX_NEEDS, "onnx") if backend == "onnx" else (("sentence_transformers",), "models")
    absent = [module for module in needs if not installed(module)]
    if absent:
        raise ModelMissingError(f"embedding model {cfg.model} needs {', '.join(absent)}; install the "
                                f"`{extra}` extra (pip install 'retold[{extra}]')")
    problem = missing_local_model(resolve_model_path(cfg.model))
    if problem:
        raise ModelMissingError(f"embedding.model: {problem}")


def embedder_from_config(cfg: EmbeddingConfig) -> Embedder:
    """Build the embedder that ``embedding:`` names; ``model: fake`` is the fake."""
    backend = choose_backend(cfg)
    if backend == "fake":
        return FakeEmbedder(
            dims=cfg.dims, version=cfg.version, max_chars=cfg.max_chars,
            query_cache_entries=cfg.query_cache_entries,
        )
    if backend == "onnx":
        # Imported here: onnx_embedder builds on this module's cached base class.
        from retold.index.onnx_embedder import OnnxEmbedder

        return OnnxEmbedder(
            model=cfg.model, version=cfg.version, dims=cfg.dims, max_chars=cfg.max_chars,
            query_cache_entries=cfg.query_cache_entries, threads=cfg.torch_threads,
            cache_dir=cfg.onnx_cache_dir,
        )
    return SentenceTransformerEmbedder(
        model=cfg.model, version=cfg.version, dims=cfg.dims, device=cfg.device,
        max_chars=cfg.max_chars, query_cache_entries=cfg.query_cache_entries,
        torch_threads=cfg.torch_threads,
    )
