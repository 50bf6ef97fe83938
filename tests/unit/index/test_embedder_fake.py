"""FakeEmbedder and the shared embedder plumbing, without torch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from retold.config import read_config
from retold.errors import ConfigError, ModelError
from retold.index import encoding as encoding_module
from retold.index.embedder import (
    DEFAULT_MODEL,
    FakeEmbedder,
    SentenceTransformerEmbedder,
    embedder_from_config,
    resolve_model_path,
)

REPO = Path(__file__).resolve().parents[3]


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


class CountingFake(FakeEmbedder):
    """Records each batch the embedder actually encodes."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.batches: list[list[str]] = []

    def _encode(self, texts: list[str]) -> np.ndarray:
        self.batches.append(list(texts))
        return super()._encode(texts)


def test_defaults_and_protocol_fields() -> None:
    fake = FakeEmbedder()
    assert (fake.name, fake.version, fake.dims) == ("fake", "fake-1", 384)
    assert fake.is_loaded
    fake.load()  # a no-op, present for parity with the real model


def test_deterministic_across_instances() -> None:
    texts = ["Keep answers concise.", "The user lives in Pune", ""]
    a = FakeEmbedder().embed_documents(texts)
    b = FakeEmbedder().embed_queries(texts)
    assert np.array_equal(a, b)


def test_deterministic_across_processes_with_different_hash_seeds() -> None:
    code = (
        "from retold.index.embedder import FakeEmbedder; "
        "print(repr(float(FakeEmbedder().embed_documents(['prefers dark mode'])[0, :4].sum())))"
    )
    outs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)}
        proc = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        outs.add(proc.stdout.strip())
    assert len(outs) == 1


@pytest.mark.parametrize("dims", [8, 384])
def test_shape_dtype_and_unit_norm(dims: int) -> None:
    fake = FakeEmbedder(dims=dims)
    for out in (
        fake.embed_documents(["a b c", "!!!", "x"]),
        fake.embed_queries(["a b c", "!!!", "x"]),
    ):
        assert out.shape == (3, dims)
        assert out.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-6)


def test_empty_input_has_zero_rows() -> None:
    fake = FakeEmbedder(dims=16)
    assert fake.embed_queries([]).shape == (0, 16)
    assert fake.embed_documents([]).shape == (0, 16)
    assert fake.embed_queries([]).dtype == np.float32


def test_shared_words_are_more_similar_than_unrelated_text() -> None:
    fake = FakeEmbedder()
    a, b, c = fake.embed_documents(
        ["the user prefers dark mode", "User prefers DARK mode in editors", "invoice due friday"]
    )
    assert _cos(a, b) > 0.5
    assert abs(_cos(a, c)) < 0.25
    assert _cos(a, b) > _cos(a, c) + 0.3


@pytest.mark.parametrize("cosine", [0.93, 0.5, 0.0, -0.4, 1.0])
def test_make_similar_hits_the_cosine(cosine: float) -> None:
    fake = FakeEmbedder()
    returned = fake.make_similar("how should answers look", "Keep answers concise.", cosine)
    q = fake.embed_queries(["how should answers look"])[0]
    d = fake.embed_documents(["Keep answers concise."])[0]
    assert abs(float(np.dot(q, d)) - cosine) < 1e-5
    np.testing.assert_allclose(returned, q, atol=1e-7)
    with pytest.raises(ValueError):
        fake.make_similar("x", "y", 1.5)


def test_pin_sets_an_exact_vector_and_overrides_a_cached_query() -> None:
    fake = FakeEmbedder(dims=4)
    before = fake.embed_queries(["q"])[0]
    fake.pin("q", [0.0, 3.0, 0.0, 4.0])
    expected = np.array([0.0, 0.6, 0.0, 0.8], dtype=np.float32)
    np.testing.assert_allclose(fake.embed_queries(["q"])[0], expected, atol=1e-7)
    np.testing.assert_allclose(fake.embed_documents(["q"])[0], expected, atol=1e-7)
    assert not np.allclose(before, expected)
    with pytest.raises(ValueError):
        fake.pin("q", [0.0, 0.0, 0.0, 0.0])
    with pytest.raises(ValueError):
        fake.pin("q", [1.0, 2.0])


