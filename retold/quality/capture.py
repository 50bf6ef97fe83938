"""A golden set sampled from a deployment's own logged searches.

Every kept ``search_log`` row is a question an agent asked, as a principal, and the
records it got back. Capture reads those rows and the records they returned (it writes
nothing), keeps the latest search of each distinct question, and samples ``size`` of them
stratified by scope, the returned record type and whether the search answered or came
back empty, so a set of 200 covers the rare kinds of question as well as the common ones.
The same log and the same ``seed`` give the same set.

An item's scope is the scope of the first record its search returned; for a search that
came back empty it is the first scope asked for (``--scope``) that the principal could
read, else the principal's user scope when readable, else its first shared scope, else
its private one. Its stratum is ``scope|type|answered`` (``none`` and ``empty`` for an
empty search). A search whose returned records have all been erased since is left out:
nobody can label what is gone.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from retold.clock import to_iso
from retold.models import Record, Scope
from retold.quality.golden import (
    Filters,
    GoldenHeader,
    GoldenItem,
    GoldenSet,
    Snapshot,
    Who,
)
from retold.store import Store
from retold.store.quality import LoggedSearch

__all__ = ["CaptureResult", "allocate", "capture", "snapshot"]

SNAPSHOT_CHARS = 300  # of a candidate's text and evidence: enough to label by, short enough to diff


@dataclass(frozen=True)
class CaptureResult:
    """The captured set, and what it was drawn from."""

    golden: GoldenSet
    searches: int  # logged searches read
    questions: int  # distinct questions among them that qualified
    strata: Mapping[str, int]  # items taken per stratum


@dataclass(frozen=True)
class _Question:
    row: LoggedSearch
    who: Who
    queries: tuple[str, ...]
    filters: Filters
    returned: tuple[str, ...]


def snapshot(record: Record, rank: int | None) -> Snapshot:
    """What a labeller reads of a candidate: its text and evidence, cut to a few lines."""
    return Snapshot(record.id, rank, record.type, record.status, str(record.scope),
                    _cut(record.content), None if record.evidence is None else _cut(record.evidence))


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= SNAPSHOT_CHARS else text[: SNAPSHOT_CHARS - 1].rstrip() + "…"


def capture(store: Store, *, size: int, seed: int, now: datetime, source: str,
            scopes: Sequence[Scope] = ()) -> CaptureResult:
    """Sample up to ``size`` items from the store's logged searches (only those about
    ``scopes`` when given); reads only."""
    rows = store.logged_searches()
    questions = _questions(store, rows)
    records = {r.id: r for r in store.records([rid for q in questions for rid in q.returned])}
    strata: dict[str, list[tuple[_Question, Scope]]] = {}
    for question in questions:
        placed = _place(question, records, scopes)
        if placed is not None:
            scope, stratum = placed
            strata.setdefault(stratum, []).append((question, scope))
    rng = random.Random(seed)
    taken: dict[str, int] = allocate({name: len(group) for name, group in strata.items()}, size, rng)
    chosen: list[tuple[str, _Question, Scope]] = []
    for name in sorted(taken):
        # Shuffled from a fixed order, so only the seed decides which are drawn.
        group = sorted(strata[name], key=lambda pair: pair[0].row.id)
        rng.shuffle(group)
        picked = sorted(group[: taken[name]], key=lambda pair: (pair[0].row.at, pair[0].row.id))
        chosen += [(name, question, scope) for question, scope in picked]
    width = max(4, len(str(len(chosen))))
    items = tuple(
        GoldenItem(
            id=f"q{n:0{width}d}", search_id=question.row.id, scope=str(scope), stratum=stratum,
            principal=question.who, question=question.queries, filters=question.filters,
            trigger="host" if question.row.trigger == "host" else "tool",
            candidates=tuple(snapshot(records[rid], rank) for rank, rid in enumerate(question.returned, 1)
                             if rid in records),
        )
        for n, (stratum, question, scope) in enumerate(chosen, 1)
    )
    header = GoldenHeader(tenant=store.tenant, created_at=to_iso(now), source=source)
    return CaptureResult(GoldenSet(header, items), len(rows), sum(len(g) for g in strata.values()),
                         {name: count for name, count in sorted(taken.items()) if count})


def _questions(store: Store, rows: Sequence[LoggedSearch]) -> list[_Question]:
    """The latest logged search of each distinct question (principal, queries, filters);
    rows whose request cannot be read are passed over."""
    members: dict[str, set[Scope]] = {}
    latest: dict[tuple[Any, ...], _Question] = {}
    for row in rows:
        try:
            request = json.loads(row.request)
            readable = [Scope.parse(text) for text in json.loads(row.readable_scopes)]
            returned = tuple(str(rid) for rid in json.loads(row.returned))
            queries = tuple(str(q) for q in request["queries"] if str(q).strip())
            filters = _filters(request)
        except (ValueError, TypeError, KeyError):
            continue
        if not queries:
            continue
        if row.user_id not in members:
            members[row.user_id] = set(store.member_scopes(row.user_id))
        who = Who(row.agent_id, row.user_id, _project(readable, members[row.user_id]))
        latest[(who, queries, filters, row.trigger)] = _Question(row, who, queries, filters, returned)
    return sorted(latest.values(), key=lambda q: (q.row.at, q.row.id))


def _project(readable: Sequence[Scope], memberships: set[Scope]) -> str | None:
    """The project the logged session named: a readable project scope the user is not a
    member of can only have come from the principal (see retold.policy.grants)."""
    named = [s.id for s in readable if s.kind == "project" and s not in memberships]
    return named[0] if named else None


def _filters(request: Mapping[str, Any]) -> Filters:
    def strings(name: str) -> tuple[str, ...] | None:
        value = request.get(name)
        return None if value is None else tuple(str(v) for v in value)

    def moment(name: str) -> str | None:
        value = request.get(name)
        return None if value in (None, "") else str(value)

    return Filters(types=strings("types"), entities=strings("entities"), since=moment("since"),
                   until=moment("until"), include_history=bool(request.get("include_history", False)),
                   as_of=moment("as_of"))


def _place(question: _Question, records: Mapping[str, Record],
           wanted: Sequence[Scope]) -> tuple[Scope, str] | None:
    """The item's scope and stratum, or None when it is not wanted or cannot be labelled."""
    if question.returned:
        live = [records[rid] for rid in question.returned if rid in records]
        if not live:
            return None
        top = live[0]
        if wanted and top.scope not in wanted:
            return None
        return top.scope, f"{top.scope}|{top.type}|answered"
    readable = json.loads(question.row.readable_scopes)
    scopes = [Scope.parse(text) for text in readable]
    if wanted:
        asked = [s for s in wanted if s in scopes]
        if not asked:
            return None
        scope = asked[0]
    else:
        user = Scope("user", question.who.user_id)
        shared = [s for s in scopes if not s.is_private]
        scope = user if user in scopes else shared[0] if shared else question.who.principal().private_scope
    return scope, f"{scope}|none|empty"


def allocate(sizes: Mapping[str, int], total: int, rng: random.Random) -> dict[str, int]:
    """How many to take from each stratum: one from each while ``total`` allows (strata
    drawn by ``rng`` when it does not), the rest in proportion to what each has left, by
    largest remainder; never more than a stratum holds."""
    names = sorted(name for name, n in sizes.items() if n > 0)
    total = min(total, sum(sizes[name] for name in names))
    if total <= 0:
        return {}
    if total < len(names):
        return {name: 1 for name in rng.sample(names, total)}
    taken = {name: 1 for name in names}
    left = {name: sizes[name] - 1 for name in names}
    while (rest := total - sum(taken.values())) > 0:
        room = sum(left.values())
        shares = {name: rest * left[name] / room for name in names if left[name]}
        floors = {name: min(left[name], math.floor(share)) for name, share in shares.items()}
        if not sum(floors.values()):
            # Less than one each: the largest remainders (ties by name) take one.
            order = sorted(shares, key=lambda name: (-shares[name], name))[:rest]
            floors = {name: 1 for name in order}
        for name, extra in floors.items():
            taken[name] += extra
            left[name] -= extra
    return taken
