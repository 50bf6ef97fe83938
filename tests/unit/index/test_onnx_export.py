"""The ONNX cache: where the file goes, what its name depends on, and the atomic write."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest

from retold.config import EmbeddingConfig
from retold.errors import ConfigError, ModelError
from retold.index import onnx_export
from retold.index.embedder import mean_pool
from retold.index.onnx_export import (
    configured_cache_dir,
    default_cache_dir,
    ensure_exported,
    max_seq_length,
    onnx_cache_path,
    quantize_int8,
    weights_digest,
    write_atomically,
)


def _model_dir(root: Path, weights: bytes = b"weights-v1") -> Path:
    folder = root / "model"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text('{"hidden_size": 384}')
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "sentence_bert_config.json").write_text('{"max_seq_length": 256}')
    return folder


def test_default_cache_dir_follows_xdg_then_home(tmp_path: Path) -> None:
    assert default_cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "retold" / "onnx"
    assert default_cache_dir({}) == Path.home() / ".cache" / "retold" / "onnx"


def test_a_configured_cache_dir_wins_and_expands_home(tmp_path: Path) -> None:
    assert configured_cache_dir(str(tmp_path)) == tmp_path
    assert configured_cache_dir("~/models") == Path.home() / "models"
    assert configured_cache_dir(None) == default_cache_dir()


def test_cache_file_is_named_for_model_version_and_weights(tmp_path: Path) -> None:
    folder = _model_dir(tmp_path)
    path = onnx_cache_path("sentence-transformers/all-MiniLM-L6-v2", "1", folder, tmp_path / "c")
    digest = weights_digest(folder)
    assert path == tmp_path / "c" / f"all-MiniLM-L6-v2-1-{digest}.onnx"
    assert len(digest) == 16
    # both names of the packaged model share one file
    assert onnx_cache_path("all-MiniLM-L6-v2", "1", folder, tmp_path / "c") == path
    assert onnx_cache_path("all-MiniLM-L6-v2", "2", folder, tmp_path / "c") != path
    odd = onnx_cache_path("org/we ird:name", "v 1/x", folder, tmp_path)
    assert odd.parent == tmp_path and odd.name.startswith("we_ird_name-v_1_x-")


def test_changed_weights_change_the_cache_file(tmp_path: Path) -> None:
    first = weights_digest(_model_dir(tmp_path / "a", b"weights-v1"))
    assert weights_digest(_model_dir(tmp_path / "b", b"weights-v1")) == first  # content, not path
    assert weights_digest(_model_dir(tmp_path / "c", b"weights-v2")) != first
    folder = _model_dir(tmp_path / "d", b"weights-v1")
    (folder / "model.safetensors").write_bytes(b"weights-v3, rewritten in place")
    assert weights_digest(folder) != first


def test_export_format_is_part_of_the_digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _model_dir(tmp_path)
    before = weights_digest(folder)
    monkeypatch.setattr(onnx_export, "EXPORT_FORMAT", "999")
    onnx_export._digest.cache_clear()
    assert weights_digest(folder) != before
    onnx_export._digest.cache_clear()


def test_a_folder_without_weights_is_a_model_error(tmp_path: Path) -> None:
    folder = tmp_path / "empty"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    with pytest.raises(ModelError, match="no weights"):
        weights_digest(folder)


def test_max_seq_length_comes_from_the_sentence_transformers_config(tmp_path: Path) -> None:
    folder = _model_dir(tmp_path)
    assert max_seq_length(folder) == 256
    (folder / "sentence_bert_config.json").write_text('{"max_seq_length": 0}')
    with pytest.raises(ModelError, match="positive integer"):
        max_seq_length(folder)
    (folder / "sentence_bert_config.json").unlink()
    with pytest.raises(ModelError, match="max_seq_length"):
        max_seq_length(folder)


def test_write_atomically_leaves_one_whole_file_and_no_temporaries(tmp_path: Path) -> None:
    dest = tmp_path / "deep" / "er" / "model.onnx"
    write_atomically(dest, b"first")
    assert dest.read_bytes() == b"first"
    assert oct(dest.stat().st_mode & 0o777) == oct(0o644)
    write_atomically(dest, b"second")
    assert dest.read_bytes() == b"second"
    assert os.listdir(dest.parent) == ["model.onnx"]


def test_racing_writers_end_with_one_complete_file(tmp_path: Path) -> None:
    dest = tmp_path / "model.onnx"
    payloads = [bytes([i]) * 2_000_000 for i in range(8)]
    start = threading.Barrier(len(payloads))

    def write(data: bytes) -> None:
        start.wait()
        write_atomically(dest, data)

    threads = [threading.Thread(target=write, args=(p,)) for p in payloads]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert dest.read_bytes() in payloads  # one writer's bytes, whole
    assert os.listdir(tmp_path) == ["model.onnx"]


def test_a_failed_write_leaves_neither_file_nor_temporary(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    dest = tmp_path / "model.onnx"

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(onnx_export.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        write_atomically(dest, b"data")
    assert os.listdir(tmp_path) == []


def test_ensure_exported_refuses_a_model_without_an_export_path() -> None:
    with pytest.raises(ConfigError, match="no ONNX export path"):
        ensure_exported(EmbeddingConfig(model="BAAI/bge-m3"))


def _exported_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A fake model folder and a cache already holding its float file; building it again
    fails the test. Returns the cache folder and the float file."""
    folder = _model_dir(tmp_path)
    cache = tmp_path / "cache"
    monkeypatch.setattr(onnx_export, "resolve_model_path", lambda name: str(folder))

    def no_export(*args: object) -> Path:
        raise AssertionError("built although the file exists")

    monkeypatch.setattr(onnx_export, "export_onnx", no_export)
    source = onnx_cache_path("all-MiniLM-L6-v2", "1", folder, cache)
    write_atomically(source, b"an exported graph")
    return cache, source


