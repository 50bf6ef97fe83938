"""A golden set asked again: every labelled item through the store's own search path, as
the item's principal, and what came back measured.

Per item: recall of its expected records in the top ``k``, whether it came back empty,
stale results (a superseded record, or one a later record supersedes, returned in a search
that did not ask for history; in one that did, a record whose successor is not ranked
above it; a search at an ``as_of`` moment asked for the past and is not judged stale),
contradictions (two returned records in an open conflict, both still live), leaks, tokens
and time. Per scope and overall:

- ``recall_at_k``: the mean, over answerable items, of the share of expected records returned;
- ``empty_rate``: answerable items that came back empty;
- ``abstention``: "nothing stored" items that came back empty;
- ``stale_rate`` and ``contradiction_rate``: items with at least one stale result, or one
  contradiction among their results;
- ``open_conflicts_per_1k``: open conflicts touching the scope per 1,000 of its live records;
- ``leaks``: must be 0. Nothing is planted: every record a search returns must be in a
  scope its principal may read (:func:`retold.policy.grants.readable_scopes`); each item's
  question is also asked as a principal that cannot read the item's scope (another of the
  set's principals, else an agent with no grant at all), and nothing from that scope may
  come back; and it is asked in other tenants of the store, where no record the item's own
  tenant returned may appear unless that tenant holds it too;
- ``tokens_per_search`` (the results' token cost, as the budget counts it) and
  ``search_p50_ms`` (the item searches, not the probes).

Nothing here writes: the caller hands in searches on stores opened read-only.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from retold.models import ACTIVE_STATUSES, Principal, Scope, SearchRequest, SearchResponse, SearchResult
from retold.policy.grants import readable_scopes
from retold.quality.golden import GoldenItem, GoldenSet
from retold.retrieve.budget import record_tokens
from retold.store import Store

__all__ = ["CANARY", "METRICS", "Evaluation", "ItemResult", "Leak", "Metrics", "Searcher", "evaluate",
           "metrics_of"]

Search = Callable[[Principal, SearchRequest], SearchResponse]

# Who asks a scope probe when no principal of the set is kept out of the item's scope: an
# agent that holds no grant, so it reads only its own empty private scope.
CANARY = Principal("retold-eval-canary", "retold-eval-canary")

METRICS = ("recall_at_k", "empty_rate", "abstention", "stale_rate", "contradiction_rate",
           "open_conflicts_per_1k", "leaks", "tokens_per_search", "search_p50_ms")


@dataclass(frozen=True)
class Searcher:
    """One tenant's store and the search path over it (a store opened read-only)."""

    store: Store
    search: Search


@dataclass(frozen=True)
class Leak:
    """A record a search returned that its searcher must not have seen."""

    item: str
    record_id: str
    scope: str
    searcher: str  # agent/user, with the tenant for a tenant probe
    probe: Literal["item", "scope", "tenant"]
    why: str


@dataclass
class ItemResult:
    """What one labelled item's search returned, measured."""

    id: str
    scope: str
    kind: Literal["answerable", "nothing_stored"]
    returned: list[str]
    found: list[str]  # expected records among the results
    missing: list[str]  # expected records not among them
    recall: float | None  # None for a "nothing stored" item
    empty: bool
    stale: list[str]
    contradictions: list[list[str]]  # pairs of returned record ids
    leaks: list[Leak] = field(default_factory=list)
    tokens: int = 0
    ms: float = 0.0


@dataclass(frozen=True)
class Metrics:
    """The numbers for one scope, or for the whole set. None where no item applies."""

    items: int
    answerable: int
    nothing_stored: int
    recall_at_k: float | None
    empty_rate: float | None
    abstention: float | None
    stale_rate: float | None
    contradiction_rate: float | None
    open_conflicts_per_1k: float | None
    leaks: int
    tokens_per_search: float | None
    search_p50_ms: float | None

    def value(self, name: str) -> float | None:
        value = getattr(self, name)
        return None if value is None else float(value)


@dataclass(frozen=True)
class Evaluation:
    """A golden set's run against one store."""

    set_sha256: str
    frozen: bool
    tenant: str
    k: int
    items: list[ItemResult]
    overall: Metrics
    scopes: dict[str, Metrics]
    unlabelled: int  # items skipped: not labelled yet
    scope_probes: int
    tenants_probed: list[str]
    seconds: float


