"""What ``retold hygiene`` finds in a scope: near-duplicate clusters, provisional records
nobody confirmed or used, and records nobody has used in a long time.

Two live records are duplicates when they are about the same subject, of the same type,
and either say the same words (compared after case, spacing and punctuation are set
aside) or their vectors' cosine reaches ``lifecycle.duplicate_cosine`` and they carry the
same values. A sentence encoder places "renews on 14 July" next to "renews on 8 August",
and "works with Maya" next to "works with Noor": a changed number or name barely moves the
vector but is a different fact. So records whose numbers differ, or where one names
someone (a capitalised word past the first) the other does not mention, are never
duplicates by cosine. Records linked as a conflict are never duplicates either: they
disagree, and which one holds is a reviewer's call.
Clusters are the connected groups of that relation. Each keeps its strongest record: a
pinned one first, then the highest capacity score (:mod:`retold.policy.capacity`), then
the newest write.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np

from retold.policy.capacity import score
from retold.store.capacity import CapacityRow

__all__ = ["Cluster", "duplicate_clusters", "normalised_text", "same_values", "stale_provisional", "unused"]

_NOT_WORD = re.compile(r"[\W_]+")
_NUMBER = re.compile(r"\d+")
_WORD = re.compile(r"[^\W\d_]+")


def _values(text: str) -> tuple[list[str], set[str], set[str]]:
    """Its numbers, its names (capitalised words of two letters or more that do not start
    a sentence) and all its words, folded."""
    names, words = set(), set()
    for match in _WORD.finditer(text):
        word = match.group()
        words.add(word.casefold())
        before = text[:match.start()].rstrip(" \t\n\"'(\u201c\u2018")
        if word[0].isupper() and len(word) > 1 and before and before[-1] not in ".!?:;":
            names.add(word.casefold())
    return sorted(_NUMBER.findall(text)), names, words


def same_values(a: str, b: str) -> bool:
    """The same numbers, and no name in one that the other does not mention."""
    (numbers_a, names_a, words_a), (numbers_b, names_b, words_b) = _values(a), _values(b)
    return numbers_a == numbers_b and names_a <= words_b and names_b <= words_a


def normalised_text(text: str) -> str:
    """Lowercase words separated by single spaces: what 'the same words' compares."""
    return " ".join(_NOT_WORD.sub(" ", text.casefold()).split())


@dataclass(frozen=True)
class Cluster:
    keep: str
    merge: list[str]  # the others, strongest first
    reason: str  # "same words" when every member says them, else "cosine >= x"


def _root(parent: dict[str, str], node: str) -> str:
    while parent[node] != node:
        parent[node] = parent[parent[node]]
        node = parent[node]
    return node


def duplicate_clusters(rows: list[CapacityRow], types: Mapping[str, tuple[str, str]],
                       vectors: Mapping[str, np.ndarray], conflicts: set[tuple[str, str]],
                       threshold: float, now: datetime, ranks: Mapping[str, int]) -> list[Cluster]:
    """The duplicate clusters among ``rows`` (``types`` maps an id to its type and content)."""
    groups: dict[tuple[str, str], list[CapacityRow]] = defaultdict(list)
    for row in rows:
        groups[(row.subject, types[row.record_id][0])].append(row)
    parent = {row.record_id: row.record_id for row in rows}

    def join(a: str, b: str) -> None:
        if (a, b) not in conflicts:
            parent[_root(parent, b)] = _root(parent, a)

    for members in groups.values():
        if len(members) < 2:
            continue
        by_text: dict[str, str] = {}
        for row in members:
            key = normalised_text(types[row.record_id][1])
            if key in by_text:
                join(by_text[key], row.record_id)
            else:
                by_text[key] = row.record_id
        embedded = [row.record_id for row in members if row.record_id in vectors]
        if len(embedded) < 2:
            continue
        matrix = np.stack([vectors[i] for i in embedded])
        close = np.argwhere(np.triu(matrix @ matrix.T, k=1) >= threshold)
        for i, j in close:
            if same_values(types[embedded[i]][1], types[embedded[j]][1]):
                join(embedded[i], embedded[j])
    members_of: dict[str, list[CapacityRow]] = defaultdict(list)
    for row in rows:
        members_of[_root(parent, row.record_id)].append(row)
    out = []
    for members in members_of.values():
        if len(members) < 2:
            continue
        ranked = sorted(members, reverse=True,
                        key=lambda r: (r.pinned, score(r, now, ranks).total, r.seq))
        same = len({normalised_text(types[r.record_id][1]) for r in members}) == 1
        out.append(Cluster(ranked[0].record_id, [r.record_id for r in ranked[1:]],
                           "same words" if same else f"cosine >= {threshold:g}"))
    return sorted(out, key=lambda c: c.keep)


def stale_provisional(rows: list[CapacityRow], now: datetime, days: int) -> list[str]:
    """Provisional records older than ``days`` that nobody confirmed, reinforced, found
    with a search or restored."""
    cutoff = now - timedelta(days=days)
    return [r.record_id for r in rows if r.status == "provisional" and r.created_at < cutoff
            and r.last_used_at is None and not r.pinned]


def unused(rows: list[CapacityRow], now: datetime, days: int) -> list[str]:
    """Records written more than ``days`` ago and not used (reinforced, returned by a
    search, restored) within them."""
    cutoff = now - timedelta(days=days)
    return [r.record_id for r in rows if r.created_at < cutoff
            and (r.last_used_at is None or r.last_used_at < cutoff)]
