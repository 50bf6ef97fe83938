"""ExactJudge, FakeJudge and judge selection from config, without a model."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from retold.config import EquivalenceConfig
from retold.errors import ModelError
from retold.ingest.equivalence import (
    EquivalenceJudge,
    ExactJudge,
    FakeJudge,
    NLICrossEncoderJudge,
    judge_from_config,
    judge_note,
    nli_label_columns,
    normalise_claim,
)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Aditya prefers concise answers.", "aditya  prefers\tconcise answers"),
        ("Lives in Pune!", "lives in pune"),
        ("ＡＢＣ uses vim", "abc uses vim."),  # NFKC folds full-width letters
        ("Straße", "STRASSE"),  # casefold, not lower
        ("  trailing space .  ", "trailing space"),
    ],
)
def test_exact_judge_calls_normalised_equal_text_same(a: str, b: str) -> None:
    judge = ExactJudge()
    assert judge.judge(a, b) == "same"
    assert judge.judge(b, a) == "same"


def test_exact_judge_never_contradicts_and_cannot_score_entailment() -> None:
    judge = ExactJudge()
    assert judge.name == "exact"
    assert judge.judge("Prefers concise answers.", "Prefers detailed answers.") == "distinct"
    assert judge.judge("Lives in Pune?", "Lives in Pune") == "distinct"  # only . and ! drop
    assert judge.entails("Prefers tea.", "Prefers tea.") is None
    assert judge.judge_many([("a b", "A  B."), ("x", "y")]) == ["same", "distinct"]
    assert judge.judge_many([]) == []


def test_normalise_claim() -> None:
    assert normalise_claim("  Hello,\n  World!!. ") == "hello, world"
    assert normalise_claim("") == ""


def test_fake_judge_is_table_driven_symmetric_and_records_calls() -> None:
    judge = FakeJudge(
        table={("prefers tea", "prefers coffee"): "contradicts", ("likes tea", "enjoys tea"): "same"},
        entailment={("I love tea", "likes tea"): 0.9},
        default_entailment=0.1,
    )
    assert judge.name == "fake"
    assert judge.judge("prefers coffee", "prefers tea") == "contradicts"  # reversed lookup
    assert judge.judge("likes tea", "enjoys tea") == "same"
    assert judge.judge("likes tea", "lives in Pune") == "distinct"  # the default
    assert judge.judge_many([("enjoys tea", "likes tea"), ("a", "b")]) == ["same", "distinct"]
    assert judge.entails("I love tea", "likes tea") == 0.9
    assert judge.entails("likes tea", "I love tea") == 0.1  # entailment is directed
    assert judge.calls == [
        ("judge", "prefers coffee", "prefers tea"),
        ("judge", "likes tea", "enjoys tea"),
        ("judge", "likes tea", "lives in Pune"),
        ("judge_many", "enjoys tea", "likes tea"),
        ("judge_many", "a", "b"),
        ("entails", "I love tea", "likes tea"),
        ("entails", "likes tea", "I love tea"),
    ]


def test_fake_judge_defaults_and_not_scored() -> None:
    judge = FakeJudge(default="same", default_entailment=None)
    assert judge.judge("x", "y") == "same"
    assert judge.entails("x", "y") is None
    assert FakeJudge().entails("x", "y") == 1.0


def test_nli_labels_are_read_by_name_in_any_order() -> None:
    assert nli_label_columns({0: "contradiction", 1: "entailment", 2: "neutral"}) == (1, 0)
    assert nli_label_columns({0: "NEUTRAL", 1: "Contradiction", 2: "ENTAILMENT"}) == (2, 1)
    with pytest.raises(ModelError, match=r"found \['a', 'b', 'c'\]"):
        nli_label_columns({0: "a", 1: "b", 2: "c"})
    with pytest.raises(ModelError, match="LABEL_0"):
        nli_label_columns({0: "LABEL_0", 1: "LABEL_1"})


def test_nli_judge_does_not_load_until_asked() -> None:
    judge = NLICrossEncoderJudge("no-such-org/no-such-nli", 0.7, 0.7)
    assert not judge.is_loaded
    assert judge.name == "nli:no-such-org/no-such-nli"
    assert judge.judge_many([]) == []  # nothing to judge loads nothing
    assert not judge.is_loaded


@pytest.mark.parametrize(("model", "kind"), [("exact", ExactJudge), ("fake", FakeJudge)])
def test_config_selects_exact_and_fake(model: str, kind: type, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="retold.ingest.equivalence"):
        judge: EquivalenceJudge = judge_from_config(EquivalenceConfig(model=model))
    assert isinstance(judge, kind)
    assert judge.name == model
    assert not [r for r in caplog.records if r.name == "retold.ingest.equivalence"]


def test_config_falls_back_to_exact_fast_and_quietly(caplog: pytest.LogCaptureFixture) -> None:
    try:
        import sentence_transformers  # noqa: F401  import cost is not what is timed here
    except ImportError:
        pass  # then the fallback is for the missing package; still exact
    name = "no-such-org/no-such-nli-model"
    start = time.monotonic()
    with caplog.at_level(logging.DEBUG, logger="retold.ingest.equivalence"):
        judge = judge_from_config(EquivalenceConfig(model=name))
    elapsed = time.monotonic() - start
    assert isinstance(judge, ExactJudge)
    assert elapsed < 3.0, f"fallback waited {elapsed:.1f}s; a missing model must never wait on a hub"
    records = [r for r in caplog.records if r.name == "retold.ingest.equivalence"]
    # A fresh install runs like this: said at debug level for whoever looks, never warned
    # about on every command (retold check says it in words).
    assert [r.levelno for r in records] == [logging.DEBUG]
    message = records[0].getMessage()
    assert "exact" in message and name in message
    assert "\n" not in message


def test_the_note_says_what_the_exact_judge_means_and_how_to_get_the_model(tmp_path: Path) -> None:
    missing = judge_note(EquivalenceConfig(model="no-such-org/no-such-nli-model"))
    assert missing.startswith("equivalence judge: exact text, because the NLI model"
                              " no-such-org/no-such-nli-model is not on this machine")
    assert "only when their words match" in missing
    assert "hf download no-such-org/no-such-nli-model" in missing and "docs/models.md" in missing
    assert "\n" not in missing
    chosen = judge_note(EquivalenceConfig(model="exact"))
    assert chosen.startswith("equivalence judge: exact text (ingestion.equivalence.model: exact)")
    assert "download" not in chosen
    folder = tmp_path / "nli"
    folder.mkdir()
    assert judge_note(EquivalenceConfig(model=str(folder))) == (
        f"equivalence judge: NLI model {folder} (found on this machine; it loads on the first write)")
