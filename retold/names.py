"""How an entity's name is written: the lookup form its aliases are stored and searched in,
and the form it is shown in.

The write path stores aliases in the lookup form and the read path looks query words up
in it, so both import this one module and can never disagree on a spelling.
"""

from __future__ import annotations

import functools
import unicodedata

__all__ = ["normalize_alias", "normalize_canonical"]


@functools.lru_cache(maxsize=8192)
def normalize_alias(text: str) -> str:
    """The lookup form of a name: diacritics stripped, casefolded, spaces collapsed.

    ``"  José  Núñez "`` becomes ``"jose nunez"``. NFKD also folds compatibility forms
    (full-width letters, ligatures), so visually equal spellings meet. Remembered per
    text: every search normalises each query n-gram and term, and agents repeat words.
    """
    decomposed = unicodedata.normalize("NFKD", text)
    stripped = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return " ".join(stripped.casefold().split())


def normalize_canonical(text: str) -> str:
    """The display form of a name: whitespace collapsed, accents kept."""
    return " ".join(text.split())
