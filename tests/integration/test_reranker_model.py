"""BgeReranker against a tiny randomly initialised single-label BERT cross-encoder on disk.

The scores mean nothing, so these tests check mechanics only: offline loading, warm(),
the sigmoid score scale against transformers itself, and one predict call per batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from retold.errors import ModelError
from retold.index.reranker import BgeReranker, rerank_with_timeout
from retold.models import Candidate

pytestmark = pytest.mark.model

WORDS = [
    "the", "a", "user", "aditya", "prefers", "likes", "tea", "coffee", "lives", "in", "pune",
    "berlin", "concise", "detailed", "answers", "explanations", "technical", "uses", "vim",
    "emacs", "style", "how", "should", "read", "where", "does", "live",
]
PAIRS = [
    ("explanation style", "aditya prefers concise technical explanations"),
    ("explanation style", "the user lives in pune"),
    ("where does aditya live", "the user lives in berlin"),
    ("where does aditya live", "aditya likes tea"),
    ("how should answers read", "the user uses vim"),
]


def _build(directory: Path, num_labels: int) -> Path:
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    directory.mkdir(parents=True)
    vocab = directory / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    torch.manual_seed(11)
    sizes: dict[str, Any] = {  # a dict: BertConfig's typed signature omits num_labels
        "vocab_size": 5 + len(WORDS), "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 2, "intermediate_size": 37, "max_position_embeddings": 128,
        "num_labels": num_labels,
        "initializer_range": 0.5,  # large random weights, so different pairs score differently
    }
    config = BertConfig(**sizes)
    BertForSequenceClassification(config).save_pretrained(directory)
    BertTokenizer(str(vocab)).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("sentence_transformers")
    return _build(tmp_path_factory.mktemp("rerank") / "tiny-reranker", num_labels=1)


@pytest.fixture(scope="module")
def reranker(model_dir: Path) -> BgeReranker:
    loaded = BgeReranker(str(model_dir), batch_size=2)
    assert not loaded.is_loaded
    loaded.warm()
    return loaded


@pytest.fixture(scope="module")
def raw_logit(model_dir: Path) -> Callable[[str, str], float]:
    """The single logit computed with transformers itself, no activation."""
    import torch
    from transformers import BertForSequenceClassification, BertTokenizer

    tokenizer = BertTokenizer.from_pretrained(str(model_dir))
    model = BertForSequenceClassification.from_pretrained(str(model_dir))  # in eval mode

    def logit(query: str, doc: str) -> float:
        with torch.no_grad():
            out = model(**tokenizer(query, doc, return_tensors="pt")).logits
        assert out.shape == (1, 1)
        return float(out[0, 0])

    return logit


def test_warm_loads_offline_from_a_path(reranker: BgeReranker, model_dir: Path) -> None:
    assert reranker.is_loaded
    assert reranker.name == str(model_dir)
    reranker.warm()  # a second warm does not load again
    assert reranker.is_loaded


def test_scores_are_the_sigmoid_of_the_raw_logit(
    reranker: BgeReranker, raw_logit: Callable[[str, str], float]
) -> None:
    scores = reranker.score_pairs(PAIRS)
    assert len(scores) == len(PAIRS)
    assert all(0.0 < s < 1.0 for s in scores)
    for (query, doc), score in zip(PAIRS, scores, strict=True):
        assert score == pytest.approx(1.0 / (1.0 + math.exp(-raw_logit(query, doc))), abs=1e-5)
    assert len({round(s, 6) for s in scores}) > 1  # the pairs are really scored apart
    query, doc = PAIRS[0]
    assert reranker.score(query, [doc, PAIRS[1][1]]) == pytest.approx(scores[:2], abs=1e-6)


def test_a_batch_makes_one_predict_call(reranker: BgeReranker, monkeypatch: pytest.MonkeyPatch) -> None:
    from sentence_transformers import CrossEncoder

    seen: list[tuple[list[tuple[str, str]], Any]] = []
    original = CrossEncoder.predict

    def spy(self: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(([tuple(p) for p in inputs], kwargs.get("batch_size")))
        return original(self, inputs, *args, **kwargs)

    monkeypatch.setattr(CrossEncoder, "predict", spy)
    assert len(reranker.score_pairs(PAIRS)) == len(PAIRS)
    assert seen == [(PAIRS, 2)]  # batch_size bounds the forward pass, not the call


def test_rerank_with_timeout_applies_with_the_real_model(reranker: BgeReranker) -> None:
    docs = {f"r{i}": doc for i, (_, doc) in enumerate(PAIRS)}
    shortlist = [Candidate(record_id=rid, fused_rank=i) for i, rid in enumerate(docs, start=1)]
    queries = ["explanation style", "where does aditya live"]
    out = rerank_with_timeout(reranker, shortlist, docs, queries, timeout_ms=30_000, on_failure="fail")
    assert out.status == "applied" and out.logged is not None
    best = [c.rerank_score for c in out.candidates]
    assert best == sorted(best, reverse=True)  # type: ignore[type-var]
    expected = {rid: max(reranker.score_pairs([(q, doc) for q in queries])) for rid, doc in docs.items()}
    for cand in out.candidates:
        assert cand.rerank_score == pytest.approx(expected[cand.record_id], abs=1e-6)


def test_a_missing_path_is_a_one_line_model_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-reranker"
    reranker = BgeReranker(str(missing))
    with pytest.raises(ModelError, match="no-such-reranker") as info:
        reranker.warm()
    assert "\n" not in str(info.value)
    assert not reranker.is_loaded


def test_a_model_with_several_labels_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("sentence_transformers")
    path = _build(tmp_path / "three-labels", num_labels=3)
    with pytest.raises(ModelError, match="3 output labels") as info:
        BgeReranker(str(path)).load()
    assert str(path) in str(info.value)
