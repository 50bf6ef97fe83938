"""The ONNX builder's inputs: the safetensors reader and what it refuses to build.

That the graph computes BERT is checked against transformers on a small random BERT
(tests/integration/test_onnx_build.py) and against sentence-transformers on the shipped
model (tests/integration/test_onnx_embedder.py).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from retold.errors import ModelError
from retold.index.onnx_build import build_encoder, read_safetensors
from tests.optional import need

_CODES = {np.dtype("<f4"): "F32", np.dtype("<f2"): "F16", np.dtype("<i8"): "I64"}


def write_safetensors(path: Path, tensors: dict[str, np.ndarray], header_extra: dict[str, Any] | None = None
                      ) -> None:
    """Write ``tensors`` in the safetensors layout: header length, JSON header, bytes."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}, **(header_extra or {})}
    body = b""
    for name, array in tensors.items():
        raw = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": _CODES[array.dtype], "shape": list(array.shape),
                        "data_offsets": [len(body), len(body) + len(raw)]}
        body += raw
    encoded = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + body)


def test_read_safetensors_returns_every_tensor_with_floats_as_float32(tmp_path: Path) -> None:
    weights = np.arange(12, dtype="<f4").reshape(3, 4) / 7
    half = np.array([[0.5, -2.0]], dtype="<f2")
    ids = np.arange(5, dtype="<i8")
    write_safetensors(tmp_path / "m.safetensors", {"w": weights, "h": half, "ids": ids})
    got = read_safetensors(tmp_path / "m.safetensors")
    assert set(got) == {"w", "h", "ids"}  # the metadata block is not a tensor
    np.testing.assert_array_equal(got["w"], weights)
    assert got["h"].dtype == np.float32 and got["h"].tolist() == [[0.5, -2.0]]
    assert got["ids"].dtype == np.int64 and got["ids"].tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(("content", "message"), [
    (b"", r"not a safetensors file"),
    (struct.pack("<Q", 10_000) + b"{}", r"not a safetensors file: header length 10000"),
    (struct.pack("<Q", 2) + b"[]", r"not a safetensors file: header is not a JSON object"),
])
def test_a_file_that_is_not_safetensors_is_one_model_error(tmp_path: Path, content: bytes,
                                                          message: str) -> None:
    (tmp_path / "m.safetensors").write_bytes(content)
    with pytest.raises(ModelError, match=message):
        read_safetensors(tmp_path / "m.safetensors")


def test_a_bad_tensor_entry_names_the_tensor(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    write_safetensors(path, {}, {"w": {"dtype": "BF16", "shape": [1], "data_offsets": [0, 2]}})
    with pytest.raises(ModelError, match=r"tensor w has an unsupported or missing 'BF16'"):
        read_safetensors(path)
    write_safetensors(path, {"w": np.zeros(2, "<f4")},
                      {"v": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})
    with pytest.raises(ModelError, match=r"tensor v is malformed: bytes 0\.\.16 lie outside"):
        read_safetensors(path)
    write_safetensors(path, {}, {"u": {"dtype": "F32", "shape": [3], "data_offsets": [0, 0]}})
    with pytest.raises(ModelError, match=r"tensor u is malformed"):
        read_safetensors(path)


def _model(tmp_path: Path, **config: Any) -> Path:
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    base = {"model_type": "bert", "hidden_act": "gelu", "hidden_size": 8, "num_attention_heads": 2,
            "num_hidden_layers": 1, "layer_norm_eps": 1e-12}
    (folder / "config.json").write_text(json.dumps({**base, **config}))
    word = np.zeros((4, 8), "<f4")
    write_safetensors(folder / "model.safetensors", {"embeddings.word_embeddings.weight": word})
    return folder


@pytest.mark.parametrize(("config", "message"), [
    ({"hidden_act": "relu"}, r"hidden_act is 'relu'; the ONNX builder handles 'gelu' only"),
    ({"model_type": "roberta"}, r"model_type is 'roberta'"),
    ({"position_embedding_type": "relative_key"}, r"position_embedding_type is 'relative_key'"),
    ({"num_attention_heads": 3}, r"multiple of num_attention_heads"),
    ({"hidden_size": None}, r"cannot read the encoder's shape"),
])
def test_a_network_other_than_plain_bert_is_refused(tmp_path: Path, config: dict[str, Any],
                                                    message: str) -> None:
    need("onnx")
    with pytest.raises(ModelError, match=message):
        build_encoder(_model(tmp_path, **config))


def test_weights_without_a_bert_tensor_name_it(tmp_path: Path) -> None:
    need("onnx")
    with pytest.raises(ModelError, match=r"no tensor embeddings\.position_embeddings\.weight"):
        build_encoder(_model(tmp_path))