def evaluate(golden: GoldenSet, home: Searcher, *, k: int = 10,
             other_tenants: Mapping[str, Searcher] | None = None) -> Evaluation:
    """Run every labelled item of ``golden`` through ``home``'s search and measure it;
    probe the other tenants' searches for leaks."""
    started = time.perf_counter()
    others = dict(other_tenants or {})
    labelled = golden.labelled
    readable = _Readable(home.store)
    links = home.store.supersession_links()
    prober = _ScopeProber([item.principal.principal() for item in labelled], readable)
    requests = [(item, item.principal.principal(), _request(item, k)) for item in labelled]
    # The items first, then the probes grouped by who asks: a search that follows one by
    # the same principal reuses its eligible set, where alternating would rebuild it.
    results: list[ItemResult] = []
    for item, principal, request in requests:
        begun = time.perf_counter()
        response = home.search(principal, request)
        ms = (time.perf_counter() - begun) * 1000
        result = _measure(item, response.results, links, home.store, ms)
        result.leaks += _unreadable(item, response.results, principal, readable.of(principal), "item", "")
        results.append(result)
    probes = sorted(((prober.for_item(n, Scope.parse(item.scope)), n)
                     for n, (item, _, _) in enumerate(requests)), key=lambda pair: (_who(pair[0]), pair[1]))
    for probe, n in probes:
        item, _, request = requests[n]
        # The probe cannot read the item's scope, so anything of it coming back is a leak too.
        results[n].leaks += _unreadable(item, home.search(probe, request).results, probe, readable.of(probe),
                                        "scope", "")
    for tenant, searcher in others.items():
        for (item, principal, request), result in zip(requests, results, strict=True):
            home_ids = set(result.returned) | set(item.expected) | {c.id for c in item.candidates}
            result.leaks += _tenant_leaks(item, principal, request, tenant, searcher, home_ids,
                                          home.store.tenant)
    scopes = sorted({item.scope for item in labelled})
    conflicts = home.store.scope_conflicts([Scope.parse(s) for s in scopes])
    by_scope = {
        scope: metrics_of([r for r in results if r.scope == scope],
                          conflicts[Scope.parse(scope)].open_conflicts, conflicts[Scope.parse(scope)].live)
        for scope in scopes
    }
    overall = metrics_of(results, sum(c.open_conflicts for c in conflicts.values()),
                         sum(c.live for c in conflicts.values()))
    return Evaluation(golden.content_hash(), golden.header.frozen is not None, home.store.tenant, k, results,
                      overall, by_scope, len(golden.items) - len(labelled), len(probes), sorted(others),
                      time.perf_counter() - started)


def _request(item: GoldenItem, k: int) -> SearchRequest:
    f = item.filters
    return SearchRequest(
        queries=list(item.question), types=list(f.types) if f.types is not None else None,
        entities=list(f.entities) if f.entities is not None else None, since=f.moment("since"),
        until=f.moment("until"), k=k, include_history=f.include_history, as_of=f.moment("as_of"),
        trigger=item.trigger)


def _measure(item: GoldenItem, hits: Sequence[SearchResult], links: Mapping[str, list[tuple[str, str]]],
             store: Store, ms: float) -> ItemResult:
    returned = [hit.record.id for hit in hits]
    found = [rid for rid in item.expected if rid in returned]
    missing = [rid for rid in item.expected if rid not in returned]
    position = {rid: n for n, rid in enumerate(returned)}
    stale: list[str] = []
    if item.filters.as_of is None:  # a search at a past moment asked for what held then
        for n, hit in enumerate(hits):
            successors = [rid for rid, _ in links.get(hit.record.id, [])]
            if hit.record.status != "superseded" and not successors:
                continue
            if not item.filters.include_history:
                stale.append(hit.record.id)  # history the search did not ask for
            elif successors and not any(position.get(rid, len(returned)) < n for rid in successors):
                stale.append(hit.record.id)  # history shown where what replaced it should be
    live = {hit.record.id for hit in hits if hit.record.status in ACTIVE_STATUSES}
    pairs = sorted({tuple(sorted((rid, other)))
                    for rid, others in store.conflicts_among(returned).items() if rid in live
                    for other in others if other in live})
    return ItemResult(
        id=item.id, scope=item.scope, kind="answerable" if item.answerable else "nothing_stored",
        returned=returned, found=found, missing=missing,
        recall=len(found) / len(item.expected) if item.answerable else None, empty=not returned,
        stale=stale, contradictions=[list(pair) for pair in pairs],
        tokens=sum(record_tokens(hit.record) for hit in hits), ms=ms)


