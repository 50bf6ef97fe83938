"""A changed number or name is a different fact however close two vectors are; filler
around the same statement, a sentence start and the word "I" are not names."""

from __future__ import annotations

import pytest

from retold.policy.hygiene import normalised_text, same_values


@pytest.mark.parametrize(("a", "b", "same"), [
    ("Harbor Labs renews on 25 June 2027.", "Harbor Labs renews on 18 March 2027.", False),
    ("Redwood Capital 3 pays by card.", "Redwood Capital 2 pays by card.", False),
    ("Sanjay's cousin is Maya.", "Sanjay's cousin is Noor.", False),
    ("Sanjay is allergic to kiwi fruit.", "Remember that Sanjay is allergic to kiwi fruit.", True),
    ("Sanjay is allergic to kiwi fruit.", "Sanjay is allergic to kiwi fruit (noted again)", True),
    ("Sanjay said: I can't eat kiwi. It makes me ill.", "Sanjay is allergic to kiwi.", True),
])
def test_values_decide_what_a_close_vector_cannot(a: str, b: str, same: bool) -> None:
    assert same_values(a, b) is same
    assert same_values(b, a) is same


def test_the_same_words_ignore_case_spacing_and_punctuation() -> None:
    assert normalised_text("Aditya prefers CONCISE,  technical answers!") == \
        normalised_text("aditya prefers concise technical answers")
    assert normalised_text("Aditya prefers concise answers") != normalised_text("Aditya prefers long answers")
