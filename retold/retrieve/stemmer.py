"""The Porter stemmer exactly as SQLite's FTS5 ``porter`` tokenizer applies it.

``records_fts`` indexes stems, and FTS5 stems the words of a quoted query phrase the same
way, so SQLite decides what a record matches. Term coverage, which the gate reads, is
computed in Python; it must stem each word to the very string SQLite does, or a term that
retrieved a record would count as unmatched in it. This is therefore SQLite's variant of
the original Porter algorithm, quirks included, rather than a general-purpose stemmer:

* a token shorter than 3 or longer than 64 bytes (UTF-8) is left as it is;
* the rules see UTF-8 bytes: only ``a e i o u`` (and ``y`` after a consonant) are vowels,
  every byte of a non-ASCII letter is a consonant;
* step 2 maps ``-bli`` to ``-ble`` and ``-logi`` to ``-log``, as the reference C
  implementation does, instead of the published ``-abli`` rule;
* the "contains a vowel" test of steps 1b and 1c counts ``y`` as a vowel anywhere but in
  first position, whatever precedes it;
* a rule fires only when the word is longer than its suffix, and a suffix whose condition
  fails stops its step (no shorter suffix of the same step is tried).

A test compares this function with SQLite itself on a few thousand words.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

__all__ = ["porter_stem"]

_MIN_BYTES, _MAX_BYTES = 3, 64
_VOWELS = frozenset(b"aeiou")
_Y = ord("y")
_UNDOUBLED = frozenset(b"aeioulsz")  # a doubled final letter that step 1b keeps


def _consonants(word: bytes) -> list[bool]:
    """Per byte: a consonant? ``y`` is a vowel only after a consonant."""
    flags: list[bool] = []
    previous = False  # the first letter: a leading y is a consonant
    for byte in word:
        previous = not (byte in _VOWELS or (byte == _Y and previous))
        flags.append(previous)
    return flags


def _measure(stem: bytes) -> int:
    """Porter's m: how many vowel-consonant sequences the stem holds."""
    flags = _consonants(stem)
    return sum(1 for i in range(1, len(flags)) if flags[i] and not flags[i - 1])


def _has_vowel(stem: bytes) -> bool:
    """SQLite's vowel test: ``y`` counts anywhere except at the start."""
    return any(byte in _VOWELS or (byte == _Y and i > 0) for i, byte in enumerate(stem))


def _cvc(stem: bytes) -> bool:
    """Ends consonant-vowel-consonant, the last not w, x or y (the *o condition)."""
    if len(stem) < 3 or stem[-1] in b"wxy":
        return False
    return _consonants(stem)[-3:] == [True, False, True]


def _m_over_0(stem: bytes) -> bool:
    return _measure(stem) > 0


def _m_over_1(stem: bytes) -> bool:
    return _measure(stem) > 1


def _ion_stem(stem: bytes) -> bool:
    return stem[-1:] in (b"s", b"t") and _measure(stem) > 1


_Rule = tuple[bytes, bytes, Callable[[bytes], bool]]


def _rules(condition: Callable[[bytes], bool], pairs: str) -> tuple[_Rule, ...]:
    """``"suffix>replacement ..."`` pairs under one condition, in the order tried."""
    out = []
    for pair in pairs.split():
        suffix, _, replacement = pair.partition(">")
        out.append((suffix.encode(), replacement.encode(), condition))
    return tuple(out)


# Within a step, suffixes ending in the same two letters are tried in this order and the
# first one the word ends with decides; suffixes of different endings never compete.
_STEP2 = _rules(_m_over_0, "ational>ate tional>tion enci>ence anci>ance izer>ize logi>log"
                           " bli>ble alli>al entli>ent eli>e ousli>ous ization>ize ation>ate"
                           " ator>ate alism>al iveness>ive fulness>ful ousness>ous aliti>al"
                           " iviti>ive biliti>ble")
_STEP3 = _rules(_m_over_0, "ical>ic ness> icate>ic iciti>ic ful> ative> alize>al")
_STEP4 = (
    *_rules(_m_over_1, "al> ance> ence> er> ic> able> ible> ant> ement> ment> ent>"),
    (b"ion", b"", _ion_stem),
    *_rules(_m_over_1, "ou> ism> ate> iti> ous> ive> ize>"),
)


def _apply(word: bytes, rules: tuple[_Rule, ...]) -> bytes:
    for suffix, replacement, condition in rules:
        if len(word) > len(suffix) and word.endswith(suffix):
            stem = word[: -len(suffix)]
            return stem + replacement if condition(stem) else word
    return word


def _step1a(word: bytes) -> bytes:
    if not word.endswith(b"s"):
        return word
    if word[-2:-1] == b"e":
        # -sses and -ies lose "es"; any other -es loses only its "s".
        if (len(word) > 4 and word[-4:-2] == b"ss") or (len(word) > 3 and word[-3:-2] == b"i"):
            return word[:-2]
        return word[:-1]
    return word if word[-2:-1] == b"s" else word[:-1]


def _step1b(word: bytes) -> bytes:
    if len(word) > 3 and word.endswith(b"eed"):
        return word[:-1] if _m_over_0(word[:-3]) else word
    if len(word) > 2 and word.endswith(b"ed") and _has_vowel(word[:-2]):
        word = word[:-2]
    elif len(word) > 3 and word.endswith(b"ing") and _has_vowel(word[:-3]):
        word = word[:-3]
    else:
        return word
    # After removing -ed or -ing: restore an "e", or undouble a final consonant.
    if len(word) > 2 and word[-2:] in (b"at", b"bl", b"iz"):
        return word + b"e"
    if len(word) > 1 and word[-1] == word[-2] and word[-1] not in _UNDOUBLED:
        return word[:-1]
    if _measure(word) == 1 and _cvc(word):
        return word + b"e"
    return word


def _step1c(word: bytes) -> bytes:
    if word.endswith(b"y") and _has_vowel(word[:-1]):
        return word[:-1] + b"i"
    return word


def _step5(word: bytes) -> bytes:
    if word.endswith(b"e"):
        stem = word[:-1]
        m = _measure(stem)
        if m > 1 or (m == 1 and not _cvc(stem)):
            word = stem
    if len(word) > 1 and word.endswith(b"ll") and _m_over_1(word[:-1]):
        word = word[:-1]
    return word


@functools.lru_cache(maxsize=65536)
def porter_stem(token: str) -> str:
    """The stem SQLite's porter tokenizer indexes for one lowercase FTS token.

    Cached: query terms and record fields repeat search after search, so each distinct
    token is stemmed once per process.
    """
    word = token.encode("utf-8")
    if not _MIN_BYTES <= len(word) <= _MAX_BYTES:
        return token
    for step in (_step1a, _step1b, _step1c):
        word = step(word)
    for rules in (_STEP2, _STEP3, _STEP4):
        word = _apply(word, rules)
    # A byte-level rule can in theory split a multi-byte letter; such a token cannot be
    # typed as a query word anyway, so the broken bytes are simply replaced.
    return _step5(word).decode("utf-8", errors="replace")
