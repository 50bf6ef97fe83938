"""The packaged encoder as an ONNX graph, written straight from its weights.

all-MiniLM-L6-v2 is a plain BERT encoder: embeddings, six identical layers of self-attention
and a feed-forward block, each closed by a layer norm. Its weights ship as one safetensors
file, which is a JSON header followed by raw little-endian arrays, so numpy reads it
without torch, and ``onnx.helper`` writes the graph node by node. Making the file this way
takes a few seconds and needs neither torch nor transformers, which is what lets an
install without them (``make demo``) run the model (docs/decisions.md, "The ONNX encoder
is built from the weights on first use").

The graph takes ``input_ids``, ``attention_mask`` and ``token_type_ids`` (int64, dynamic
batch and sequence axes) and returns ``last_hidden_state``; pooling and normalisation stay
in numpy, as for every other encoder here. It computes what transformers' BERT computes,
in the same order, so its vectors match sentence-transformers' to float rounding; the
model tests hold it to that.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from retold.errors import ModelError

__all__ = ["INPUTS", "OPSET", "OUTPUT", "build_encoder", "read_safetensors"]

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT = "last_hidden_state"
# 17 is the first opset with LayerNormalization as one operator, which ONNX Runtime runs
# as a fused kernel; older runtimes than the ones the extras allow would not load it.
OPSET = 17

# The safetensors dtypes a BERT checkpoint uses; half precision is widened, since the CPU
# kernels run in float32 anyway.
_DTYPES: dict[str, npt.DTypeLike] = {"F32": "<f4", "F16": "<f2", "I64": "<i8"}
# The header is JSON of a few kB; a larger length prefix means the file is not safetensors.
_MAX_HEADER = 100 << 20


def read_safetensors(path: Path) -> dict[str, npt.NDArray[Any]]:
    """Every tensor in the safetensors file ``path``, by name, as numpy arrays.

    The format is an 8-byte little-endian header length, a JSON header naming each
    tensor's dtype, shape and byte range, then the bytes. Floats come back as float32.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ModelError(f"cannot read {path}: {exc}") from exc
    try:
        (length,) = struct.unpack_from("<Q", raw, 0)
        if length > min(_MAX_HEADER, len(raw) - 8):
            raise ValueError(f"header length {length} does not fit a {len(raw)}-byte file")
        header = json.loads(raw[8 : 8 + length])
        if not isinstance(header, dict):
            raise ValueError("header is not a JSON object")
    except (struct.error, ValueError) as exc:
        raise ModelError(f"{path} is not a safetensors file: {exc}") from exc
    body = memoryview(raw)[8 + length :]
    tensors: dict[str, npt.NDArray[Any]] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = np.dtype(_DTYPES[entry["dtype"]])
            start, end = (int(x) for x in entry["data_offsets"])
            shape = tuple(int(x) for x in entry["shape"])
            if not 0 <= start <= end <= len(body):
                raise ValueError(f"bytes {start}..{end} lie outside the file")
            array = np.frombuffer(body[start:end], dtype=dtype).reshape(shape)
        except KeyError as exc:
            raise ModelError(f"{path}: tensor {name} has an unsupported or missing {exc}") from exc
        except (TypeError, ValueError) as exc:
            raise ModelError(f"{path}: tensor {name} is malformed: {exc}") from exc
        tensors[name] = array.astype(np.float32) if array.dtype.kind == "f" else array
    return tensors


class _Graph:
    """The nodes and initialisers of the graph under construction, with fresh names."""

    def __init__(self, weights: Mapping[str, npt.NDArray[Any]]) -> None:
        self.weights = weights
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._count = 0

    def const(self, name: str, value: npt.ArrayLike, dtype: npt.DTypeLike = np.float32) -> str:
        from onnx import numpy_helper

        array = np.ascontiguousarray(np.asarray(value, dtype=dtype))
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def weight(self, key: str, transpose: bool = False) -> str:
        """The checkpoint tensor ``key`` as an initialiser of the same name."""
        try:
            array = self.weights[key]
        except KeyError:
            raise ModelError(f"the weights have no tensor {key}; not a BERT checkpoint "
                             "this builder knows") from None
        return self.const(key + (".T" if transpose else ""), array.T if transpose else array)

    def op(self, op_type: str, *inputs: str, **attrs: Any) -> str:
        from onnx import helper

        self._count += 1
        out = f"{op_type.lower()}_{self._count}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def linear(self, x: str, prefix: str) -> str:
        # torch keeps a Linear's weight as (out, in); MatMul wants (in, out).
        product = self.op("MatMul", x, self.weight(prefix + ".weight", transpose=True))
        return self.op("Add", product, self.weight(prefix + ".bias"))

    def layer_norm(self, x: str, prefix: str, eps: float) -> str:
        return self.op("LayerNormalization", x, self.weight(prefix + ".weight"),
                       self.weight(prefix + ".bias"), axis=-1, epsilon=eps)