def test_query_cache_is_bounded_lru_and_documents_never_enter_it() -> None:
    fake = CountingFake(query_cache_entries=3)
    fake.embed_documents([f"doc {i}" for i in range(10)])
    assert fake.cache_size == 0
    for i in range(10):
        fake.embed_queries([f"query {i}"])
    assert fake.cache_size == 3
    fake.batches.clear()
    fake.embed_queries(["query 9", "query 8", "query 7"])  # the three most recent: all hits
    assert fake.batches == []
    fake.embed_queries(["query 0"])  # evicted long ago: encoded again
    assert fake.batches == [["query 0"]]
    assert fake.cache_size == 3


def test_embed_queries_encodes_only_misses_in_one_batch() -> None:
    fake = CountingFake()
    first = fake.embed_queries(["a", "b"])
    fake.batches.clear()
    out = fake.embed_queries(["b", "c", "a", "d", "c"])
    assert fake.batches == [["c", "d"]]
    assert out.shape == (5, 384)
    np.testing.assert_array_equal(out[0], first[1])
    np.testing.assert_array_equal(out[1], out[4])


def test_returned_rows_do_not_alias_the_cache() -> None:
    fake = FakeEmbedder()
    out = fake.embed_queries(["q"])
    out[0, :] = 0.0
    assert np.linalg.norm(fake.embed_queries(["q"])[0]) == pytest.approx(1.0, abs=1e-6)


def test_zero_cap_disables_the_query_cache() -> None:
    fake = FakeEmbedder(query_cache_entries=0)
    fake.embed_queries(["a", "b"])
    assert fake.cache_size == 0


def test_a_config_with_zero_cache_entries_builds_an_embedder_without_a_cache() -> None:
    config = read_config(overrides={"embedding": {"model": "fake", "query_cache_entries": 0}})
    embedder = embedder_from_config(config.embedding)
    embedder.embed_queries(["a", "b"])
    embedder.embed_queries(["a"])
    assert isinstance(embedder, FakeEmbedder) and embedder.cache_size == 0


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [({"dims": 0}, "embedding.dims"), ({"max_chars": 0}, "embedding.max_chars"),
     ({"query_cache_entries": -1}, "embedding.query_cache_entries")],
)
def test_bad_settings_raise_config_error_naming_the_key(kwargs: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        FakeEmbedder(**kwargs)


def _cfg(**overrides: object) -> Any:  # duck-typed stand-in for EmbeddingConfig
    base = dict(model="fake", backend="auto", version="v7", dims=32, device="auto", max_chars=100,
                query_cache_entries=5, torch_threads=None, onnx_cache_dir=None)
    return SimpleNamespace(**{**base, **overrides})


def test_embedder_from_config_fake_and_real_without_loading() -> None:
    fake = embedder_from_config(_cfg())
    assert isinstance(fake, FakeEmbedder)
    assert (fake.name, fake.version, fake.dims) == ("fake", "v7", 32)
    real = embedder_from_config(_cfg(model="some/model", dims=1024, torch_threads=2))
    assert isinstance(real, SentenceTransformerEmbedder)
    assert (real.name, real.version, real.dims, real.torch_threads) == ("some/model", "v7", 1024, 2)
    assert not real.is_loaded  # construction never loads a model: that waits for first use


def test_resolve_model_path_passes_other_names_through() -> None:
    assert resolve_model_path("BAAI/bge-m3") == "BAAI/bge-m3"
    assert resolve_model_path("/models/local") == "/models/local"


@pytest.mark.model
def test_the_default_names_resolve_to_the_packaged_weights() -> None:
    for name in (DEFAULT_MODEL, "all-MiniLM-L6-v2"):
        assert (Path(resolve_model_path(name)) / "modules.json").is_file()


def test_resolve_model_path_without_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(encoding_module, "_PACKAGED_MODULE", "no_such_weights_package_xyz")
    with pytest.raises(ModelError, match="models"):
        resolve_model_path(DEFAULT_MODEL)


def test_importing_the_module_stays_light() -> None:
    code = (
        "import retold.index.embedder, sys; "
        "assert 'torch' not in sys.modules and 'sentence_transformers' not in sys.modules"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
