"""The memory-use policy text of LLD 13 for the three trigger modes of LLD 14.1."""

from __future__ import annotations

import pytest

from retold.policy.prompt import POLICY_VERSION, memory_policy, policy_text

MODES = ("tool_only", "auto", "hybrid")


def test_the_three_modes_give_three_different_texts() -> None:
    texts = {mode: policy_text(mode) for mode in MODES}  # type: ignore[arg-type]
    assert len(set(texts.values())) == 3


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_carries_the_version_and_the_write_rules(mode: str) -> None:
    policy = memory_policy(mode)  # type: ignore[arg-type]
    assert policy.version == POLICY_VERSION == "memory-policy-v1"
    assert policy.text == policy_text(mode)  # type: ignore[arg-type]
    text = policy.text
    assert text.startswith("You have long-term memory available through tools.")
    assert "memory_write" in text and "quote their words as evidence" in text
    assert "one fact per call" in text
    assert "change a future action" in text
    assert "verbatim quote from this session" in text
    assert "Never save secrets" in text
    assert "Do not save guesses as facts." in text
    assert "check their status, source, and date" in text


@pytest.mark.parametrize("mode", MODES)
def test_the_text_is_byte_stable(mode: str) -> None:
    assert policy_text(mode) == policy_text(mode)  # type: ignore[arg-type]


def test_tool_only_tells_the_model_when_to_search_and_mentions_no_recall() -> None:
    text = policy_text("tool_only")
    assert "call memory_search with one to three specific phrases" in text
    assert "Do not search for general knowledge" in text
    assert "recalled memory" not in text


def test_hybrid_appends_the_recalled_memory_pair() -> None:
    base, hybrid = policy_text("tool_only"), policy_text("hybrid")
    assert hybrid.startswith(base)
    assert hybrid.endswith(
        "Relevant memories may also appear automatically before you answer, marked as recalled memory."
        " Treat them exactly like search results: check their status, source, and date, and use"
        " memory_search yourself for anything more specific."
    )


def test_auto_never_asks_the_model_to_search() -> None:
    text = policy_text("auto")
    assert "memory_search" not in text
    assert text.endswith("marked as recalled memory.")
    assert "anything more specific" not in text


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="trigger mode"):
        policy_text("sometimes")  # type: ignore[arg-type]
