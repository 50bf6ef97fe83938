"""The structured current-fact key: normalised attribute and derived subject."""

from __future__ import annotations

import re
import unicodedata

__all__ = ["EPISODIC_ATTRIBUTE", "normalize_attribute", "subject_of"]

# An episode's subject is '<entity_id>/-', never a supersession key: events do not replace
# each other the way current facts do.
EPISODIC_ATTRIBUTE = "-"
_NON_SLUG = re.compile(r"[^a-z0-9]+")


def normalize_attribute(hint: str | None) -> str:
    """Lowercase snake_case slug of an attribute hint; '' when nothing survives.

    Any entity prefix is ignored (``ent_x/explanation_style`` -> ``explanation_style``):
    the resolved about entity, never the writer, supplies the entity id.
    """
    if not hint:
        return ""
    tail = hint.rsplit("/", 1)[-1]
    ascii_text = unicodedata.normalize("NFKD", tail).encode("ascii", "ignore").decode()
    return _NON_SLUG.sub("_", ascii_text.lower()).strip("_")


def subject_of(entity_id: str | None, attribute: str | None) -> str:
    """The derived display and FTS value ``<entity_id>/<attribute>``."""
    return f"{entity_id or '-'}/{attribute or EPISODIC_ATTRIBUTE}"