def _config(model_dir: Path) -> dict[str, Any]:
    """``config.json``, refused unless it describes the plain BERT this builder writes."""
    path = model_dir / "config.json"
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
        sizes = [int(cfg[k]) for k in ("hidden_size", "num_attention_heads", "num_hidden_layers")]
        float(cfg["layer_norm_eps"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelError(f"cannot read the encoder's shape from {path}: {exc}") from exc
    # Other activations or position encodings would need other nodes; saying so beats
    # writing a graph that runs and gives wrong vectors.
    wanted = {"model_type": "bert", "hidden_act": "gelu", "position_embedding_type": "absolute"}
    for key, value in wanted.items():
        if cfg.get(key, value) != value:
            raise ModelError(f"{path}: {key} is {cfg[key]!r}; the ONNX builder handles {value!r} only")
    if min(sizes) < 1 or sizes[0] % sizes[1]:
        raise ModelError(f"{path}: hidden_size must be a positive multiple of num_attention_heads")
    return dict(cfg)


def build_encoder(model_dir: Path) -> bytes:
    """The serialised ONNX graph of the BERT encoder in ``model_dir``.

    Reads ``config.json`` and ``model.safetensors``; raises ModelError when either is
    missing, malformed, or describes a network other than a plain BERT encoder.
    """
    try:
        import onnx
        from onnx import TensorProto, helper
    except ImportError as exc:
        raise ModelError(f"building the ONNX file needs the onnx package (the `onnx` extra) "
                         f"({exc})") from exc
    cfg = _config(model_dir)
    hidden, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    head_dims, eps = hidden // heads, float(cfg["layer_norm_eps"])
    g = _Graph(read_safetensors(model_dir / "model.safetensors"))

    # Embeddings: word + token type + position. Positions count 0, 1, 2, ... from the
    # first token of every row, padding or not, as in BERT: a running sum of ones, less
    # one. A lookup in the position table, like the other two, so the int8 quantiser
    # treats all three tables alike.
    ones = g.op("Add", g.op("Mul", "input_ids", g.const("zero", 0, np.int64)), g.const("one_i", 1, np.int64))
    steps = g.op("Sub", g.op("CumSum", ones, g.const("axis_1", 1, np.int64)), g.const("one_j", 1, np.int64))
    positions = g.op("Gather", g.weight("embeddings.position_embeddings.weight"), steps)
    words = g.op("Gather", g.weight("embeddings.word_embeddings.weight"), "input_ids")
    types = g.op("Gather", g.weight("embeddings.token_type_embeddings.weight"), "token_type_ids")
    x = g.layer_norm(g.op("Add", g.op("Add", words, types), positions), "embeddings.LayerNorm", eps)

    # The attention mask as a bias on the scores: 0 where a token is attended, the lowest
    # float where it is padding, so softmax gives padding no weight; (batch, 1, 1, seq)
    # broadcasts over heads and query positions.
    keep = g.op("Cast", "attention_mask", to=TensorProto.FLOAT)
    one = g.const("one", 1.0)
    drop = g.op("Sub", one, keep)
    bias = g.op("Mul", drop, g.const("lowest", np.finfo(np.float32).min))
    bias = g.op("Unsqueeze", bias, g.const("axes_1_2", [1, 2], np.int64))

    split = g.const("split_heads", [0, 0, heads, head_dims], np.int64)  # 0: keep that axis
    merge = g.const("merge_heads", [0, 0, hidden], np.int64)
    scale = g.const("scale", 1.0 / np.sqrt(head_dims))
    half, root2 = g.const("half", 0.5), g.const("sqrt2", np.sqrt(2.0))

    for i in range(int(cfg["num_hidden_layers"])):
        p = f"encoder.layer.{i}."
        # (batch, seq, hidden) to (batch, heads, seq, head_dims); keys go to
        # (batch, heads, head_dims, seq) so one MatMul gives the scores.
        q = g.op("Transpose", g.op("Reshape", g.linear(x, p + "attention.self.query"), split),
                 perm=[0, 2, 1, 3])
        k = g.op("Transpose", g.op("Reshape", g.linear(x, p + "attention.self.key"), split),
                 perm=[0, 2, 3, 1])
        v = g.op("Transpose", g.op("Reshape", g.linear(x, p + "attention.self.value"), split),
                 perm=[0, 2, 1, 3])
        scores = g.op("Add", g.op("Mul", g.op("MatMul", q, k), scale), bias)
        context = g.op("MatMul", g.op("Softmax", scores, axis=-1), v)
        context = g.op("Reshape", g.op("Transpose", context, perm=[0, 2, 1, 3]), merge)
        attended = g.op("Add", g.linear(context, p + "attention.output.dense"), x)
        x = g.layer_norm(attended, p + "attention.output.LayerNorm", eps)
        # BERT's gelu is the exact one, 0.5 * h * (1 + erf(h / sqrt 2)), not the tanh
        # approximation; ONNX Runtime recognises this pattern and fuses it.
        h = g.linear(x, p + "intermediate.dense")
        erf = g.op("Add", g.op("Erf", g.op("Div", h, root2)), one)
        gelu = g.op("Mul", g.op("Mul", h, half), erf)
        x = g.layer_norm(g.op("Add", g.linear(gelu, p + "output.dense"), x), p + "output.LayerNorm", eps)

    g.nodes.append(helper.make_node("Identity", [x], [OUTPUT]))
    inputs = [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
              for name in INPUTS]
    outputs = [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["batch", "sequence", hidden])]
    graph = helper.make_graph(g.nodes, "bert_encoder", inputs, outputs, g.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="retold")
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise ModelError(f"the ONNX graph built from {model_dir.name} is invalid: {first}") from exc
    data: bytes = model.SerializeToString()
    return data
