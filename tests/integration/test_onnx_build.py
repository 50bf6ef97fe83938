"""The built graph computes what transformers' BERT computes, on a small random BERT of
another shape than the shipped model's, so no dimension is right by coincidence."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from retold.index.onnx_build import build_encoder
from tests.optional import need


def test_the_built_graph_gives_transformers_hidden_states(tmp_path: Path) -> None:
    torch = need("torch")
    transformers = need("transformers")
    onnxruntime = need("onnxruntime")
    torch.manual_seed(7)
    config = transformers.BertConfig(vocab_size=50, hidden_size=24, num_hidden_layers=2,
                                     num_attention_heads=3, intermediate_size=40,
                                     max_position_embeddings=16, layer_norm_eps=1e-7)
    bert = transformers.BertModel(config, add_pooling_layer=False).eval()
    bert.save_pretrained(tmp_path)  # config.json and model.safetensors

    session = onnxruntime.InferenceSession(build_encoder(tmp_path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    ids = rng.integers(1, 50, size=(3, 9), dtype=np.int64)
    mask = np.ones_like(ids)
    mask[1, 5:], mask[2, 2:] = 0, 0  # two padded rows of different lengths
    ids[mask == 0] = 0
    types = np.zeros_like(ids)
    types[0, 4:] = 1  # a second segment, so the token-type table is read
    (ours,) = session.run(["last_hidden_state"], {"input_ids": ids, "attention_mask": mask,
                                                  "token_type_ids": types})
    with torch.no_grad():
        theirs = bert(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                      token_type_ids=torch.from_numpy(types)).last_hidden_state.numpy()
    assert ours.shape == (3, 9, 24)
    # Padded positions hold whatever the arithmetic leaves there; pooling never reads them.
    kept = mask.astype(bool)
    np.testing.assert_allclose(ours[kept], theirs[kept], atol=2e-5)
