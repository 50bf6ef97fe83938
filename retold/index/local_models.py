"""Loading local sentence-transformers models: once, lazily, offline.

The embedder, the reranker and the NLI judge share this: a thread-safe load-once holder,
the ``device: auto`` rule, construction from local files only with one-line errors, and
the check that a model's files are there at all, made before anything loads. Nothing here
imports torch or sentence-transformers until a model is actually loaded.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from retold.errors import ModelError

__all__ = ["LazyModel", "load_local", "missing_local_model", "predict_logits", "resolve_device"]

# What a Hugging Face hub id looks like ("org/name" or "name"); anything else is a path.
_HUB_ID = re.compile(r"[\w.-]+(/[\w.-]+)?")
# Files of which a loadable model folder holds at least one.
_MODEL_FILES = ("modules.json", "config.json")


class LazyModel:
    """Holds one model that ``_load`` builds on first use, at most once per instance."""

    def __init__(self) -> None:
        self._model: Any = None
        self._load_lock = threading.Lock()

    @property
    def is_loaded(self) -> bool:
        """Whether the model has been loaded."""
        return self._model is not None

    def load(self) -> None:
        """Load the model now (thread-safe; later calls do nothing)."""
        if self._model is not None:
            return
        with self._load_lock:
            if self._model is None:
                self._model = self._load()

    def _load(self) -> Any:
        raise NotImplementedError


def missing_local_model(name: str) -> str | None:
    """What keeps ``name`` (a folder, or a hub id) from loading offline, or None when its
    files are there. A folder needs a model in it; a hub id needs a copy in the local
    Hugging Face cache (``sentence-transformers/`` is tried before a bare name, as the
    library does). Reads files only; huggingface_hub, not torch, is imported for a hub id.
    """
    folder = Path(name).expanduser()
    if folder.is_dir():
        if any((folder / file).is_file() for file in _MODEL_FILES):
            return None
        return f"{name} is a folder without a model in it (no {' or '.join(_MODEL_FILES)})"
    if folder.exists() or name.startswith((".", "/", "~")) or not _HUB_ID.fullmatch(name):
        return f"no model folder at {name}"
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return f"{name} is not a local folder, and huggingface_hub is not installed to find it"
    for repo in (name, f"sentence-transformers/{name}") if "/" not in name else (name,):
        if any(isinstance(try_to_load_from_cache(repo, file), str) for file in _MODEL_FILES):
            return None
    return (f"{name} is neither a local folder nor in the local Hugging Face cache; models load "
            "offline, so download it once or point the config at a folder")


def resolve_device(device: str) -> str:
    """Resolve ``device: auto``: cuda when available, then mps, else cpu."""
    if device != "auto":
        return device
    import torch

    if torch.cuda.is_available():
        return "cuda"
    return "mps" if torch.backends.mps.is_available() else "cpu"


def load_local(kind: str, what: str, model: str, device: str, build: Callable[[Any, str], Any]) -> Any:
    """Import sentence-transformers and ``build(module, device)`` from local files only.

    ``kind`` names the model in messages ("embedding", "reranker", "NLI"). The offline
    variables are set here, at load time, never at import; ``local_files_only`` is passed
    by ``build`` as well, because huggingface_hub reads those variables once at its own
    import, and a missing model would otherwise retry a closed network for ~45 s.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import sentence_transformers
    except ImportError as exc:
        raise ModelError(f"{kind} model {model} needs sentence-transformers; "
                         f"install the `models` extra ({exc})") from exc
    resolved = resolve_device(device)
    try:
        return build(sentence_transformers, resolved)
    except ModelError:
        raise
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        if isinstance(exc, OSError) and not os.path.exists(what):
            # The hub's own message talks about connecting, which we never try.
            first = "not a local path and not in the local Hugging Face cache"
        raise ModelError(f"cannot load {kind} model {model} on {resolved}: "
                         f"{type(exc).__name__}: {first}") from exc


def predict_logits(kind: str, name: str, model: Any, pairs: Sequence[tuple[str, str]],
                   batch_size: int) -> np.ndarray:
    """Raw logits of a CrossEncoder for ``pairs`` in one batched predict call.

    The identity activation keeps the model config's own activation out: callers apply
    the softmax or sigmoid their floors are defined on.
    """
    import torch

    try:
        logits = model.predict(
            list(pairs), batch_size=batch_size, show_progress_bar=False,
            activation_fn=torch.nn.Identity(), apply_softmax=False, convert_to_numpy=True,
        )
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise ModelError(f"{kind} model {name} failed: {type(exc).__name__}: {first}") from exc
    return np.asarray(logits)
