"""Which embedder ``embedding.backend`` selects, decided without importing a model library."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from retold.config import EmbeddingConfig, read_config
from retold.errors import ConfigError, ModelMissingError
from retold.index.embedder import (
    INT8_MODEL,
    FakeEmbedder,
    SentenceTransformerEmbedder,
    check_model_files,
    choose_backend,
    embedder_from_config,
    is_int8,
    packaged_model,
)
from retold.index.onnx_embedder import OnnxEmbedder

EVERYTHING = {"onnxruntime", "tokenizers", "torch", "transformers", "onnx"}
ONNX_EXTRA = {"onnxruntime", "tokenizers", "onnx"}  # what `make demo` installs: no torch
RUNTIME_ONLY = {"onnxruntime", "tokenizers"}  # can load a file made elsewhere, not make one


def _cfg(**changes: object) -> EmbeddingConfig:
    return dataclasses.replace(EmbeddingConfig(), **changes)  # type: ignore[arg-type]


def _has(modules: set[str]) -> Callable[[str], bool]:
    return modules.__contains__


def _exported(answer: bool) -> Callable[[EmbeddingConfig], bool]:
    def check(cfg: EmbeddingConfig) -> bool:
        return answer

    return check


def _never_asked(cfg: EmbeddingConfig) -> bool:
    raise AssertionError("looked for the ONNX file although export is possible")


def test_backend_defaults_to_auto_and_is_validated() -> None:
    assert EmbeddingConfig().backend == "auto"
    assert read_config(overrides={"embedding": {"backend": "onnx"}}).embedding.backend == "onnx"
    with pytest.raises(ConfigError, match=r"embedding\.backend: must be one of"):
        read_config(overrides={"embedding": {"backend": "tensorrt"}})


def test_auto_picks_onnx_for_the_packaged_model_when_it_can_export() -> None:
    for name in ("sentence-transformers/all-MiniLM-L6-v2", "all-MiniLM-L6-v2"):
        for device in ("auto", "cpu"):
            cfg = _cfg(model=name, device=device)
            assert choose_backend(cfg, installed=_has(EVERYTHING), exported=_never_asked) == "onnx"


def test_auto_picks_onnx_without_torch_where_the_file_can_be_built() -> None:
    assert choose_backend(_cfg(), installed=_has(ONNX_EXTRA), exported=_never_asked) == "onnx"


def test_auto_without_the_onnx_package_uses_a_file_made_elsewhere() -> None:
    cfg = _cfg()
    assert choose_backend(cfg, installed=_has(RUNTIME_ONLY), exported=_exported(True)) == "onnx"
    # no file and no way to make one: sentence-transformers reports what is missing
    assert (choose_backend(cfg, installed=_has(RUNTIME_ONLY), exported=_exported(False))
            == "sentence-transformers")


def test_auto_keeps_sentence_transformers_where_onnx_does_not_apply() -> None:
    everything = _has(EVERYTHING)
    assert choose_backend(_cfg(model="BAAI/bge-m3", dims=1024), installed=everything,
                          exported=_never_asked) == "sentence-transformers"
    assert choose_backend(_cfg(model="/models/local-minilm"), installed=everything,
                          exported=_never_asked) == "sentence-transformers"
    for device in ("cuda", "mps"):
        assert choose_backend(_cfg(device=device), installed=everything,
                              exported=_never_asked) == "sentence-transformers"
    no_runtime = _has(EVERYTHING - {"onnxruntime"})
    assert choose_backend(_cfg(), installed=no_runtime, exported=_exported(True)) == "sentence-transformers"


def test_explicit_backends_are_obeyed() -> None:
    nothing = _has(set())
    assert choose_backend(_cfg(backend="sentence-transformers"), installed=_has(EVERYTHING),
                          exported=_exported(True)) == "sentence-transformers"
    # explicit onnx is chosen even when a library is missing: the first load names it
    assert choose_backend(_cfg(backend="onnx"), installed=nothing, exported=_exported(False)) == "onnx"
    assert choose_backend(_cfg(model="fake", backend="onnx"), installed=nothing,
                          exported=_never_asked) == "fake"


def test_explicit_onnx_where_it_cannot_apply_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"embedding\.backend: onnx has an export path only"):
        choose_backend(_cfg(backend="onnx", model="BAAI/bge-m3"))
    with pytest.raises(ConfigError, match=r"embedding\.backend: onnx runs on the CPU.*cuda"):
        choose_backend(_cfg(backend="onnx", device="cuda"))


def test_the_int8_variant_runs_only_on_onnx_and_is_never_swapped_for_the_float_model() -> None:
    for name in (INT8_MODEL, "all-MiniLM-L6-v2-int8"):
        assert is_int8(name) and packaged_model(name) == INT8_MODEL
        # whatever is installed: falling back would store float vectors under the int8 name
        assert choose_backend(_cfg(model=name), installed=_has(set()), exported=_exported(False)) == "onnx"
        assert choose_backend(_cfg(model=name, backend="onnx", device="cpu")) == "onnx"
    for changes in ({"backend": "sentence-transformers"}, {"device": "cuda"}):
        with pytest.raises(ConfigError, match=r"embedding\.model: .*-int8 runs on ONNX Runtime on the CPU"):
            choose_backend(_cfg(model=INT8_MODEL, **changes))
    assert not is_int8("sentence-transformers/all-MiniLM-L6-v2")
    assert packaged_model("all-MiniLM-L6-v2") == "sentence-transformers/all-MiniLM-L6-v2"
    assert packaged_model("BAAI/bge-m3") is None and not is_int8("BAAI/bge-m3-int8")
    built = embedder_from_config(_cfg(model=INT8_MODEL))
    assert isinstance(built, OnnxEmbedder) and built.name == INT8_MODEL and not built.is_loaded


def test_a_missing_onnxruntime_is_named_for_the_int8_variant() -> None:
    with pytest.raises(ModelMissingError, match="needs onnxruntime, tokenizers"):
        check_model_files(_cfg(model=INT8_MODEL), installed=_has({"torch", "sentence_transformers"}))


def test_embedder_from_config_builds_the_chosen_backend_without_loading() -> None:
    onnx = embedder_from_config(_cfg(backend="onnx", torch_threads=1, onnx_cache_dir="/x",
                                     query_cache_entries=7))
    assert isinstance(onnx, OnnxEmbedder)
    assert (onnx.name, onnx.version, onnx.dims, onnx.threads, onnx.cache_dir) == (
        "sentence-transformers/all-MiniLM-L6-v2", "1", 384, 1, "/x")
    assert not onnx.is_loaded and onnx.onnx_path is None
    st = embedder_from_config(_cfg(backend="sentence-transformers", torch_threads=2))
    assert isinstance(st, SentenceTransformerEmbedder) and st.torch_threads == 2
    assert isinstance(embedder_from_config(_cfg(model="fake", dims=8)), FakeEmbedder)


def test_onnx_embedder_checks_its_settings() -> None:
    with pytest.raises(ConfigError, match=r"embedding\.torch_threads"):
        OnnxEmbedder(threads=0)
    with pytest.raises(ConfigError, match=r"embedding\.max_chars"):
        OnnxEmbedder(max_chars=0)


# -- the model's files are checked before anything loads ---------------------------------------

WITH_ST = _has(EVERYTHING | {"sentence_transformers"})


def test_the_fake_needs_nothing_and_a_missing_library_is_named() -> None:
    check_model_files(_cfg(model="fake"), installed=_has(set()))
    with pytest.raises(ModelMissingError, match="needs sentence_transformers; install the `models` extra"):
        check_model_files(_cfg(backend="sentence-transformers"), installed=_has(EVERYTHING))
    with pytest.raises(ModelMissingError, match=r"needs onnxruntime; install the `onnx` extra"):
        check_model_files(_cfg(backend="onnx"), installed=_has({"tokenizers"}))


@pytest.mark.model
def test_the_packaged_model_passes_the_file_check() -> None:
    check_model_files(_cfg(backend="sentence-transformers"))


@pytest.mark.parametrize(("model", "needle"), [
    ("{tmp}/no-such-model", "embedding.model: no model folder at {tmp}/no-such-model"),
    ("{tmp}", "is a folder without a model in it"),
])
def test_a_model_folder_that_is_not_there_is_one_clear_error(tmp_path: Path, model: str, needle: str) -> None:
    cfg = _cfg(backend="sentence-transformers", model=model.format(tmp=tmp_path))
    with pytest.raises(ModelMissingError) as caught:
        check_model_files(cfg, installed=WITH_ST)
    assert needle.format(tmp=tmp_path) in str(caught.value) and "\n" not in str(caught.value)


def test_a_hub_id_missing_from_the_local_cache_is_one_clear_error() -> None:
    pytest.importorskip("huggingface_hub")
    with pytest.raises(ModelMissingError, match="neither a local folder nor in the local Hugging Face cache"):
        check_model_files(_cfg(backend="sentence-transformers", model="retold-tests/no-such-model"),
                          installed=WITH_ST)
