"""The retrieval pipeline: one search, its stages in order, one search_log row.

Two decisions, kept apart (docs/decisions.md, "How search decides"): the order, one fusion
of the channels over the eligible set with freshness as its one factor; and whether to
answer, one calibrated decision from a few named signals. After that only the tail cut,
duplicate collapse, the optional cross-encoder and the token budget shorten the list.

Every stage runs in order with a Timer mark after it. The eligible set is computed before
any candidate is generated, every generator is restricted to it, and the fused list is
filtered against it again before records are loaded (the hard isolation invariant), so no
stage can surface a record the caller may not read. The finished row goes to the
:class:`SearchLogWriter`, which writes it off the search path.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, cast

from retold.clock import Clock, Timer, new_id, to_iso
from retold.config import Config
from retold.config.pack import MemoryPack, RecordClass, pack_for_config
from retold.index.embedder import Embedder, Matrix
from retold.index.reranker import Reranker, apply_reranker_floor, rerank_with_timeout
from retold.index.vector import VectorIndex
from retold.models import (
    RECORD_TYPES,
    Candidate,
    Principal,
    QueryShape,
    Record,
    Scope,
    SearchRequest,
    SearchResponse,
    SearchResult,
)
from retold.plain import to_plain
from retold.policy.grants import ScopeCache, no_grant_reason
from retold.policy.lifecycle import Lifecycle
from retold.retrieve.beyond_names import beyond_names, dense_beyond_names
from retold.retrieve.budget import fill_budget
from retold.retrieve.confidence import apply_confidence, weighs
from retold.retrieve.dedup import collapse_duplicates
from retold.retrieve.explain import explain, render
from retold.retrieve.freshness import apply_freshness
from retold.retrieve.fusion import add_links, floor_at, fuse
from retold.retrieve.gate import Decision, decide, gate
from retold.retrieve.generators import (
    dense_candidates,
    entity_candidates,
    lexical_candidates,
    linked_candidates,
    query_shape,
    resolve_entity_aliases,
    written_name_groups,
)
from retold.retrieve.periods import apply_periods, asks_what_held, named_periods
from retold.retrieve.query_encoding import PendingQueries, QueryEncoder
from retold.retrieve.rewrite import QueryRewriter, rewrite_stage
from retold.retrieve.search_log import SearchLogWriter
from retold.retrieve.signals import measure
from retold.retrieve.trace import RerankLog, SearchTrace
from retold.store import EligibleSet, Store
from retold.store.search import RecordMeta

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
        pack: MemoryPack | None = None,
        mask: Callable[[str], str] | None = None,
    ) -> None:
        self.store, self.index, self.embedder = store, index, embedder
        # Per-type ranking half-lives and token-budget shares, from the pack the runtime
        # hands over; without one, the built-in pack under this config (today's ranking).
        pack = pack or pack_for_config(config)
        self.half_lives = {t: pack.classes.of(cast(RecordClass, t)).half_life_days for t in RECORD_TYPES}
        # Only enabled classes hold a share: the pack's check keeps those within 100%.
        self.reserved_pct = {t: policy.retrieval_budget_pct for t in RECORD_TYPES
                             if (policy := pack.classes.of(cast(RecordClass, t))).enabled
                             and policy.retrieval_budget_pct}
        self.rewriter, self.reranker = rewriter, reranker
        self.config, self.lifecycle, self.clock = config, lifecycle, clock
        self.search_log = search_log
        # The tenant's redaction, when its pack masks anything: a question that quotes a
        # masked span is searched, rewritten and logged with the placeholder, as the
        # records' own indexes hold it (docs/decisions.md, "Sensitive text is masked before
        # it leaves the record").
        self.mask = mask
        self.encoder = QueryEncoder(embedder, config.retrieval.encode_alongside)
        self.scopes = ScopeCache(store)
        self._eligible_cache: OrderedDict[tuple[Any, ...], EligibleSet] = OrderedDict()
        # (records_version, {record_id: RecordMeta}): replaced as a whole when the version
        # moves, so a thread still searching the old version fills only the old dict.
        self._meta_cache: tuple[int, dict[str, RecordMeta]] = (-1, {})

    def search(self, principal: Principal, request: SearchRequest) -> SearchOutcome:
        """Run one search; return the response and its rendered text."""
        cfg, timer = self.config.retrieval, Timer()
        if self.mask is not None:
            mask = self.mask
            request = replace(request, queries=[mask(q) for q in request.queries],
                              context=None if request.context is None else mask(request.context))
        now = self.clock.now()
        periods = named_periods(" ".join(request.queries), now)
        implied = None
        if (request.trigger == "host" and cfg.named_periods.host_as_of and request.as_of is None
                and request.since is None and request.until is None):
            implied = asks_what_held(" ".join(request.queries), periods, now)
            if implied is not None:
                request = replace(request, as_of=implied)
        trace = SearchTrace(new_id(), now, principal, request,
                            warm=self.embedder.is_loaded and self.index.is_loaded)
        trace.periods = periods
        if periods:
            trace.flags["named_periods"] = [{"text": p.text, "period": p.label()} for p in periods]
        if implied is not None:
            trace.flags["implied_as_of"] = to_iso(implied)
        k = request.k or (cfg.trigger.host_k if request.trigger == "host" else cfg.default_k)
        queries, trace.rewrite_status = rewrite_stage(self.rewriter, list(request.queries),
                                                      request.context, cfg.rewrite)
        trace.rewritten = queries if trace.rewrite_status == "applied" else None
        timer.mark("rewrite")
        candidates, eligible, scopes = self._ranked(trace, queries, timer)
        cross_only = self.config.reranker.enabled and self.config.reranker.mode == "cross_encoder_only"
        reads_as = "tool" if request.judged else request.trigger
        trace.decision = decide(measure(candidates, trace.shape), cfg.gate, reads_as, deferred=cross_only)
        tail = cfg.gate.tail_fraction.host if reads_as == "host" else cfg.gate.tail_fraction.tool
        kinds = {rid: m.source_kind for rid, m in trace.meta.items()}
        trace.gated = gated = gate(candidates, trace.decision, kinds, tail)
        timer.mark("gate")
        kept, trace.deduped_out = collapse_duplicates(gated.kept, self.index, cfg.dedup_cosine)
        # Full records only for the survivors the later stages read (the earlier stages
        # needed four columns): the budget stops at k results, and the rest stay unread.
        records = _SurvivorRecords(self.store, [c.record_id for c in _summaries_last(kept, kinds)], k)
        timer.mark("dedup")
        kept, trace.rerank = self._rerank(kept, records, queries, trace.decision, kinds, tail)
        timer.mark("rerank")
        counterparts: dict[str, Record] = {}
        reserved = {t: int(cfg.token_budget * pct / 100) for t, pct in self.reserved_pct.items()}
        budget = fill_budget(_summaries_last(kept, kinds), records, k, cfg.token_budget,
                             lambda r: self._counterpart(r, eligible, counterparts), reserved)
        records.update(counterparts)
        trace.budget_out = budget.budget_out
        timer.mark("budget")
        results, rendered = self._explained(trace, budget.chosen, records, eligible, scopes, k,
                                            gated.empty_reason)
        timer.mark("explain")
        trace.flags.update(self._flags(k))
        # Handed over, not written: the answer never waits for the store's write lock. A
        # writer that keeps no row (a read-only store, an evaluation) is spared building one.
        if not self.search_log.discard:
            self.search_log.submit(trace.log_row(timer.as_dict()))
        timer.mark("log")
        response = SearchResponse(trace.search_id, list(request.queries), trace.rewritten,
                                  trace.rewrite_status, results, trace.empty_reason, timer.as_dict(),
                                  trace.decision.as_dict())
        return SearchOutcome(response, rendered, scopes)

    def close(self) -> None:
        """Let the encoder's helper thread end."""
        self.encoder.close()

    # -- stages ---------------------------------------------------------------------------

    def _ranked(self, trace: SearchTrace, queries: list[str],
                timer: Timer) -> tuple[list[Candidate], EligibleSet, list[Scope]]:
        """The first decision: every channel over the eligible set, fused, with freshness.

        Sets the channels' outputs, the metadata and the fused order on ``trace``."""
        cfg, request, now = self.config.retrieval, trace.request, trace.started
        # The encoder runs beside the store reads below; dense search waits for it.
        pending = self.encoder.start(queries)
        written_names = self.encoder.start_names(written_name_groups(queries))
        scopes = self.scopes.readable(trace.principal)
        trace.scopes = [str(s) for s in scopes]
        timer.mark("scopes")
        # Read once: both the cached eligible set and the RAM index are checked against it.
        version = self.store.records_version()
        eligible = self._eligible(scopes, request, now, version)
        timer.mark("filter")
        refresh = self.index.refresh(self.store, self.config.embedding.incremental_reload_max,
                                     version=version)
        timer.mark("index_refresh")
        aliases = resolve_entity_aliases(self.store, request.entities, queries, scopes,
                                         cfg.max_alias_tokens, broad_links=cfg.entity_max_links, now=now)
        # Each channel reads down to its zero's rank; only the first per_generator_k are candidates.
        k, zero = cfg.per_generator_k, cfg.fusion.zero_rank
        lexical = lexical_candidates(self.store, queries, eligible, max(k, zero), frozenset(aliases),
                                     match_first=k)
        trace.lexical = lexical[:k]
        trace.shape = query_shape(queries, trace.lexical, frozenset(aliases))
        timer.mark("lexical")
        trace.entity = entity_candidates(self.store, aliases, eligible, cfg.per_generator_k)
        timer.mark("entity")
        qvecs, encode_ms = pending.result()
        # embed: the encoder's own time; embed_wait: what this search waited for it after
        # the reads above (all of it when encoding on this thread).
        timer.mark("embed_wait")
        timer.record("embed", encode_ms)
        names = self._names(trace.shape, timer, written_names)
        if names is not None:
            dense = dense_beyond_names(self.index, qvecs, names, eligible, max(k, zero),
                                       cfg.fusion.beyond_names)
        else:
            dense = dense_candidates(self.index, qvecs, eligible, max(k, zero))
        trace.dense = dense[:k]
        timer.mark("dense")
        floors = (floor_at([cos for _, cos in dense], zero), floor_at([-h.bm25 for h in lexical], zero))
        trace.flags["scale_floors"] = {"dense": floors[0], "lexical": floors[1]}
        fused = [c for c in fuse(trace.dense, trace.lexical, trace.entity, cfg.fusion, floors)
                 if c.record_id in eligible]
        if cfg.link_sources > 0 and fused:
            linked = linked_candidates(self.store, [c.record_id for c in fused[:cfg.link_sources]],
                                       eligible, cfg.per_generator_k)
            fused = add_links(fused, linked, cfg.fusion.link)
        timer.mark("fuse")
        if names is not None:
            beyond = beyond_names(self.index, [c.record_id for c in fused if c.dense is not None],
                                  qvecs, names)
            for c in fused:
                c.beyond_names = beyond.get(c.record_id)
        timer.mark("beyond_names")
        trace.meta = meta = self._record_meta([c.record_id for c in fused], version)
        fused = [c for c in fused if c.record_id in meta]  # deleted since the eligible set was read
        trace.fused = list(fused)  # the fused order, before freshness re-sorts the list
        # A search with a time range, an as-of time or a period its question names chose
        # its period: nothing decays.
        chosen = (request.since is not None or request.until is not None or request.as_of is not None
                  or bool(trace.periods))
        trace.freshness = apply_freshness(fused, meta, now, cfg.freshness, half_lives=self.half_lives,
                                          time_window=chosen)
        trace.flags["confidence"] = weighed = weighs(queries)
        if weighed:
            apply_confidence(fused, meta)
        if trace.periods:
            lifted = apply_periods(fused, meta, trace.periods, cfg.named_periods.boost)
            trace.flags["period_lifted"] = {"boost": cfg.named_periods.boost, "ids": lifted}
        timer.mark("freshness")  # and confidence, the other factor after fusion
        trace.flags["index_refresh"] = refresh
        return fused, eligible, scopes

    def _names(self, shape: QueryShape, timer: Timer, written: PendingQueries | None) -> Matrix | None:
        """The vectors of the question's names, when it names something a record carries
        and asks something about it (a question that is only a name has nothing left once
        the name is out); None otherwise. Encoding them is a stage of its own
        (``embed_names``, a cache hit for a name seen before or encoded beside the queries
        as ``written``) and counts as encoder time (``embed``) too."""
        if not (shape.asks and shape.name_groups) or shape.unknown_names:
            return None
        if written is not None:
            written.result()  # their vectors are in the embedder's cache once it is done
        names = self.embedder.embed_queries([" ".join(group) for group in shape.name_groups])
        timer.record("embed", timer.mark("embed_names"))
        return names

    def _eligible(self, scopes: list[Scope], request: SearchRequest, now: datetime,
                  version: int) -> EligibleSet:
        """The hard filter, reused while nothing it depends on changed.

        A set is exact while ``records_version`` is unchanged and no record in it reached
        its expiry (``valid_until``); grants are part of the key through ``scopes``. Agents
        search many times between writes, and at 50K records this saves the filter query
        and lets the lexical generator keep its eligible temp table.
        """
        key = (tuple(scopes), tuple(request.types or ()), request.since, request.until,
               request.include_history, request.as_of)
        cached = self._eligible_cache.get(key)
        if (cached is not None and cached.records_version == version
                and (cached.valid_until is None or now <= cached.valid_until)):
            self._eligible_cache.move_to_end(key)
            return cached
        eligible = self.store.eligible_ids(scopes, request.types, request.since, request.until,
                                           request.include_history, now, as_of=request.as_of)
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

    def _rerank(self, kept: list[Candidate], records: Mapping[str, Record], queries: list[str],
                decision: Decision, kinds: Mapping[str, str],
                tail: float) -> tuple[list[Candidate], RerankLog]:
        """The optional cross-encoder over the shortlist, with its fallback."""
        rcfg = self.config.reranker
        if not rcfg.enabled or not kept:
            return kept, RerankLog("disabled" if not rcfg.enabled else "applied", None, [], None)
        shortlist, rest = kept[: rcfg.candidates], kept[rcfg.candidates:]
        outcome = rerank_with_timeout(
            self.reranker, shortlist, {c.record_id: records[c.record_id].content for c in shortlist}, queries,
            timeout_ms=rcfg.timeout_ms, on_failure=rcfg.on_failure,
        )
        if outcome.status != "applied":
            # Fallback serves the fused order; where the cross-encoder was to be the only
            # relevance decision, the calibrated one it stood in for decides instead.
            if decision.deferred:
                undeferred = replace(decision, deferred=False, answered=decision.score >= decision.threshold)
                kept = gate(kept, undeferred, kinds, tail).kept
            return kept, RerankLog(outcome.status, None, [], outcome.error)
        omitted: list[list[Any]] = [[c.record_id, "outside reranker shortlist", None] for c in rest]
        assert rcfg.floor is not None  # load_config refuses an enabled reranker without one
        survivors, below = apply_reranker_floor(outcome.candidates, rcfg.floor)
        omitted += [list(row) for row in below]
        return survivors, RerankLog("applied", outcome.logged, omitted, None)

    def _explained(self, trace: SearchTrace, chosen: list[Any], records: Mapping[str, Record],
                   eligible: EligibleSet, scopes: list[Scope], k: int,
                   gate_empty: str | None) -> tuple[list[SearchResult], str]:
        """The results with their explanations and conflicts, and the text the model sees."""
        found = self.store.conflicts_among([p.candidate.record_id for p in chosen])
        conflicts = {p.candidate.record_id: [o for o in found.get(p.candidate.record_id, []) if o in eligible]
                     for p in chosen}
        dedup_notes = {kept_id: f"kept over {dropped} at cosine {cos:.2f}"
                       for dropped, kept_id, cos in trace.deduped_out}
        placements = [
            (p.candidate, records[p.candidate.record_id],
             dedup_notes.get(p.candidate.record_id, "kept"),
             f"fit at position {p.position} of {k}, {p.tokens_used} tokens used"
             + ("" if p.primary else " (authority counterpart, no primary slot)"))
            for p in chosen
        ]
        queries = list(trace.request.queries)
        as_of = trace.request.as_of
        explanations = explain(placements, queries, trace.rewritten, trace.rewrite_status, conflicts,
                               as_of=as_of)
        results = [SearchResult(record, candidate.score, ex)
                   for (candidate, record, _, _), ex in zip(placements, explanations, strict=True)]
        trace.returned = [(r.explanation, r.record.id) for r in results]
        gated = trace.gated
        if not results:
            trace.empty_reason = (gate_empty if gated is None or not gated.kept
                                  else _later_empty_reason(trace.rerank, trace.budget_out))
            if lacking := no_grant_reason(self.store, trace.principal, scopes):
                trace.empty_reason = f"{lacking}; {trace.empty_reason}"
        return results, render([(r.record, r.explanation) for r in results], queries, trace.rewritten,
                               trace.empty_reason, as_of=as_of)

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

    def _flags(self, k: int) -> dict[str, Any]:
        cfg = self.config.retrieval
        return {
            "embedding_model": self.embedder.name, "embedding_version": self.embedder.version,
            "rewrite_enabled": cfg.rewrite.enabled, "reranker_enabled": self.config.reranker.enabled,
            "reranker_mode": self.config.reranker.mode, "k": k, "token_budget": cfg.token_budget,
            "fusion": to_plain(cfg.fusion), "per_generator_k": cfg.per_generator_k,
            "link_sources": cfg.link_sources,
            "freshness": to_plain(cfg.freshness), "gate": to_plain(cfg.gate),
            "ranking": "fused_cross_encoder" if self.config.reranker.enabled else "fused",
        }


def _later_empty_reason(rerank: RerankLog | None, budget_out: list[str]) -> str:
    """Why a search whose gate kept records still returned none."""
    if rerank is not None and rerank.omitted and rerank.status == "applied":
        return "every gate survivor fell below the reranker floor or outside its shortlist"
    if budget_out:
        return "no survivor fit the token budget"
    return "no survivor remained after duplicate collapse"


def _summaries_last(kept: list[Candidate], kinds: Mapping[str, str]) -> list[Candidate]:
    """A session summary digests records that are searchable on their own: when both
    match, the records lead and the summary takes what room is left."""
    return sorted(kept, key=lambda c: kinds.get(c.record_id) == "session_summary")


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
