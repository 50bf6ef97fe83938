"""Query terms for the lexical and entity generators.

A query is split on whitespace first, so identifier detection sees ``bge-m3`` and
``deploy.yml`` whole; each raw token then becomes one term whose tokens follow the FTS5
``unicode61 remove_diacritics 2`` rules of ``records_fts``, so a term and the index
agree on what a word is. The index stores Porter stems of those words; a term keeps its
words unstemmed, and :attr:`QueryTerm.stems` gives what a plain word is compared by.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from retold.names import normalize_alias
from retold.retrieve.stemmer import porter_stem
from retold.retrieve.stopwords import STOPWORDS

__all__ = ["QueryTerm", "alias_ngrams", "fts_tokens", "is_identifier", "name_groups", "query_terms"]

# Typographic apostrophes fold to ASCII before contractions are reduced.
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'"})
# Quotes, brackets and sentence punctuation around a raw token are not part of it.
_EDGE = "\"'`()[]{}<>,;:!?*\u201c\u201d\u00ab\u00bb"
# Irregular negative contractions; every other "n't" is simply removed ("don't" -> "do").
_IRREGULAR = {"can't": "can", "won't": "will", "shan't": "shall", "ain't": "is"}
# "'s" is a possessive or "is", the rest are auxiliaries; all reduce to the stem.
_CONTRACTION = re.compile(r"^(?P<stem>.+?)(?:n't|'s|'m|'re|'ve|'d|'ll|')$", re.IGNORECASE)
_SENTENCE_END = (".", "!", "?")
_ASCII_TOKEN = re.compile(r"[a-z0-9]+")
_CLOSERS = "\"')]}>`*\u201d\u00bb"
# Capitalised, but dates rather than names: "in March" asks about a time, it names nobody.
_CALENDAR = frozenset((
    "january", "february", "march", "april", "may", "june", "july", "august", "september",
    "october", "november", "december",
    "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday",
))


def _strip_edges(raw: str) -> str:
    """Drop surrounding quotes, brackets and punctuation, and any trailing dots."""
    return raw.strip(_EDGE).rstrip(".").strip(_EDGE)


def _reduce(word: str) -> tuple[str, bool]:
    """``word`` with a possessive or contraction ending removed, and whether one was."""
    lowered = word.lower()
    if lowered in _IRREGULAR:
        stem = _IRREGULAR[lowered]
        # Keep the writer's capital so sentence-initial detection still works.
        return (stem.capitalize() if word[:1].isupper() else stem), True
    found = _CONTRACTION.match(word)
    if found is None or "'" in found.group("stem"):
        return word, False
    return found.group("stem"), True


def _raw_words(text: str) -> list[tuple[str, bool, bool]]:
    """``(word, reduced, ends_sentence)`` per whitespace token, edges stripped."""
    out = []
    for raw in text.translate(_APOSTROPHES).split():
        word, reduced = _reduce(_strip_edges(raw))
        out.append((word, reduced, raw.rstrip(_CLOSERS).endswith(_SENTENCE_END)))
    return out


def fts_tokens(text: str, *, reduce_contractions: bool = True) -> list[str]:
    """Tokens of ``text`` as ``unicode61 remove_diacritics 2`` would index them.

    Letters and digits (Unicode categories L*, N* and private use) are token characters,
    everything else separates; diacritics are removed and tokens lowercased. Diacritics
    go through NFD rather than NFKD because unicode61 keeps compatibility forms
    (ligatures, superscripts, full-width letters) as they are, and a query term must
    spell a word as the index does. With ``reduce_contractions`` (the default) each
    whitespace word first loses a possessive or contraction ending, so "aditya's" gives
    "aditya" and "don't" gives "do" rather than the index's extra "s" and "t" tokens.
    """
    words = text.translate(_APOSTROPHES).split()
    if reduce_contractions:
        words = [_reduce(_strip_edges(word))[0] for word in words]
    joined = " ".join(words)
    if joined.isascii():  # the common case, in C: ASCII letters and digits are the tokens
        return _ASCII_TOKEN.findall(joined.lower())
    decomposed = unicodedata.normalize("NFD", joined)
    tokens: list[str] = []
    current: list[str] = []
    for ch in decomposed:
        if unicodedata.combining(ch):
            continue  # remove_diacritics: the mark vanishes, the base letter stays
        category = unicodedata.category(ch)
        if category[0] in "LN" or category == "Co":
            current.append(ch)
        elif current:
            tokens.append("".join(current).lower())
            current = []
    if current:
        tokens.append("".join(current).lower())
    return tokens


def _mixed_case(word: str) -> bool:
    """A lowercase letter followed later by an uppercase one: camelCase, iPhone."""
    seen_lower = False
    for ch in word:
        if ch.islower():
            seen_lower = True
        elif ch.isupper() and seen_lower:
            return True
    return False


def is_identifier(raw: str) -> bool:
    """Whether a raw whitespace token is an identifier token; the gate lets one matched
    identifier meet the matched-term minimum on its own.

    It contains a digit, an underscore, a dot or a slash, or mixes case inside the token
    (ERR42, snake_case, bge-m3, deploy.yml, path/to, camelCase). A hyphen alone does not
    qualify (follow-up, e-mail), a capitalised word or an acronym is not mixed case
    (Aditya, API), and a dot or slash between trivial parts - stopwords or single
    letters - does not either, so "and/or", "e.g." and "U.S." stay plain words.
    """
    word = _strip_edges(raw.translate(_APOSTROPHES))
    if any(ch.isdigit() or ch == "_" for ch in word) or _mixed_case(word):
        return True
    if "." in word or "/" in word:
        return any(len(part) > 1 and part not in STOPWORDS for part in fts_tokens(word))
    return False


@dataclass(frozen=True)
class QueryTerm:
    """One search term: the FTS tokens of one raw whitespace token of a query."""

    value: str  # the tokens joined by a single space; a phrase when there are several
    tokens: tuple[str, ...]
    is_identifier: bool
    is_proper: bool
    position: int = 0  # which whitespace word of the query it came from (the first, if repeated)

    @property
    def is_exact(self) -> bool:
        """Identifiers and names count only where a record spells them as the query
        does: "Deploys" the project is not "deploy" the verb."""
        return self.is_identifier or self.is_proper

    @functools.cached_property
    def stems(self) -> tuple[str, ...]:
        """The tokens as the index stores them: "deploying" -> "deploy"."""
        return tuple(porter_stem(token) for token in self.tokens)


def query_terms(query: str) -> list[QueryTerm]:
    """The lexical terms of one query, in order and de-duplicated.

    Terms shorter than two characters are dropped, except a number ("Acme North 2" keeps
    "2", which tells it from "Acme North"; a one-digit number alone is too common to count
    as an identifier). Terms made only of stopwords are dropped too, unless the term is
    an identifier or a proper noun: a capitalised word
    that does not start a sentence, or an all-caps word of two or more letters ("US",
    "IT"); capitals count for nothing when the whole query is in capitals, and month and
    weekday names are dates, not names. A
    contraction never counts as a proper noun, so "I'm", "What's" and "Don't" never
    survive.
    """
    words = _raw_words(query)
    cased = [w for w, _, _ in words if any(ch.isalpha() for ch in w)]
    shouting = bool(cased) and all(w.upper() == w for w in cased)
    found: dict[str, QueryTerm] = {}
    sentence_start = True
    for position, (word, reduced, ends_sentence) in enumerate(words):
        tokens = tuple(fts_tokens(word, reduce_contractions=False))
        starts, sentence_start = sentence_start, ends_sentence
        value = " ".join(tokens)
        number = value.isdecimal()
        if len(value) < 2 and not number:
            continue
        # A lone digit has a digit in it but is far too common to stand alone.
        identifier = is_identifier(word) and len(value) >= 2
        letters = [ch for ch in word if ch.isalpha()]
        capitalised = word[:1].isupper() and not starts
        all_caps = len(letters) >= 2 and all(ch.isupper() for ch in letters)
        # Only stopwords and single letters: "the", "and/or", "e.g.".
        plain = not number and all(token in STOPWORDS or len(token) < 2 for token in tokens)
        # Capitals carry no signal in a shouted query, and a reduced stopword
        # ("Don't" -> "Do") is a contraction, not a name.
        proper = ((capitalised or all_caps) and not shouting and not (reduced and plain)
                  and value not in _CALENDAR)
        if plain and not (identifier or proper):
            continue
        term = QueryTerm(value, tokens, identifier, proper, position)
        earlier = found.get(value)
        if earlier is not None:
            term = replace(
                earlier,
                is_identifier=earlier.is_identifier or identifier,
                is_proper=earlier.is_proper or proper,
            )
        found[value] = term
    return list(found.values())


# Lower-case words that sit inside one name rather than between two: "Bank of America",
# "Rio de Janeiro", "Ludwig van Beethoven". "Oskar and Mateo" joins too, which only keeps
# the stricter one-name margin for them.
_NAME_JOINERS = frozenset(("of", "de", "da", "do", "del", "der", "di", "du", "la", "le", "van",
                           "von", "the", "and", "&"))


def name_groups(query: str, terms: Sequence[QueryTerm], is_name: Callable[[QueryTerm], bool],
                ) -> list[tuple[str, ...]]:
    """The values of ``query``'s name terms (``terms`` as :func:`query_terms` gave them),
    grouped as they stand: names on adjacent words, or with one joining word between
    them, are one name; names with other words between them are separate ones."""
    words = [word.lower() for word, _, _ in _raw_words(query)]
    groups: list[tuple[str, ...]] = []
    group: list[str] = []
    last = -2
    for term in terms:
        if not is_name(term):
            continue
        gap = words[last + 1 : term.position]
        joined = not gap or (len(gap) == 1 and gap[0] in _NAME_JOINERS)
        if group and not joined:
            groups.append(tuple(group))
            group = []
        group.append(term.value)
        last = term.position
    if group:
        groups.append(tuple(group))
    return groups


def alias_ngrams(text: str, max_tokens: int) -> list[str]:
    """Every run of 1..``max_tokens`` words of ``text`` in alias form.

    Apostrophes are folded and possessive or contraction endings removed ("Aditya's"
    looks up "aditya"), surrounding punctuation is stripped from each word, and each
    n-gram goes through ``normalize_alias`` as stored aliases did. A word that is only
    punctuation breaks the run. The result is de-duplicated and holds at most
    ``len(words) * max_tokens`` candidates, so a long pasted query stays bounded.
    """
    # A word without letters or digits ("-", "...") is punctuation and breaks the run.
    words = [word if any(ch.isalnum() for ch in word) else "" for word, _, _ in _raw_words(text)]
    out: dict[str, None] = {}
    for start in range(len(words)):
        for end in range(start + 1, min(start + max_tokens, len(words)) + 1):
            if not words[end - 1]:
                break
            alias = normalize_alias(" ".join(words[start:end]))
            if alias:
                out[alias] = None
    return list(out)
