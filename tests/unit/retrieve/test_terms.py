"""Query terms of the lexical generator (tokenising, stop words, identifier tokens)."""

from __future__ import annotations

import sqlite3

import pytest

from retold.retrieve.stopwords import STOPWORDS
from retold.retrieve.terms import alias_ngrams, fts_tokens, is_identifier, query_terms


def values(query: str) -> list[str]:
    return [term.value for term in query_terms(query)]


@pytest.mark.parametrize(
    "raw",
    ["ERR42", "bge-m3", "deploy.yml", "camelCase", "path/to", "snake_case", "deploy.yml.", "(ERR42),"],
)
def test_identifier_tokens(raw: str) -> None:
    assert is_identifier(raw)


@pytest.mark.parametrize("raw", ["follow-up", "e-mail", "Aditya", "API", "deployment", "and/or", "e.g."])
def test_plain_words_are_not_identifiers(raw: str) -> None:
    assert not is_identifier(raw)


def test_identifiers_split_on_whitespace_first_and_become_phrases() -> None:
    terms = {term.value: term for term in query_terms("bge-m3 settings in deploy.yml")}
    assert terms["bge m3"].tokens == ("bge", "m3") and terms["bge m3"].is_identifier
    assert terms["deploy yml"].tokens == ("deploy", "yml") and terms["deploy yml"].is_identifier
    assert not terms["settings"].is_identifier


def test_hyphenated_plain_words_are_multi_token_terms_but_not_identifiers() -> None:
    (term,) = query_terms("follow-up")
    assert term.tokens == ("follow", "up") and not term.is_identifier


@pytest.mark.parametrize(
    "query",
    ["I'm here", "What's new", "don't do it", "Notes: Don't deploy", "I DON'T KNOW", "we'll see what's what",
     "They\u2019re sure I\u2019d go"],
)
def test_contractions_never_survive(query: str) -> None:
    found = values(query)
    leftovers = ("i", "im", "what", "whats", "do", "dont", "don", "we", "they", "re", "ll", "d", "t", "s")
    assert not set(leftovers) & set(found)


def test_contraction_stems_are_stopwords() -> None:
    assert {"do", "i", "what", "it", "can", "will", "they", "we", "is"} <= STOPWORDS
    assert 150 <= len(STOPWORDS) <= 210
    assert all(word == word.lower() and "'" not in word for word in STOPWORDS)


def test_possessives_reduce_to_their_stem() -> None:
    assert values("Aditya's laptop") == ["aditya", "laptop"]
    assert values("the users' settings") == ["users", "settings"]
    assert values("Aditya\u2019s laptop") == ["aditya", "laptop"]  # typographic apostrophe
    assert fts_tokens("aditya's don't we've can't won't") == ["aditya", "do", "we", "can", "will"]


def test_diacritics_are_folded_like_the_index() -> None:
    assert values("Café naïve résumé") == ["cafe", "naive", "resume"]
    # unicode61 removes diacritics and lowercases; compare with the real tokenizer.
    text = "Crème Brûlée at Zoë's São Paulo ÅNGSTRÖM x_y-z"
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='unicode61 remove_diacritics 2')")
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
    conn.execute("INSERT INTO t(x) VALUES (?)", (text,))
    indexed = [term for (term,) in conn.execute("SELECT term FROM v ORDER BY offset")]
    assert fts_tokens(text, reduce_contractions=False) == indexed


def test_one_character_terms_and_stopwords_are_dropped() -> None:
    assert values("a b c x deployment of the server") == ["deployment", "server"]
    assert values("e.g. and/or") == []


def test_numbers_are_kept_however_short() -> None:
    terms = {term.value: term for term in query_terms("Acme North 2 and room 42")}
    assert list(terms) == ["acme", "north", "2", "room", "42"]
    # One digit alone is too common to stand for an identifier; longer numbers still do.
    assert not terms["2"].is_identifier and terms["42"].is_identifier
    assert "acme north 2" in alias_ngrams("Who is Acme North 2's contact?", 4)


def test_plain_words_compare_by_stem_identifiers_and_names_exactly() -> None:
    terms = {term.value: term for term in query_terms("deploying Atlas with deploy.yml")}
    assert terms["deploying"].stems == ("deploi",) and not terms["deploying"].is_exact
    assert terms["atlas"].is_exact and terms["deploy yml"].is_exact


def test_proper_nouns_and_identifiers_survive_stopword_removal() -> None:
    found = {term.value: term for term in query_terms("Tell the US team about IT and Will")}
    assert found["us"].is_proper and found["it"].is_proper and found["will"].is_proper
    assert "the" not in found and "about" not in found
    # The first word of a sentence is not a proper noun because of its capital.
    assert values("What is it? The end") == ["end"]
    # A shouted query carries no capital signal.
    assert values("WHAT IS THE API") == ["api"]


def test_terms_are_deduplicated_in_order_with_merged_flags() -> None:
    terms = query_terms("deploy Atlas then deploy atlas")
    assert [term.value for term in terms] == ["deploy", "atlas"]
    assert terms[1].is_proper


def test_alias_ngrams_strip_possessives_and_punctuation() -> None:
    grams = alias_ngrams("Ask Aditya's (Project Atlas) - now.", 3)
    assert "aditya" in grams and "project atlas" in grams and "aditya project atlas" in grams
    assert "aditya's" not in grams and "-" not in grams and "now" in grams
    assert not any("atlas -" in gram or gram.endswith(")") for gram in grams)
    assert alias_ngrams("José  Núñez", 2) == ["jose", "jose nunez", "nunez"]


def test_alias_ngrams_are_bounded_for_a_long_query() -> None:
    words = [f"word{i}" for i in range(300)]
    grams = alias_ngrams(" ".join(words), 4)
    assert len(grams) <= 300 * 4
    assert max(len(gram.split()) for gram in grams) == 4
    assert len(alias_ngrams(" ".join(["same"] * 300), 4)) == 4  # de-duplicated
