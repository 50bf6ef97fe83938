"""The retrieval pipeline: one search, its stages in order, one search_log row.

Every stage runs in order with a Timer mark after it. The finished search_log row goes to
the :class:`SearchLogWriter`, which writes it off the search path. The eligible set is computed
before any candidate is generated, every generator is restricted to it, and the fused
list is filtered against it again before records are loaded (the hard isolation
invariant), so no stage can surface a record the caller may not read.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from retold.config import Config, DenseFloors
from retold.index.embedder import Embedder, Matrix
from retold.index.reranker import Reranker, apply_reranker_floor, rerank_with_timeout
from retold.index.vector import VectorIndex
from retold.models import (
    Candidate,
    LexicalTerm,
    Principal,
    QueryShape,
    Record,
    Scope,
    SearchRequest,
    SearchResponse,
    SearchResult,
)
from retold.policy.grants import readable_scopes
from retold.policy.lifecycle import Lifecycle
from retold.retrieve.beyond_names import beyond_names
from retold.retrieve.budget import fill_budget
from retold.retrieve.dedup import collapse_duplicates
from retold.retrieve.explain import explain, explanation_dict, render
from retold.retrieve.freshness import apply_freshness
from retold.retrieve.fusion import fuse
from retold.retrieve.gate import GateFloors, RecordKind, dense_vote_score, floors_for, gate
from retold.retrieve.generators import (
    LinkedHit,
    dense_candidates,
    entity_candidates,
    lexical_candidates,
    linked_candidates,
    query_shape,
    resolve_entity_aliases,
)
from retold.retrieve.query_encoding import QueryEncoder
from retold.retrieve.rewrite import QueryRewriter, rewrite_stage
from retold.retrieve.search_log import LogJson, SearchLogWriter, log_json
from retold.retrieve.standouts import name_only
from retold.store import EligibleSet, Store
from retold.store.search import RecordMeta
from retold.util import Clock, Timer, new_id, to_iso

__all__ = ["Retriever", "SearchOutcome"]

_ELIGIBLE_CACHE_ENTRIES = 64
# Record metadata kept for one records_version; past this many entries the cache starts
# over (50K entries are a few MB).
_META_CACHE_ENTRIES = 50_000


@dataclass
class SearchOutcome:
    """The response, the text rendered for the model, and the scopes the search read
    (the tool result filters entity ids by them without asking the store again)."""

    response: SearchResponse
    rendered: str
    scopes: list[Scope] = field(default_factory=list)


def _copy(values: list[str] | None) -> list[str] | None:
    return None if values is None else list(values)


class Retriever:
    """``memory_search`` for one process: the store, its RAM index and the models."""

    def __init__(
        self,
        store: Store,
        index: VectorIndex,
        embedder: Embedder,
        rewriter: QueryRewriter,
        reranker: Reranker,
        config: Config,
        lifecycle: Lifecycle,
        clock: Clock,
        *,
        search_log: SearchLogWriter,
    ) -> None:
        self.store, self.index, self.embedder = store, index, embedder
        self.rewriter, self.reranker = rewriter, reranker
        self.config, self.lifecycle, self.clock = config, lifecycle, clock
        self.search_log = search_log
        self.encoder = QueryEncoder(embedder, config.retrieval.encode_alongside)
        self._eligible_cache: OrderedDict[tuple[Any, ...], EligibleSet] = OrderedDict()
        # (records_version, {record_id: RecordMeta}): replaced as a whole when the version
        # moves, so a thread still searching the old version fills only the old dict.
        self._meta_cache: tuple[int, dict[str, RecordMeta]] = (-1, {})

    def search(self, principal: Principal, request: SearchRequest) -> SearchOutcome:
        """Run one search; return the response and its rendered text."""
        cfg = self.config.retrieval
        timer = Timer()
        warm = self.embedder.is_loaded and self.index.is_loaded
        search_id = new_id()  # first: the log's key, and part of the response
        started = self.clock.now()
        k = request.k or (cfg.trigger.auto_k if request.trigger == "auto" else cfg.default_k)

        queries, rewrite_status = rewrite_stage(self.rewriter, list(request.queries), request.context,
                                                cfg.rewrite)
        timer.mark("rewrite")
        # The encoder runs beside the store reads below; dense search waits for it.
        pending = self.encoder.start(queries)
        scopes = readable_scopes(self.store, principal)
        timer.mark("scopes")
        # Read once: both the cached eligible set and the RAM index are checked against it.
        version = self.store.records_version()
        eligible = self._eligible(scopes, request, started, version)
        timer.mark("filter")
        refresh = self.index.refresh(self.store, self.config.embedding.incremental_reload_max,
                                     version=version)
        timer.mark("index_refresh")
        aliases = resolve_entity_aliases(self.store, request.entities, queries, scopes,
                                         cfg.max_alias_tokens, broad_links=cfg.entity_max_links,
                                         now=started)
        lexical = lexical_candidates(self.store, queries, eligible, cfg.per_generator_k,
                                     frozenset(aliases))
        shape = query_shape(queries, lexical, frozenset(aliases))
        timer.mark("lexical")
        entity = entity_candidates(self.store, aliases, eligible, cfg.per_generator_k)
        timer.mark("entity")
        qvecs, encode_ms = pending.result()
        # embed: the encoder's own time; embed_wait: what this search waited for it after
        # the reads above (all of it when encoding on this thread).
        timer.mark("embed_wait")
        timer.record("embed", encode_ms)
        dense = dense_candidates(self.index, qvecs, eligible, cfg.per_generator_k)
        timer.mark("dense")
        candidates = [c for c in fuse(dense, lexical, entity, cfg.rrf_k) if c.record_id in eligible]
        timer.mark("fuse")
        floors = floors_for(cfg.gate, request.trigger)
        beyond = self._beyond_names(candidates, qvecs, shape, floors, timer)
        timer.mark("beyond_names")

        meta = self._record_meta([c.record_id for c in candidates], version)
        # The fused order, before freshness re-sorts the list; the log column is built from
        # it by the writer (fuse sets fused_rank and rrf_score, and no later stage changes them).
        fused_order = list(candidates)
        freshness_log = apply_freshness(candidates, meta, started, cfg.freshness,
                                        time_window=request.since is not None or request.until is not None)
        timer.mark("freshness")
        linked = self._linked(candidates, meta, queries, eligible, shape, frozenset(aliases), version)
        timer.mark("links")

        kinds = {rid: RecordKind(m.type, m.source_kind) for rid, m in meta.items()}
        cross_only = self.config.reranker.enabled and self.config.reranker.mode == "cross_encoder_only"
        gated = gate(candidates, kinds, _policy_only(floors) if cross_only else floors, shape)
        for c in gated.kept:  # a record ranked by its dense vote shows the score it ranks by
            if c.record_id in gated.by_dense_vote:
                c.score = dense_vote_score(c, floors)
        timer.mark("gate")
        kept, deduped_out = collapse_duplicates(gated.kept, self.index, cfg.dedup_cosine)
        # Full records only for the survivors the later stages read (the earlier stages
        # needed four columns): the budget stops at k results, and the rest stay unread.
        records = _SurvivorRecords(self.store, [c.record_id for c in _summaries_last(kept, kinds)], k)
        timer.mark("dedup")
        kept, rerank = self._rerank(kept, records, queries, kinds, floors, cross_only, shape)
        timer.mark("rerank")
        kept = _summaries_last(kept, kinds)

        counterparts: dict[str, Record] = {}
        budget = fill_budget(kept, records, k, cfg.token_budget,
                             lambda r: self._counterpart(r, eligible, counterparts))
        records.update(counterparts)
        timer.mark("budget")

        found = self.store.conflicts_among([p.candidate.record_id for p in budget.chosen])
        conflicts = {p.candidate.record_id: [o for o in found.get(p.candidate.record_id, []) if o in eligible]
                     for p in budget.chosen}
        dedup_notes = {kept_id: f"kept over {dropped} at cosine {cos:.2f}"
                       for dropped, kept_id, cos in deduped_out}
        placements = [
            (p.candidate, records[p.candidate.record_id],
             dedup_notes.get(p.candidate.record_id, "kept"),
             f"fit at position {p.position} of {k}, {p.tokens_used} tokens used"
             + ("" if p.primary else " (authority counterpart, no primary slot)"))
            for p in budget.chosen
        ]
        rewritten = queries if rewrite_status == "applied" else None
        explanations = explain(placements, list(request.queries), rewritten, rewrite_status, conflicts)
        results = [SearchResult(record, candidate.score, ex)
                   for (candidate, record, _, _), ex in zip(placements, explanations, strict=True)]
        empty_reason = None
        if not results and not gated.kept:
            empty_reason = gated.empty_reason
        elif not results:
            empty_reason = self._later_empty_reason(rerank, budget.budget_out)
        rendered = render([(r.record, r.explanation) for r in results], list(request.queries),
                          rewritten, empty_reason)
        timer.mark("explain")

        # Handed over, not written: the answer never waits for the store's write lock. The
        # JSON columns are serialised by the writer (LogJson). The request and scopes are
        # copied here, since callers own them; explanations are read later, and a caller
        # must treat a response as read-only (docs/decisions.md, "Search-log rows are
        # serialised by the writer").
        asked = {"queries": list(request.queries), "types": _copy(request.types),
                 "entities": _copy(request.entities), "since": request.since,
                 "until": request.until, "k": request.k,
                 "include_history": request.include_history}
        read_scopes = [str(s) for s in scopes]
        explained = [(r.explanation, r.record.id) for r in results]
        flags = self._flags(floors, refresh, k)
        timings = timer.as_dict()
        self.search_log.submit({
            "id": search_id, "at": to_iso(started), "agent_id": principal.agent_id,
            "user_id": principal.user_id, "session_id": principal.session_id,
            "trigger": request.trigger, "request": LogJson(lambda: asked),
            "context": request.context, "rewrite_status": rewrite_status,
            "rewritten_queries": log_json(rewritten) if rewritten is not None else None,
            "readable_scopes": LogJson(lambda: read_scopes),
            "dense": LogJson(lambda: [[rid, rank, round(cos, 6)] + ([beyond[rid]] if rid in beyond else [])
                                      for rank, (rid, cos) in enumerate(dense, 1)]),
            "lexical": LogJson(lambda: {
                "hits": [[h.record_id, h.rank, h.bm25,
                          _logged_terms(h.match.terms),
                          h.match.total_terms, h.match.name_terms] for h in lexical],
                "asks": shape.asks, "unknown_names": list(shape.unknown_names),
                "name_groups": [list(group) for group in shape.name_groups],
                "linked": [[h.record_id, h.via, _logged_terms(h.match.terms), h.match.total_terms,
                            h.match.name_terms, meta[h.record_id].type, meta[h.record_id].source_kind]
                           for h in linked]}),
            "entity": LogJson(lambda: [[rid, rank, eid] for rank, (rid, eid) in enumerate(entity, 1)]),
            "fused": LogJson(lambda: [[c.record_id, c.fused_rank, c.rrf_score, meta[c.record_id].type,
                                       meta[c.record_id].source_kind] for c in fused_order]),
            "freshness": LogJson(lambda: freshness_log),
            "gated_out": LogJson(lambda: gated.gated_out), "deduped_out": LogJson(lambda: deduped_out),
            "reranked": LogJson(lambda: rerank.logged) if rerank.logged is not None else None,
            "reranked_out": LogJson(lambda: rerank.omitted), "rerank_status": rerank.status,
            "rerank_error": rerank.error, "budget_out": LogJson(lambda: budget.budget_out),
            "returned": LogJson(lambda: [rid for _, rid in explained]),
            "explanations": LogJson(lambda: [explanation_dict(ex) | {"record_id": rid}
                                             for ex, rid in explained] or [{"empty_reason": empty_reason}]),
            "config_flags": LogJson(lambda: flags), "warm": int(warm),
            "timings_ms": LogJson(lambda: timings),
        })
        timer.mark("log")
        response = SearchResponse(search_id, list(request.queries), rewritten, rewrite_status,
                                  results, empty_reason, timer.as_dict())
        return SearchOutcome(response, rendered, scopes)

    def close(self) -> None:
        """Let the encoder's helper thread end."""
        self.encoder.close()

    # -- stages ---------------------------------------------------------------------------

    def _beyond_names(self, candidates: list[Candidate], qvecs: Matrix, shape: QueryShape,
                      floors: GateFloors, timer: Timer) -> dict[str, float]:
        """Set each dense candidate's cosine beyond the question's names, when the question
        names something and asks about it, the gate uses it and some candidate shares only
        names with it (no other record is judged by it); returns them by record id for the
        log. Encoding the names is a stage of its own (``embed_names``, a cache hit for a
        name seen before), and counts as encoder time (``embed``) too."""
        if not (shape.asks and shape.name_groups) or floors.beyond_names_floor >= 1.0:
            return {}
        dense = [c for c in candidates if c.dense is not None]
        if not any(name_only(c) for c in dense):  # spares the names a forward pass
            return {}
        names = self.embedder.embed_queries([" ".join(group) for group in shape.name_groups])
        timer.record("embed", timer.mark("embed_names"))
        beyond = beyond_names(self.index, [c.record_id for c in dense], qvecs, names)
        for c in dense:
            c.beyond_names = beyond.get(c.record_id)
        return beyond

    def _linked(self, candidates: list[Candidate], meta: dict[str, RecordMeta], queries: list[str],
                eligible: EligibleSet, shape: QueryShape, aliases: frozenset[str],
                version: int) -> list[LinkedHit]:
        """The link hop: records about what the best candidates mention, added to
        ``candidates`` (those already there are marked) with their metadata in ``meta``.

        Only for a question that asks something; the gate decides whether a hop is taken.
        """
        sources = self.config.retrieval.link_sources
        if not shape.asks or sources <= 0 or not candidates:
            return []
        hits = linked_candidates(self.store, [c.record_id for c in candidates[:sources]], queries,
                                 eligible, self.config.retrieval.per_generator_k, aliases)
        meta.update(self._record_meta([h.record_id for h in hits if h.record_id not in meta], version))
        hits = [h for h in hits if h.record_id in meta]  # deleted since the eligible set was read
        by_id = {c.record_id: c for c in candidates}
        for hit in hits:
            c = by_id.get(hit.record_id)
            if c is None:
                c = by_id[hit.record_id] = Candidate(hit.record_id)
                candidates.append(c)
            c.via, c.via_terms = hit.via, hit.match
        return hits

    def _eligible(self, scopes: list[Scope], request: SearchRequest, now: datetime,
                  version: int) -> EligibleSet:
        """The hard filter, reused while nothing it depends on changed.

        A set is exact while ``records_version`` is unchanged and no record in it reached
        its expiry (``valid_until``); grants are part of the key through ``scopes``. Agents
        search many times between writes, and at 50K records this saves the filter query
        and lets the lexical generator keep its eligible temp table.
        """
        key = (tuple(scopes), tuple(request.types or ()), request.since, request.until,
               request.include_history)
        cached = self._eligible_cache.get(key)
        if (cached is not None and cached.records_version == version
                and (cached.valid_until is None or now <= cached.valid_until)):
            self._eligible_cache.move_to_end(key)
            return cached
        eligible = self.store.eligible_ids(scopes, request.types, request.since, request.until,
                                           request.include_history, now)
        self._eligible_cache[key] = eligible
        if len(self._eligible_cache) > _ELIGIBLE_CACHE_ENTRIES:
            self._eligible_cache.popitem(last=False)
        return eligible

    def _record_meta(self, ids: list[str], version: int) -> dict[str, RecordMeta]:
        """Type, source kind, status and event time of these records, read once per
        ``records_version``.

        Every change to those columns (a status move, a reinforcement that changes the
        source kind) bumps the version, as the eligible set already relies on, and type
        and event time never change; so a cached entry is what the store would return.
        Searches between writes meet the same records again and again, and reading
        them was a tenth of a search's own time at 10K records.
        """
        cached_version, cache = self._meta_cache
        if cached_version != version or len(cache) > _META_CACHE_ENTRIES:
            cache = {}
            self._meta_cache = (version, cache)
        missing = [rid for rid in ids if rid not in cache]
        if missing:
            cache.update(self.store.record_meta(missing))
        return {rid: cache[rid] for rid in ids if rid in cache}

    def _rerank(
        self,
        kept: list[Candidate],
        records: Mapping[str, Record],
        queries: list[str],
        kinds: dict[str, RecordKind],
        floors: GateFloors,
        cross_only: bool,
        shape: QueryShape,
    ) -> tuple[list[Candidate], _Rerank]:
        """The optional cross-encoder over the shortlist, with its fallback."""
        rcfg = self.config.reranker
        if not rcfg.enabled or not kept:
            return kept, _Rerank("disabled" if not rcfg.enabled else "applied", None, [], None)
        shortlist, rest = kept[: rcfg.candidates], kept[rcfg.candidates:]
        outcome = rerank_with_timeout(
            self.reranker, shortlist, {c.record_id: records[c.record_id].content for c in shortlist}, queries,
            timeout_ms=rcfg.timeout_ms, on_failure=rcfg.on_failure,
        )
        if outcome.status != "applied":
            # Fallback serves the RRF order with nothing removed; with the cross-encoder as
            # the only relevance decision, the floors it replaced must run first.
            if cross_only:
                kept = gate(kept, kinds, floors, shape).kept
            return kept, _Rerank(outcome.status, None, [], outcome.error)
        omitted: list[list[Any]] = [[c.record_id, "outside reranker shortlist", None] for c in rest]
        assert rcfg.floor is not None  # load_config refuses an enabled reranker without one
        survivors, below = apply_reranker_floor(outcome.candidates, rcfg.floor)
        omitted += [list(row) for row in below]
        return survivors, _Rerank("applied", outcome.logged, omitted, None)

    def _counterpart(self, record: Record, eligible: EligibleSet, cache: dict[str, Record]) -> Record | None:
        """The eligible authority counterpart of a provisional conflict, shown beside it."""
        others = [o for o in self.store.conflicts_of(record.id) if o in eligible]
        options = [o for o in self.store.records(others)
                   if o.status == "confirmed" or self.lifecycle.has_authority(o, record)]
        if not options:
            return None
        best = max(options, key=self.lifecycle.authority_key)
        cache[best.id] = best
        return best

    @staticmethod
    def _later_empty_reason(rerank: _Rerank, budget_out: list[str]) -> str:
        if rerank.omitted and rerank.status == "applied":
            return "every gate survivor fell below the reranker floor or outside its shortlist"
        if budget_out:
            return "no survivor fit the token budget"
        return "no survivor remained after duplicate collapse"

    def _flags(self, floors: GateFloors, refresh: str, k: int) -> dict[str, Any]:
        return {
            "embedding_model": self.embedder.name, "embedding_version": self.embedder.version,
            "rewrite_enabled": self.config.retrieval.rewrite.enabled,
            "reranker_enabled": self.config.reranker.enabled,
            "reranker_mode": self.config.reranker.mode, "gate": floors.as_dict(),
            "index_refresh": refresh, "k": k, "rrf_k": self.config.retrieval.rrf_k,
            "token_budget": self.config.retrieval.token_budget,
            "ranking": "rrf_cross_encoder" if self.config.reranker.enabled else "rrf_only",
        }


