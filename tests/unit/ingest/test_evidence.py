"""Evidence validation against a small transcript."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

import pytest

from retold.config import EvidenceConfig, SourceRanks
from retold.ingest.evidence import normalize_ws, session_of, source_ref, validate_evidence
from retold.models import EvidenceCheck, Turn
from retold.testing import T0

TRANSCRIPT = [
    Turn("s1", 1, "user", "Please keep answers concise.\nI read them on my phone.", T0),
    Turn("s1", 2, "assistant", "Aditya probably prefers short technical explanations.",
         T0 + timedelta(seconds=5)),
    Turn("s1", 3, "tool", "build status: 42 tests passed in 3.1 seconds", T0 + timedelta(seconds=9)),
    Turn("s1", 4, "user", "Also, the deploy target is the staging cluster.", T0 + timedelta(seconds=20)),
]


def check(
    quote: str | None,
    claimed: str,
    *,
    turn_hint: int | None = None,
    ranks: Mapping[str, int] | SourceRanks | None = None,
) -> EvidenceCheck:
    defaults = EvidenceConfig()
    return validate_evidence(
        TRANSCRIPT, quote, claimed, turn_hint=turn_hint,
        min_characters=defaults.min_characters, min_words=defaults.min_words,
        source_rank=ranks or SourceRanks(),
    )


def test_normalize_ws_collapses_every_whitespace_run() -> None:
    assert normalize_ws("  a\tb\n\n c  d \r\n") == "a b c d"
    assert normalize_ws("") == ""


def test_missing_quote_downgrades_to_agent_inference() -> None:
    result = check(None, "user_statement")
    assert result.found is False
    assert result.source_kind == "agent_inference"
    assert (result.turn, result.role) == (None, None)


def test_no_evidence_records_evidence_not_provided() -> None:
    for quote in (None, "", "   \n\t "):
        assert check(quote, "user_statement") == EvidenceCheck(
            False, None, None, "agent_inference", "evidence not provided"
        )


def test_user_statement_claimed_from_assistant_turn_is_downgraded_with_note() -> None:
    result = check("prefers short technical explanations", "user_statement")
    assert result == EvidenceCheck(
        True, 2, "assistant", "agent_inference",
        "downgraded from user_statement: quote is from a assistant turn",
    )


def test_tool_turn_supports_tool_result() -> None:
    result = check("42 tests passed in 3.1 seconds", "tool_result")
    assert result == EvidenceCheck(True, 3, "tool", "tool_result", None)


def test_tool_turn_does_not_support_user_statement() -> None:
    result = check("42 tests passed in 3.1 seconds", "user_statement")
    assert (result.found, result.turn, result.source_kind) == (True, 3, "tool_result")
    assert result.note == "downgraded from user_statement: quote is from a tool turn"


def test_user_turn_supports_user_statement() -> None:
    result = check("the deploy target is the staging cluster", "user_statement")
    assert result == EvidenceCheck(True, 4, "user", "user_statement", None)


def test_caller_may_claim_a_lower_source_kind() -> None:
    assert check("the deploy target is the staging cluster", "agent_inference") == EvidenceCheck(
        True, 4, "user", "agent_inference", None
    )
    assert check("the deploy target is the staging cluster", "tool_result") == EvidenceCheck(
        True, 4, "user", "tool_result", None
    )


def test_returned_turn_is_the_matched_turn_and_source_ref_points_to_it() -> None:
    result = check("deploy target is the staging", "user_statement")
    assert result.turn == 4
    assert TRANSCRIPT[3].turn == result.turn
    assert source_ref("s1", 4) == "session:s1<turn:4>"
    assert source_ref("sess_42~2", 12) == "session:sess_42~2<turn:12>"


def test_a_session_reference_names_its_session_and_other_references_none() -> None:
    assert session_of(source_ref("sess_42~2", 12)) == "sess_42~2"
    assert session_of("session:acme-north-1") == "acme-north-1"  # a summary's key
    for other in (None, "", "tool:call_7", "session:", "doc:session:s1"):
        assert session_of(other) is None


def test_whitespace_differences_still_match() -> None:
    # The turn has a newline between the sentences; the quote has double spaces.
    result = check("keep answers  concise.   I read them\ton my phone", "user_statement")
    assert (result.found, result.turn, result.source_kind) == (True, 1, "user_statement")


def test_paraphrase_is_not_evidence() -> None:
    result = check("please make the answers short", "user_statement")
    assert result == EvidenceCheck(False, None, None, "agent_inference", "evidence not found in session")


def test_quote_spanning_two_turns_does_not_match() -> None:
    # The end of turn 3 and the start of turn 4, joined: each half exists, the whole doesn't.
    result = check("passed in 3.1 seconds Also, the deploy target", "tool_result")
    assert result.found is False
    assert result.note == "evidence not found in session"


def test_too_short_quote_is_rejected_naming_the_minimum() -> None:
    by_chars = check("concise.", "user_statement")  # 8 characters, 1 word
    assert (by_chars.found, by_chars.source_kind) == (False, "agent_inference")
    assert by_chars.note is not None and "15 characters" in by_chars.note
    words = validate_evidence(
        TRANSCRIPT, "prefers short", "agent_inference",
        min_characters=5, min_words=3, source_rank=SourceRanks(),
    )
    assert (words.found, words.note) == (False, "evidence too short: a quote needs at least 3 words")


def test_turn_hint_restricts_the_search_to_that_turn() -> None:
    quote = "the deploy target is the staging cluster"
    assert check(quote, "user_statement", turn_hint=4).turn == 4
    missed = check(quote, "user_statement", turn_hint=1)
    assert (missed.found, missed.note) == (False, "evidence not found in session")
    assert check(quote, "user_statement", turn_hint=99).found is False


def test_first_matching_turn_wins_without_a_hint() -> None:
    turns = [
        Turn("s1", 1, "assistant", "we use the staging cluster today", T0),
        Turn("s1", 2, "user", "we use the staging cluster today", T0),
    ]
    result = validate_evidence(
        turns, "use the staging cluster", "user_statement",
        min_characters=15, min_words=3, source_rank=SourceRanks(),
    )
    assert (result.turn, result.source_kind) == (1, "agent_inference")
    hinted = validate_evidence(
        turns, "use the staging cluster", "user_statement", turn_hint=2,
        min_characters=15, min_words=3, source_rank=SourceRanks(),
    )
    assert (hinted.turn, hinted.source_kind, hinted.note) == (2, "user_statement", None)


def test_ranks_come_from_config_and_may_be_a_mapping() -> None:
    # With tool_result ranked as high as user_statement, a tool quote keeps the claim
    # (a downgrade happens only when the claimed rank is above the supported one).
    equal = SourceRanks(user_statement=4, tool_result=4)
    kept = check("42 tests passed in 3.1 seconds", "user_statement", ranks=equal)
    assert (kept.source_kind, kept.note) == ("user_statement", None)
    mapping = {"user_statement": 4, "system": 3, "tool_result": 2, "session_summary": 2,
               "agent_inference": 1}
    downgraded = check("42 tests passed in 3.1 seconds", "user_statement", ranks=mapping)
    assert downgraded.source_kind == "tool_result"


@pytest.mark.parametrize("claimed", ["system", "session_summary", "made_up"])
def test_kinds_no_transcript_can_support_are_refused(claimed: str) -> None:
    with pytest.raises(ValueError, match="claimed source kind"):
        check("the deploy target is the staging cluster", claimed)
