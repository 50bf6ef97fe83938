"""The Python Porter stemmer agrees with SQLite's porter tokenizer, word for word."""

from __future__ import annotations

import random
import sqlite3
from contextlib import closing

import pytest

from retold.retrieve.stemmer import porter_stem
from retold.retrieve.terms import fts_tokens
from retold.store.fts import FTS_TOKENIZER

_BASES = (
    "deploy", "prefer", "connect", "relate", "hope", "hop", "control", "general", "sense",
    "nation", "rational", "valence", "hesitate", "digit", "formal", "sensitiv", "mean", "fly",
    "cry", "happy", "play", "agree", "feed", "bled", "sing", "fall", "file", "fizz", "tann",
    "troubl", "size", "condit", "operat", "electric", "adjust", "depend", "adopt", "activ",
    "radical", "analog", "argu", "conflat", "probab", "meet", "rout", "schedul", "contact",
    "bill", "invoice", "remind",
)
_SUFFIXES = (
    "", "s", "es", "ed", "ing", "ings", "er", "ers", "ation", "ations", "ational", "ize",
    "ization", "izer", "ness", "ful", "fulness", "ly", "ally", "ility", "ive", "iveness", "ous",
    "ously", "ousness", "ent", "ently", "ment", "ements", "ance", "ence", "able", "ible", "ism",
    "iti", "ical", "icate", "ative", "alize", "logi", "bli", "y", "ies", "sses", "eed", "ll", "e",
)


def _words() -> list[str]:
    """Every base with every suffix, random letter strings biased to vowels and y, and
    edge cases: too short or too long to stem, digits, non-ASCII letters."""
    words = [base + suffix for base in _BASES for suffix in _SUFFIXES]
    rng = random.Random(12)
    letters = "aaeeiioouuyybcdfglmnprsstwxz"
    words += ["".join(rng.choice(letters) for _ in range(rng.randint(1, 10))) + rng.choice(_SUFFIXES)
              for _ in range(2_000)]
    words += ["ab", "ies", "ses", "aed", "yyed", "syed", "x" * 64 + "ing", "x" * 61 + "ing",
              "2024", "a1b2ed", "ñandúes", "日本語ing", "zoës", "crèmes"]
    return words


def test_stems_agree_with_sqlite_on_thousands_of_words() -> None:
    words = _words()
    with closing(sqlite3.connect(":memory:")) as conn:
        conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(x, tokenize = '{FTS_TOKENIZER}')")
        conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
        conn.executemany("INSERT INTO t(rowid, x) VALUES (?, ?)", enumerate(words))
        indexed = dict(conn.execute("SELECT doc, term FROM v"))
    assert len(indexed) == len(words)  # each word is one token
    ours = {i: porter_stem(fts_tokens(word, reduce_contractions=False)[0]) for i, word in enumerate(words)}
    disagreements = {words[i]: (indexed[i], ours[i]) for i in indexed if indexed[i] != ours[i]}
    assert disagreements == {}
    assert len(set(indexed.values())) < len(words) * 0.9  # the words were really stemmed


@pytest.mark.parametrize(
    "words",
    [("deploying", "deploys", "deployed", "deploy"), ("preferences", "preference", "preferred"),
     ("meetings", "meeting", "meet"), ("hoping", "hope"), ("hopping", "hop")],
)
def test_inflections_share_a_stem(words: tuple[str, ...]) -> None:
    assert len({porter_stem(word) for word in words}) == 1


def test_short_tokens_and_numbers_stay_as_they_are() -> None:
    assert [porter_stem(word) for word in ("2", "42", "ab", "is")] == ["2", "42", "ab", "is"]
    assert porter_stem("hoping") != porter_stem("hopping")