def _who(principal: Principal) -> str:
    project = f" (project {principal.project_id})" if principal.project_id else ""
    return f"{principal.agent_id}/{principal.user_id}{project}"


def _unreadable(item: GoldenItem, hits: Iterable[SearchResult], principal: Principal, scopes: list[Scope],
                probe: Literal["item", "scope", "tenant"], tenant: str) -> list[Leak]:
    where = f" in tenant {tenant}" if tenant else ""
    return [Leak(item.id, hit.record.id, str(hit.record.scope), _who(principal) + where, probe,
                 f"{_who(principal)}{where} cannot read {hit.record.scope}")
            for hit in hits if hit.record.scope not in scopes]


def _tenant_leaks(item: GoldenItem, principal: Principal, request: SearchRequest, tenant: str,
                  searcher: Searcher, home_ids: set[str], home_tenant: str) -> list[Leak]:
    """The item asked in another tenant: what comes back must be readable there, and no
    record of the item's own tenant may appear unless that tenant holds it too (a scope
    imported with its ids)."""
    hits = searcher.search(principal, request).results
    leaks = _unreadable(item, hits, principal, readable_scopes(searcher.store, principal), "tenant", tenant)
    shared = [hit for hit in hits if hit.record.id in home_ids]
    if shared:
        held = {r.id for r in searcher.store.records([hit.record.id for hit in shared])}
        searcher_name = f"{_who(principal)} in tenant {tenant}"
        leaks += [Leak(item.id, hit.record.id, str(hit.record.scope), searcher_name, "tenant",
                       f"tenant {tenant} returned a record of tenant {home_tenant} it does not hold")
                  for hit in shared if hit.record.id not in held]
    return leaks


class _Readable:
    """Each principal's readable scopes, read once per evaluation (grants do not change
    while it runs: the store is read-only)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._scopes: dict[Principal, list[Scope]] = {}

    def of(self, principal: Principal) -> list[Scope]:
        if principal not in self._scopes:
            self._scopes[principal] = readable_scopes(self.store, principal)
        return self._scopes[principal]


class _ScopeProber:
    """Who asks each item's scope probe: the next of the set's principals (starting after
    the item's place, so the probes spread over them) who cannot read the item's scope,
    else :data:`CANARY`."""

    def __init__(self, principals: Sequence[Principal], readable: _Readable) -> None:
        self.principals = list(dict.fromkeys(principals))
        self.readable = readable

    def for_item(self, index: int, scope: Scope) -> Principal:
        count = len(self.principals)
        for step in range(count):
            candidate = self.principals[(index + step) % count]
            if scope not in self.readable.of(candidate):
                return candidate
        return CANARY


def _mean(values: Sequence[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


def metrics_of(results: Sequence[ItemResult], open_conflicts: int, live: int) -> Metrics:
    """The numbers of a group of item results, with its scopes' open conflicts and live records."""
    answerable = [r for r in results if r.kind == "answerable"]
    nothing = [r for r in results if r.kind == "nothing_stored"]
    return Metrics(
        items=len(results), answerable=len(answerable), nothing_stored=len(nothing),
        recall_at_k=_mean([r.recall for r in answerable if r.recall is not None]),
        empty_rate=_mean([float(r.empty) for r in answerable]),
        abstention=_mean([float(r.empty) for r in nothing]),
        stale_rate=_mean([float(bool(r.stale)) for r in results]),
        contradiction_rate=_mean([float(bool(r.contradictions)) for r in results]),
        open_conflicts_per_1k=round(1000 * open_conflicts / live, 3) if live else None,
        leaks=sum(len(r.leaks) for r in results),
        tokens_per_search=_mean([float(r.tokens) for r in results]),
        search_p50_ms=round(statistics.median([r.ms for r in results]), 3) if results else None,
    )