def _logged_terms(terms: Sequence[LexicalTerm]) -> list[list[Any]]:
    """Matched terms as the log holds them (``replay.logged_candidates`` reads them back)."""
    return [[t.value, t.is_identifier, t.is_entity_alias, t.is_proper] for t in terms]


def _summaries_last(kept: list[Candidate], kinds: Mapping[str, RecordKind]) -> list[Candidate]:
    """A session summary digests records that are searchable on their own: when both
    match, the records lead and the summary takes what room is left."""
    return sorted(kept, key=lambda c: kinds[c.record_id].source_kind == "session_summary")


class _SurvivorRecords(Mapping[str, Record]):
    """The survivors' full records, read from the store as they are asked for.

    A miss reads that record and the next ``batch`` - 1 unread ones in ``order`` (the
    order the budget walks), in one query: with ``batch = k`` a search whose first k
    survivors fit reads exactly those. ``update`` adds records read elsewhere (the
    authority counterparts). A record the store no longer has is a KeyError, as it was
    in a dict read up front.
    """

    def __init__(self, store: Store, order: list[str], batch: int) -> None:
        self._store, self._order, self._batch = store, order, max(1, batch)
        self._at = {record_id: i for i, record_id in enumerate(order)}
        self._read: set[str] = set()
        self._loaded: dict[str, Record] = {}

    def __getitem__(self, record_id: str) -> Record:
        if record_id not in self._loaded and record_id in self._at and record_id not in self._read:
            start = self._at[record_id]
            todo = [i for i in self._order[start:] if i not in self._read][: self._batch]
            self._read.update(todo)
            self._loaded.update((r.id, r) for r in self._store.records(todo))
        return self._loaded[record_id]

    def __iter__(self) -> Iterator[str]:  # reads every survivor; the search never iterates
        found = [record_id for record_id in self._order if record_id in self]
        return iter([*found, *(i for i in self._loaded if i not in self._at)])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def update(self, records: Mapping[str, Record]) -> None:
        self._loaded.update(records)


@dataclass
class _Rerank:
    status: str
    logged: list[Any] | None
    omitted: list[list[Any]]
    error: str | None


def _policy_only(floors: GateFloors) -> GateFloors:
    """cross_encoder_only: only the source-kind policy gates before the reranker."""
    open_floor = DenseFloors(semantic=-1.0, episodic=-1.0, procedural=-1.0, session_summary=-1.0)
    return GateFloors(open_floor, 0.0, 0, 0.0, floors.exclude_source_kinds, policy_only=True)
