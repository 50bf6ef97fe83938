"""The structured current-fact key: normalised attribute and derived subject (LLD 3, 8.1)."""

from __future__ import annotations

import re
import unicodedata

__all__ = ["EPISODIC_ATTRIBUTE", "normalize_attribute", "subject_of"]

EPISODIC_ATTRIBUTE = "-"  # '<entity_id>/-' is never a supersession key (LLD 3)
_NON_SLUG = re.compile(r"[^a-z0-9]+")


def normalize_attribute(hint: str | None) -> str:
    """Lowercase snake_case slug of an attribute hint; '' when nothing survives.

    Any entity prefix is ignored (``ent_x/explanation_style`` -> ``explanation_style``):
    the resolved about entity, never the writer, supplies the entity id (LLD 8.1 step 5).
    """
    if not hint:
        return ""
    tail = hint.rsplit("/", 1)[-1]
    ascii_text = unicodedata.normalize("NFKD", tail).encode("ascii", "ignore").decode()
    return _NON_SLUG.sub("_", ascii_text.lower()).strip("_")


def subject_of(entity_id: str | None, attribute: str | None) -> str:
    """The derived display and FTS value ``<entity_id>/<attribute>``."""
    return f"{entity_id or '-'}/{attribute or EPISODIC_ATTRIBUTE}"