def test_ensure_exported_returns_an_existing_file_without_exporting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache, dest = _exported_cache(tmp_path, monkeypatch)
    assert ensure_exported(EmbeddingConfig(onnx_cache_dir=str(cache))) == dest


def test_a_failed_quantisation_is_one_model_error_and_leaves_nothing(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime.quantization")
    folder = _model_dir(tmp_path)
    cache = tmp_path / "cache"
    cache.mkdir()
    source = cache / "float.onnx"
    source.write_bytes(b"not an onnx graph")
    with pytest.raises(ModelError, match=r"int8 quantisation of float\.onnx failed: "):
        quantize_int8(source, cache / "int8.onnx", folder)
    assert [p.name for p in cache.iterdir()] == ["float.onnx"]  # no file, no temporaries


def test_the_int8_file_is_quantised_from_an_existing_float_file_without_exporting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache, source = _exported_cache(tmp_path, monkeypatch)
    made: list[tuple[Path, Path]] = []

    def quantize(source: Path, dest: Path, *args: object) -> Path:
        made.append((source, dest))
        write_atomically(dest, b"an int8 graph")
        return dest

    monkeypatch.setattr(onnx_export, "quantize_int8", quantize)
    cfg = EmbeddingConfig(model="sentence-transformers/all-MiniLM-L6-v2-int8", onnx_cache_dir=str(cache))
    dest = ensure_exported(cfg)
    assert dest.name.startswith("all-MiniLM-L6-v2-int8-1-") and made == [(source, dest)]
    assert ensure_exported(cfg) == dest and len(made) == 1  # made once


def test_only_a_real_build_says_so_on_stderr_and_before_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    cache, _ = _exported_cache(tmp_path, monkeypatch)
    ensure_exported(EmbeddingConfig(onnx_cache_dir=str(cache)))
    assert capfd.readouterr() == ("", "")  # the file is there: a normal run says nothing

    said: list[str] = []

    def export(model_dir: Path, dest: Path, *args: object) -> Path:
        said.append(capfd.readouterr().err)  # what the user saw when the wait began
        write_atomically(dest, b"an exported graph")
        return dest

    monkeypatch.setattr(onnx_export, "export_onnx", export)
    empty = tmp_path / "empty-cache"
    ensure_exported(EmbeddingConfig(onnx_cache_dir=str(empty)))
    (line,) = said[0].splitlines()
    assert "building all-MiniLM-L6-v2's ONNX file once" in line and str(empty) in line
    ensure_exported(EmbeddingConfig(onnx_cache_dir=str(empty)))
    assert capfd.readouterr() == ("", "") and len(said) == 1


def test_mean_pool_ignores_padding() -> None:
    hidden = np.array([[[1.0, 0.0], [3.0, 2.0], [100.0, 100.0]]], dtype=np.float32)
    mask = np.array([[1, 1, 0]])
    np.testing.assert_allclose(mean_pool(hidden, mask), [[2.0, 1.0]])
    assert np.isfinite(mean_pool(hidden, np.zeros((1, 3), dtype=np.int64))).all()
