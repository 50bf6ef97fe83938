"""The ONNX file of the packaged embedding model: where it is cached and how it is made.

Exporting needs torch and transformers, so it happens once per machine, on first use (or
ahead of time with :func:`ensure_exported`), into a user cache directory; every later
process loads the file with ONNX Runtime alone (docs/decisions.md, "The ONNX encoder is
exported on first use into a cache"). Nothing here imports torch until an export runs.
"""

from __future__ import annotations

import hashlib
import io
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

# Part of every cache key: bump it when the exported graph changes (inputs, outputs,
# opset, attention implementation), so no process loads a file made the old way.
EXPORT_FORMAT = "1"
_OPSET = 17
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_OUTPUT = "last_hidden_state"
# Files whose bytes define the network; the tokenizer is read from the model folder at
# load time, so it need not be part of the key.
_WEIGHT_FILES = ("config.json", "model.safetensors", "pytorch_model.bin")
# Different lengths, so the check below runs padded rows through both graphs.
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
        raise ModelError(f"no weights (model.safetensors or pytorch_model.bin) in {model_dir}")
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
    """Export the BERT encoder in ``model_dir`` to ``dest`` (needs torch and transformers).

    The graph takes ``input_ids``, ``attention_mask`` and ``token_type_ids`` with dynamic
    batch and sequence axes and returns the last hidden state; pooling and normalisation
    stay in numpy. The export is checked against torch on a padded batch before it is
    written, so a bad trace never reaches the cache.
    """
    try:
        import torch
        from transformers import AutoModel
    except ImportError as exc:
        raise ModelError(
            f"exporting {model_dir.name} to ONNX needs torch and transformers (the `models` "
            f"extra), or an exported file at {dest} ({exc})"
        ) from exc
    from tokenizers import Tokenizer

    try:
        # Eager attention: the SDPA path decides from the mask's values whether to apply
        # it, and a trace would freeze that choice; eager always applies the mask.
        bert = AutoModel.from_pretrained(str(model_dir), local_files_only=True,
                                         attn_implementation="eager").eval()
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise ModelError(f"cannot load {model_dir} for ONNX export: {type(exc).__name__}: "
                         f"{first}") from exc

    class _LastHidden(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_seq_length)
    sample = _batch(tokenizer, _PROBES[:2])
    check = _batch(tokenizer, _PROBES)
    # eval() on the wrapper too: the exporter restores the wrapper's mode afterwards, and a
    # fresh module is in training mode, which would switch dropout on in the model.
    wrapper = _LastHidden(bert).eval()
    buffer = io.BytesIO()
    axes = {name: {0: "batch", 1: "sequence"} for name in (*_INPUTS, _OUTPUT)}
    try:
        with torch.no_grad(), warnings.catch_warnings():
            reference = wrapper(*(torch.from_numpy(a) for a in check)).numpy()
            # The TorchScript exporter is deprecated in favour of one that needs
            # onnxscript, and the trace warns about shape checks that are constant here.
            warnings.simplefilter("ignore")
            # A file object, so the bytes are checked before anything reaches the cache;
            # the TorchScript exporter takes one though the annotation says path.
            torch.onnx.export(
                wrapper, tuple(torch.from_numpy(a) for a in sample), buffer,  # type: ignore[arg-type]
                dynamo=False, input_names=list(_INPUTS), output_names=[_OUTPUT],
                dynamic_axes=axes, opset_version=_OPSET,
            )
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise ModelError(f"ONNX export of {model_dir.name} failed: {type(exc).__name__}: {first}"
                         ) from exc
    data = buffer.getvalue()
    _compare(data, check, reference, model_dir, _MIN_COSINE, "ONNX export",
             "embedding.backend: sentence-transformers")
    write_atomically(dest, data)
    log.info("embedding: exported %s to %s", model_dir.name, dest)
    return dest


def _batch(tokenizer: Any, texts: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    encodings = [tokenizer.encode(t) for t in texts]
    width = max(len(e.ids) for e in encodings)
    arrays = tuple(np.zeros((len(texts), width), dtype=np.int64) for _ in _INPUTS)
    for row, enc in enumerate(encodings):
        for array, values in zip(arrays, (enc.ids, enc.attention_mask, enc.type_ids), strict=True):
            array[row, : len(values)] = values
    ids, mask, types = arrays
    return ids, mask, types


def _hidden(data: bytes, batch: tuple[np.ndarray, ...]) -> np.ndarray:
    """The last hidden state the ONNX graph ``data`` gives for ``batch``."""
    try:
        import onnxruntime
    except ImportError as exc:
        raise ModelError(f"checking the ONNX file needs onnxruntime ({exc})") from exc
    session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    feeds = {i.name: batch[_INPUTS.index(i.name)] for i in session.get_inputs()}
    (hidden,) = session.run([_OUTPUT], feeds)
    return np.asarray(hidden, dtype=np.float32)


def _compare(data: bytes, batch: tuple[np.ndarray, ...], reference: np.ndarray, model_dir: Path,
             floor: float, what: str, instead: str) -> None:
    """Raise ModelError, suggesting ``instead``, when a pooled vector of ``data`` is
    further than ``floor`` from the one ``reference`` gives."""
    mask = batch[1]
    ours = normalise(mean_pool(_hidden(data, batch), mask))
    theirs = normalise(mean_pool(reference, mask))
    cosines = (ours * theirs).sum(axis=1)
    if float(cosines.min()) < floor:
        raise ModelError(f"{what} of {model_dir.name} disagrees with the model "
                         f"(cosine {float(cosines.min()):.6f}); use {instead}")


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
        raise ModelError(f"making the int8 file needs onnxruntime and onnx (the `models` extra) "
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
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_seq_length)
    check = _batch(tokenizer, _PROBES)
    reference = _hidden(source.read_bytes(), check)
    _compare(data, check, reference, model_dir, _MIN_INT8_COSINE, "int8 file",
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
    """The cached ONNX file of ``model``, made now when missing: an export (needs torch),
    and for the int8 variant a quantisation of the float file on top."""
    dest = onnx_cache_path(model, version, model_dir, cache_dir)
    if dest.is_file():
        return dest
    if not is_int8(model):
        _announce(f"exporting {_short(model)} to ONNX once (about 15 s; later runs reuse {dest.parent})")
        return export_onnx(model_dir, dest, max_seq_length)
    source = ensure_onnx_file(DEFAULT_MODEL, version, model_dir, cache_dir, max_seq_length)
    _announce(f"quantising {_short(model)} once (a few seconds; later runs reuse {dest.parent})")
    return quantize_int8(source, dest, model_dir, max_seq_length)


def _short(model: str) -> str:
    return model.rstrip("/").rsplit("/", 1)[-1]


def _announce(what: str) -> None:
    """Say on stderr, in one line, that a one-off wait starts: the first process on a
    machine otherwise sits silent for it. Only a real export or quantisation says it."""
    print(f"retold: {what}", file=sys.stderr, flush=True)


def ensure_exported(cfg: EmbeddingConfig | None = None) -> Path:
    """The ONNX file for ``cfg`` (default: the shipped model), exported now if missing.

    For CI images and ``make onnx``: run it once where torch is installed, and every later
    process starts without torch.
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
