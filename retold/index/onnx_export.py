"""The ONNX file of the packaged embedding model: where it is cached and how it is made.

The file is built from the model's weights by ``onnx_build`` (numpy and onnx, a few
seconds, no torch), once per machine, on first use (or ahead of time with
:func:`ensure_exported`), into a user cache directory; every later process loads it with
ONNX Runtime alone (docs/decisions.md, "The ONNX encoder is built from the weights on
first use"). The int8 variant is quantised from the float file, once, the same way.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from retold.config import EmbeddingConfig
from retold.errors import ConfigError, ModelError
from retold.index.encoding import (
    DEFAULT_MODEL,
    has_onnx_export,
    is_int8,
    mean_pool,
    normalise,
    resolve_model_path,
)
from retold.index.onnx_build import INPUTS, OUTPUT, build_encoder

__all__ = [
    "EXPORT_FORMAT",
    "configured_cache_dir",
    "default_cache_dir",
    "ensure_exported",
    "ensure_onnx_file",
    "export_onnx",
    "max_seq_length",
    "onnx_cache_path",
    "quantize_int8",
    "weights_digest",
    "write_atomically",
]

log = logging.getLogger(__name__)

# Part of every cache key: bump it when the graph changes (inputs, outputs, opset, how a
# layer is written), so no process loads a file made the old way. "1" was torch's export.
EXPORT_FORMAT = "2"
# Files whose bytes define the network; the tokenizer is read from the model folder at
# load time, so it need not be part of the key.
_WEIGHT_FILES = ("config.json", "model.safetensors")
# Different lengths, so the checks below run padded rows through the graph.
_PROBES = ("probe", "A longer probe sentence, so the batch needs padding.", "ünïcödé 日本語 🎉")
_MIN_COSINE = 0.9999
# The int8 graph is another model, not a copy: per-channel weights keep it near the float
# vectors (0.99 mean cosine on the benchmark's records), and a file below this on the
# probes is a broken quantisation, not a rounding difference.
_MIN_INT8_COSINE = 0.97


def default_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/retold/onnx``, or ``~/.cache/retold/onnx`` when that is unset."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base, "retold", "onnx")


def weights_digest(model_dir: Path) -> str:
    """A short SHA-256 over the model's weight and config files and the export format."""
    files = [model_dir / name for name in _WEIGHT_FILES if (model_dir / name).is_file()]
    if not any(f.name != "config.json" for f in files):
        raise ModelError(f"no weights (model.safetensors) in {model_dir}")
    return _digest(tuple((str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in files))


@lru_cache(maxsize=16)
def _digest(files: tuple[tuple[str, int, int], ...]) -> str:
    # Keyed by size and mtime as well as path, so a rewritten file is hashed again; hashing
    # the 90 MB of MiniLM weights takes ~0.15 s, paid once per process.
    sha = hashlib.sha256(f"retold-onnx-export-{EXPORT_FORMAT}\n".encode())
    for path, _size, _mtime in files:
        sha.update(Path(path).name.encode() + b"\0")
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                sha.update(chunk)
    return sha.hexdigest()[:16]


def onnx_cache_path(model: str, version: str, model_dir: Path, cache_dir: Path) -> Path:
    """``<cache_dir>/<model>-<version>-<digest>.onnx``; ``model``'s last path part names it."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model.rstrip("/").rsplit("/", 1)[-1]) or "model"
    tag = re.sub(r"[^A-Za-z0-9._-]+", "_", version)
    return cache_dir / f"{slug}-{tag}-{weights_digest(model_dir)}.onnx"


def write_atomically(dest: Path, data: bytes) -> None:
    """Write ``data`` to ``dest`` through a temporary file in the same folder and a rename.

    A reader sees either no file or a whole one; when two processes race, each rename is
    atomic and the last one wins, leaving one complete file.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it owner-only; the cache may be shared
        os.replace(tmp, dest)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass  # already renamed or never written
        raise


def export_onnx(model_dir: Path, dest: Path, max_seq_length: int = 256) -> Path:
    """Build the ONNX graph of the BERT encoder in ``model_dir`` from its weights and write
    it to ``dest`` (numpy and onnx only; see ``onnx_build``).

    Before the file reaches the cache, ONNX Runtime runs the probes through it as one
    padded batch and one at a time: every vector must be finite, and padding must not
    move a text's vector. That the weights land where BERT puts them is the model tests'
    part: they hold the file to sentence-transformers' vectors.
    """
    data = build_encoder(model_dir)
    session = _session(data)
    tokenizer = _tokenizer(model_dir, max_seq_length)
    # The reference for the batch is each probe on its own, where no token is padding: a
    # mask the graph ignores or applies wrongly shows up as a distance.
    alone = np.concatenate([_hidden(session, _batch(tokenizer, (probe,))).mean(axis=1)
                            for probe in _PROBES])
    _compare(session, _batch(tokenizer, _PROBES), alone, model_dir, _MIN_COSINE, "ONNX graph",
             "embedding.backend: sentence-transformers")
    write_atomically(dest, data)
    log.info("embedding: built %s into %s", model_dir.name, dest)
    return dest


def _tokenizer(model_dir: Path, max_seq_length: int) -> Any:
    """The model's tokenizer as the embedders use it: no padding, truncation at the
    model's max_seq_length."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_seq_length)
    return tokenizer


def _batch(tokenizer: Any, texts: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    encodings = [tokenizer.encode(t) for t in texts]
    width = max(len(e.ids) for e in encodings)
    arrays = tuple(np.zeros((len(texts), width), dtype=np.int64) for _ in INPUTS)
    for row, enc in enumerate(encodings):
        for array, values in zip(arrays, (enc.ids, enc.attention_mask, enc.type_ids), strict=True):
            array[row, : len(values)] = values
    ids, mask, types = arrays
    return ids, mask, types


def _session(data: bytes) -> Any:
    """An ONNX Runtime session on the serialised graph ``data``, to check it."""
    try:
        import onnxruntime
    except ImportError as exc:
        raise ModelError(f"checking the ONNX file needs onnxruntime ({exc})") from exc
    try:
        return onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise ModelError(f"ONNX Runtime cannot load the graph: {type(exc).__name__}: {first}"
                         ) from exc


def _hidden(session: Any, batch: tuple[np.ndarray, ...]) -> np.ndarray:
    """The last hidden state ``session`` gives for ``batch``."""
    feeds = {i.name: batch[INPUTS.index(i.name)] for i in session.get_inputs()}
    (hidden,) = session.run([OUTPUT], feeds)
    return np.asarray(hidden, dtype=np.float32)


def _compare(session: Any, batch: tuple[np.ndarray, ...], reference: np.ndarray, model_dir: Path,
             floor: float, what: str, instead: str) -> None:
    """Raise ModelError, suggesting ``instead``, when a pooled vector of ``session`` on
    ``batch`` is not finite or is further than ``floor`` from its row of ``reference``
    (mean-pooled vectors, one per row of the batch)."""
    ours = normalise(mean_pool(_hidden(session, batch), batch[1]))
    cosines = (ours * normalise(reference)).sum(axis=1)
    worst = float(cosines.min())
    if not np.isfinite(cosines).all() or worst < floor:  # NaN compares false with any floor
        raise ModelError(f"{what} of {model_dir.name} disagrees with the model "
                         f"(cosine {worst:.6f}); use {instead}")


def quantize_int8(source: Path, dest: Path, model_dir: Path, max_seq_length: int = 256) -> Path:
    """Write the int8 variant of the float ONNX file ``source`` to ``dest``.

    Dynamic quantisation with per-channel weights (onnxruntime's quantiser, which needs the
    ``onnx`` package): weights are stored as int8, activations are quantised per call.
    Per-tensor weights ran no faster and moved the vectors about five times as far from
    the float ones.
    The result is checked against ``source`` on the probes before it reaches the cache.
    """
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:
        raise ModelError(f"making the int8 file needs onnxruntime and onnx (the `onnx` extra) "
                         f"({exc})") from exc
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".{dest.name}.") as tmp:
        staged = Path(tmp, "int8.onnx")
        try:
            # The quantiser advises pre-processing on the root logger; it changes nothing here.
            with warnings.catch_warnings(), _quiet_root():
                warnings.simplefilter("ignore")
                quantize_dynamic(str(source), str(staged), weight_type=QuantType.QInt8,
                                 per_channel=True)
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [""])[0]
            raise ModelError(f"int8 quantisation of {source.name} failed: {type(exc).__name__}: "
                             f"{first}") from exc
        data = staged.read_bytes()
    check = _batch(_tokenizer(model_dir, max_seq_length), _PROBES)
    reference = mean_pool(_hidden(_session(source.read_bytes()), check), check[1])
    _compare(_session(data), check, reference, model_dir, _MIN_INT8_COSINE, "int8 file",
             f"embedding.model: {DEFAULT_MODEL}")
    write_atomically(dest, data)
    log.info("embedding: quantised %s to %s", source.name, dest)
    return dest


@contextmanager
def _quiet_root() -> Iterator[None]:
    """Drop what is logged on the root logger itself while the quantiser runs. A filter on
    the root logger sees only those records, so other loggers' warnings still pass."""
    root = logging.getLogger()
    drop = logging.Filter("\0")  # a name no record has: every record is dropped
    root.addFilter(drop)
    try:
        yield
    finally:
        root.removeFilter(drop)


def ensure_onnx_file(model: str, version: str, model_dir: Path, cache_dir: Path,
                     max_seq_length: int) -> Path:
    """The cached ONNX file of ``model``, made now when missing: built from the weights,
    and for the int8 variant quantised from the float file on top."""
    dest = onnx_cache_path(model, version, model_dir, cache_dir)
    if dest.is_file():
        return dest
    if not is_int8(model):
        _announce(f"building {_short(model)}'s ONNX file once (a few seconds; later runs reuse "
                  f"{dest.parent})")
        return export_onnx(model_dir, dest, max_seq_length)
    source = ensure_onnx_file(DEFAULT_MODEL, version, model_dir, cache_dir, max_seq_length)
    _announce(f"quantising {_short(model)} once (a few seconds; later runs reuse {dest.parent})")
    return quantize_int8(source, dest, model_dir, max_seq_length)


def _short(model: str) -> str:
    return model.rstrip("/").rsplit("/", 1)[-1]


def _announce(what: str) -> None:
    """Say on stderr, in one line, that a one-off wait starts: the first process on a
    machine otherwise sits silent for it. Only a real build or quantisation says it."""
    print(f"retold: {what}", file=sys.stderr, flush=True)


def ensure_exported(cfg: EmbeddingConfig | None = None) -> Path:
    """The ONNX file for ``cfg`` (default: the shipped model), made now if missing.

    For images and ``make onnx``: make the file ahead of time, so no later process waits
    for it or needs the ``onnx`` package.
    """
    cfg = cfg or EmbeddingConfig()
    if not has_onnx_export(cfg.model):
        raise ConfigError(f"embedding.model: {cfg.model} has no ONNX export path; only the "
                          "packaged all-MiniLM-L6-v2 has one")
    model_dir = Path(resolve_model_path(cfg.model))
    return ensure_onnx_file(cfg.model, cfg.version, model_dir,
                            configured_cache_dir(cfg.onnx_cache_dir), max_seq_length(model_dir))


def configured_cache_dir(setting: str | None) -> Path:
    """``embedding.onnx_cache_dir`` with ``~`` expanded, or the default cache folder."""
    return Path(setting).expanduser() if setting else default_cache_dir()


def max_seq_length(model_dir: Path) -> int:
    """The sentence-transformers truncation length in ``model_dir`` (256 for MiniLM)."""
    import json

    config = model_dir / "sentence_bert_config.json"
    try:
        value = json.loads(config.read_text(encoding="utf-8"))["max_seq_length"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelError(f"cannot read max_seq_length from {config}: {exc}") from exc
    if not isinstance(value, int) or value < 1:
        raise ModelError(f"{config}: max_seq_length must be a positive integer, got {value!r}")
    return value
