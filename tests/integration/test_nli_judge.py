"""NLICrossEncoderJudge against a tiny randomly initialised BERT NLI model built on disk.

The model's verdicts mean nothing, so these tests check mechanics only: offline loading,
the label order read from the config, one batched call for both directions, and the
entailment floor logic.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from retold.config import EquivalenceConfig
from retold.errors import ModelError
from retold.ingest.equivalence import NLICrossEncoderJudge, judge_from_config

pytestmark = pytest.mark.model

# Deliberately not the common order, so a judge that assumed one would read wrong columns.
LABELS = {0: "neutral", 1: "contradiction", 2: "entailment"}
WORDS = [
    "the", "a", "an", "user", "aditya", "prefers", "likes", "enjoys", "hates", "drinks", "tea",
    "coffee", "water", "lives", "in", "pune", "berlin", "london", "works", "at", "home", "office",
    "is", "not", "very", "concise", "detailed", "short", "long", "answers", "explanations",
    "technical", "simple", "uses", "vim", "emacs", "python", "rust", "on", "mondays", "every",
    "day", "morning", "evening", "his", "her",
]
PAIRS = [
    ("aditya prefers concise answers", "aditya prefers detailed answers"),
    ("the user lives in pune", "the user lives in berlin"),
    ("aditya drinks tea every morning", "aditya likes tea"),
    ("the user uses vim", "the user uses emacs on mondays"),
]


def _build(directory: Path, id2label: dict[int, str]) -> Path:
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    directory.mkdir(parents=True)
    vocab = directory / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    torch.manual_seed(7)
    config = BertConfig(
        vocab_size=5 + len(WORDS), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=37, max_position_embeddings=128, num_labels=3,
        id2label=id2label, label2id={v: k for k, v in id2label.items()},
        initializer_range=0.5,  # large random weights, so different pairs score differently
    )
    model = BertForSequenceClassification(config)
    with torch.no_grad():  # distinct columns, so a swapped label shows up
        model.classifier.bias.copy_(torch.tensor([0.2, -0.6, 0.9]))
    model.save_pretrained(directory)
    BertTokenizer(str(vocab)).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("sentence_transformers")
    return _build(tmp_path_factory.mktemp("nli") / "tiny-nli", LABELS)


@pytest.fixture(scope="module")
def judge(model_dir: Path) -> NLICrossEncoderJudge:
    loaded = NLICrossEncoderJudge(str(model_dir), entail_floor=0.7, contradict_floor=0.7)
    assert not loaded.is_loaded
    loaded.load()
    return loaded


@pytest.fixture(scope="module")
def direct(model_dir: Path) -> Callable[[str, str], np.ndarray]:
    """Softmax probabilities computed with transformers itself, columns as in LABELS."""
    import torch
    from transformers import BertForSequenceClassification, BertTokenizer

    tokenizer = BertTokenizer.from_pretrained(str(model_dir))
    model = BertForSequenceClassification.from_pretrained(str(model_dir)).eval()

    def probs(premise: str, hypothesis: str) -> np.ndarray:
        with torch.no_grad():
            logits = model(**tokenizer(premise, hypothesis, return_tensors="pt")).logits
        return np.asarray(torch.softmax(logits, dim=-1)[0].numpy(), dtype=np.float64)

    return probs


def _judge_with(model_dir: Path, entail_floor: float, contradict_floor: float) -> NLICrossEncoderJudge:
    return NLICrossEncoderJudge(str(model_dir), entail_floor=entail_floor, contradict_floor=contradict_floor)


def test_loads_offline_from_a_path(judge: NLICrossEncoderJudge, model_dir: Path) -> None:
    assert judge.is_loaded
    assert judge.name == f"nli:{model_dir}"
    judge.load()  # a second load does nothing
    assert judge.is_loaded


def test_entails_is_the_entailment_column_of_the_softmax(
    judge: NLICrossEncoderJudge, direct: Callable[[str, str], np.ndarray]
) -> None:
    for premise, hypothesis in PAIRS:
        expected = direct(premise, hypothesis)
        assert np.isclose(expected.sum(), 1.0)
        score = judge.entails(premise, hypothesis)
        assert score is not None
        assert score == pytest.approx(float(expected[2]), abs=1e-5)
        others = (expected[0], expected[1])
        assert all(abs(score - float(o)) > 1e-3 for o in others)  # the mapping is not ambiguous


def test_judge_many_scores_both_directions_in_one_predict_call(
    judge: NLICrossEncoderJudge, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sentence_transformers import CrossEncoder

    seen: list[list[tuple[str, str]]] = []
    original = CrossEncoder.predict

    def spy(self: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append([tuple(p) for p in inputs])
        return original(self, inputs, *args, **kwargs)

    monkeypatch.setattr(CrossEncoder, "predict", spy)
    verdicts = judge.judge_many(PAIRS)
    assert len(verdicts) == len(PAIRS)
    assert set(verdicts) <= {"same", "contradicts", "distinct"}
    assert len(seen) == 1
    assert sorted(seen[0]) == sorted([*PAIRS, *((b, a) for a, b in PAIRS)])
    assert judge.judge_many([]) == [] and len(seen) == 1  # nothing to judge, no call


def test_contradiction_in_either_direction_wins(
    model_dir: Path, direct: Callable[[str, str], np.ndarray]
) -> None:
    a, b = PAIRS[0]
    worst = max(direct(a, b)[1], direct(b, a)[1])  # column 1 is "contradiction"
    assert _judge_with(model_dir, 1.01, float(worst) - 1e-4).judge(a, b) == "contradicts"
    assert _judge_with(model_dir, 1.01, float(worst) + 1e-4).judge(a, b) == "distinct"


def test_same_needs_both_directions_at_the_entail_floor(
    model_dir: Path, direct: Callable[[str, str], np.ndarray]
) -> None:
    a, b = PAIRS[2]
    weakest = min(direct(a, b)[2], direct(b, a)[2])  # column 2 is "entailment"
    assert _judge_with(model_dir, float(weakest) - 1e-4, 1.01).judge(a, b) == "same"
    assert _judge_with(model_dir, float(weakest) + 1e-4, 1.01).judge(a, b) == "distinct"


@pytest.mark.parametrize(
    ("entail_floor", "contradict_floor", "verdict"),
    [(1.01, 0.0, "contradicts"), (0.0, 0.0, "contradicts"), (0.0, 1.01, "same"), (1.01, 1.01, "distinct")],
)
def test_floor_extremes(model_dir: Path, entail_floor: float, contradict_floor: float, verdict: str) -> None:
    judge = _judge_with(model_dir, entail_floor, contradict_floor)
    assert judge.judge_many(PAIRS) == [verdict] * len(PAIRS)


def test_a_model_without_nli_labels_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("sentence_transformers")
    path = _build(tmp_path / "not-nli", {0: "a", 1: "b", 2: "c"})
    judge = _judge_with(path, 0.7, 0.7)
    with pytest.raises(ModelError, match=r"\['a', 'b', 'c'\]") as info:
        judge.load()
    assert str(path) in str(info.value)
    assert not judge.is_loaded


def test_a_missing_path_is_a_model_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    with pytest.raises(ModelError, match="no-such-model") as info:
        _judge_with(missing, 0.7, 0.7).load()
    assert "\n" not in str(info.value)


def test_config_builds_and_loads_the_nli_judge(model_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="retold.ingest.equivalence"):
        judge = judge_from_config(EquivalenceConfig(model=str(model_dir), entail_floor=0.6))
    assert isinstance(judge, NLICrossEncoderJudge)
    assert judge.is_loaded and judge.entail_floor == 0.6
    records = [r for r in caplog.records if r.name == "retold.ingest.equivalence"]
    assert [r.levelno for r in records] == [logging.INFO]
    assert str(model_dir) in records[0].getMessage()
