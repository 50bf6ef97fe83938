"""The candidate generators of the read path: dense, lexical, entity, and the link hop.

Each generator is restricted to the eligible set before it applies its limit, and each
returns its list best first for fusion; the link hop starts from the best records the
other three found. The SQL lives in :mod:`retold.store.search`; this
module turns queries into terms, n-grams and vectors and scores what the store returns.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from retold.index.vector import VectorIndex
from retold.models import ACTIVE_STATUSES, LexicalMatch, LexicalTerm, QueryShape, Scope
from retold.names import normalize_alias
from retold.retrieve.stemmer import porter_stem
from retold.retrieve.terms import QueryTerm, alias_ngrams, fts_tokens, name_groups, query_terms
from retold.store import EligibleSet, Store

__all__ = [
    "LexicalHit",
    "dense_candidates",
    "entity_candidates",
    "fts_match_expression",
    "lexical_candidates",
    "linked_candidates",
    "query_shape",
    "resolve_entity_aliases",
    "written_name_groups",
]


# -- dense ------------------------------------------------------------------------------


def dense_candidates(
    index: VectorIndex, qvecs: np.ndarray, eligible: EligibleSet, k: int
) -> list[tuple[str, float]]:
    """``(record_id, cosine)`` of the ``k`` best eligible records over all queries.

    The query vectors go to the index as one (q, dims) matrix: each record keeps its best
    cosine over the queries and the cap applies to that union, not to each query's own
    list.
    """
    queries = np.asarray(qvecs, dtype=np.float32)
    if queries.ndim == 1:
        queries = queries[None, :]
    if k <= 0 or queries.shape[0] == 0 or len(eligible) == 0:
        return []
    return index.search(queries, eligible, k)


# -- lexical ----------------------------------------------------------------------------


@dataclass(frozen=True)
class LexicalHit:
    """One lexical candidate: 1-based rank in bm25 order, SQLite's bm25 (lower is
    better), the matched terms of the query that covered it best, and the indexed
    fields (content, subject, aliases) they were matched in."""

    record_id: str
    rank: int
    bm25: float
    match: LexicalMatch
    fields: tuple[str, str, str] = ("", "", "")


def fts_match_expression(terms: Sequence[QueryTerm]) -> str:
    """An FTS5 expression OR-ing ``terms``; every term is a quoted phrase.

    Term tokens hold only letters and digits, so quoting makes every one a literal:
    FTS5 syntax in user text (``"``, ``*``, ``(``, ``NEAR``, ``-``, ``:``) can never
    reach the parser as an operator. A multi-token term (``"bge m3"``) is a phrase,
    matching only where its tokens are adjacent in one column.
    """
    values = dict.fromkeys(term.value for term in terms if term.tokens)
    return " OR ".join(f'"{value}"' for value in values)


def lexical_candidates(
    store: Store,
    queries: list[str],
    eligible: EligibleSet,
    k: int,
    entity_aliases: frozenset[str] = frozenset(),
    *,
    match_first: int | None = None,
) -> list[LexicalHit]:
    """The ``k`` best eligible FTS matches for all queries, with per-query coverage.

    The distinct terms of every query are OR-ed into one bm25-ranked FTS query
    (weights content 1, subject 2, aliases 3) restricted to ``eligible`` before the
    limit. Each returned record then gets its term coverage computed separately for every
    query, and keeps the query with the best fraction: its matched terms, flagged as
    identifiers and as entity aliases (``entity_aliases`` are alias norms), and that
    query's total term count for the gate. A query without surviving terms contributes
    nothing; when no query has one, FTS is never touched. Past ``match_first`` hits (all
    when None) only the rank and BM25 score are kept: fusion reads them for the channel's
    zero, and working out their terms would cost time for nothing.
    """
    terms = _query_terms(tuple(queries), entity_aliases)
    if not terms.per_query or k <= 0:
        return []
    match = fts_match_expression(_weighted(store, [term for query in terms.per_query for term in query]))
    hits: list[LexicalHit] = []
    matched = k if match_first is None else match_first
    for rank, row in enumerate(store.fts_candidates(match, eligible, k), start=1):
        text = (row.content, row.subject, row.aliases)
        found = terms.best_match(text) if rank <= matched else LexicalMatch((), 0)
        hits.append(LexicalHit(row.record_id, rank, row.bm25, found, text))
    return hits


# Below this many indexed rows every match is cheap, and no term is left out of the match.
WEIGHTLESS_MIN_ROWS = 1000


def _weighted(store: Store, terms: list[QueryTerm]) -> list[QueryTerm]:
    """``terms`` without the single words that occur in more than half the indexed rows.

    bm25 weighs a term by its inverse document frequency, which SQLite's FTS5 floors at
    almost nothing once a term is in half the rows or more: such a term moves no score, yet
    matching on it makes every row that holds it a candidate to score and sort (a project's
    name in a scope about that project, the speaker in a transcript). Left out of the match,
    it still counts where it matters: in each candidate's term coverage, which is computed
    from the query's own terms. Phrases of several words are rare by construction and kept;
    when every term is that common, the match keeps them all rather than find nothing.
    """
    singles = sorted({term.stems[0] for term in terms if len(term.tokens) == 1})
    if not singles:
        return terms
    rows, counts = store.fts_document_counts(singles, min_rows=WEIGHTLESS_MIN_ROWS)
    if rows < WEIGHTLESS_MIN_ROWS:
        return terms
    weightless = {stem for stem, docs in counts.items() if 2 * docs >= rows}
    kept = [term for term in terms if not (len(term.tokens) == 1 and term.stems[0] in weightless)]
    return kept or terms


@functools.lru_cache(maxsize=256)
def _query_terms(queries: tuple[str, ...], entity_aliases: frozenset[str]) -> _QueryTerms:
    """The flagged terms of one search's queries, built once per distinct search (agents
    repeat queries)."""
    return _QueryTerms(list(queries), entity_aliases)


class _QueryTerms:
    """Every query's terms, flagged as names or not."""

    def __init__(self, queries: list[str], entity_aliases: frozenset[str]) -> None:
        self.per_query = [terms for terms in (_terms(query) for query in queries) if terms]
        alias_norms = {normalize_alias(alias) for alias in entity_aliases}
        alias_tokens = {tuple(fts_tokens(alias, reduce_contractions=False)) for alias in entity_aliases}
        self.flags = {term.value: _flagged(term, alias_tokens, alias_norms)
                      for terms in self.per_query for term in terms}
        self.names = [sum(self.flags[term.value].is_name for term in terms) for terms in self.per_query]

    def best_match(self, text: tuple[str, str, str]) -> LexicalMatch:
        """The terms of the query that covers ``text`` (content, subject, aliases) best."""
        fields = _field_tokens(text)
        best: tuple[float, int] = (-1.0, 0)
        best_terms: list[QueryTerm] = []
        best_total, best_names = len(self.per_query[0]), self.names[0]
        for terms, name_count in zip(self.per_query, self.names, strict=True):
            matched = [term for term in terms if fields.covers(term)]
            # Best fraction first; on a tie, the query that matched more terms.
            key = (len(matched) / len(terms), len(matched))
            if key > best:
                best, best_terms, best_total, best_names = key, matched, len(terms), name_count
        return LexicalMatch(tuple(self.flags[term.value] for term in best_terms), best_total, best_names)


def _flagged(term: QueryTerm, alias_tokens: set[tuple[str, ...]], alias_norms: set[str]) -> LexicalTerm:
    is_alias = term.tokens in alias_tokens or normalize_alias(term.value) in alias_norms
    # A bare number is part of a name ("Acme North 2"), never what the question asks.
    return LexicalTerm(term.value, term.is_identifier, is_alias, term.is_proper or term.value.isdigit())


def query_shape(
    queries: list[str], hits: Sequence[LexicalHit], entity_aliases: frozenset[str] = frozenset()
) -> QueryShape:
    """Whether the queries ask about something beyond names, and which names nobody has.

    A name (identifier or proper noun) is known when a lexical candidate contains it or a
    resolved entity alias holds it. The lexical candidates are the best bm25 matches over
    every term, and a name is a rare term, so a readable record that carries it ranks among
    them. Unknown names count only when every query has one: one query about a stranger
    among paraphrases about known people still has something to find. A bare number is
    never an unknown name: dates and counts are asked about, not stored as names. The
    names are grouped as they stand in the question (:func:`name_groups`).
    """
    per_query = [(query, terms) for query, terms in ((q, _terms(q)) for q in queries) if terms]
    if not per_query:
        return QueryShape()
    alias_norms = {normalize_alias(alias) for alias in entity_aliases}
    alias_tokens = {tuple(fts_tokens(alias, reduce_contractions=False)) for alias in entity_aliases}
    alias_words = {token for tokens in alias_tokens for token in tokens}
    seen = [_field_tokens(hit.fields) for hit in hits]
    asks = False
    unknown: dict[str, None] = {}
    groups: dict[tuple[str, ...], None] = {}
    every_query_unknown = True
    for query, terms in per_query:
        missing = []
        names = {term for term in terms if _flagged(term, alias_tokens, alias_norms).is_name}
        groups.update(dict.fromkeys(name_groups(query, terms, names.__contains__)))
        for term in terms:
            if term not in names:
                asks = True
            elif not (term.value[:1].isdigit() or set(term.tokens) <= alias_words
                      or any(_holds(fields.sequences, fields.words, spelling)
                             for fields in seen for spelling in _spellings(term.tokens))):
                missing.append(term.value)
        every_query_unknown = every_query_unknown and bool(missing)
        unknown.update(dict.fromkeys(missing))
    return QueryShape(asks, tuple(unknown) if every_query_unknown else (), tuple(groups))


def written_name_groups(queries: list[str]) -> list[str]:
    """The names the queries write as names (identifiers, capitalised words, numbers),
    grouped as :func:`query_shape` groups them and joined as its names are encoded: the
    names a search will most likely ask the encoder for, known before the store is read.
    Entity aliases written in lower case are not here; they are found by the read."""
    out: dict[str, None] = {}
    for query in queries:
        terms = _terms(query)
        written = {term for term in terms if term.is_identifier or term.is_proper or term.value.isdigit()}
        out.update((" ".join(group), None) for group in name_groups(query, terms, written.__contains__))
    return list(out)


def _spellings(tokens: tuple[str, ...]) -> list[tuple[str, ...]]:
    """A name as written, and in the singular when it ends in s: "EPs" or "Teslas" in a
    question is known where a record says "EP" or "Tesla"."""
    last = tokens[-1] if tokens else ""
    if len(last) > 2 and last.endswith("s"):
        return [tokens, (*tokens[:-1], last[:-1])]
    return [tokens]


@functools.lru_cache(maxsize=1024)
def _terms(query: str) -> tuple[QueryTerm, ...]:
    """A query's terms, parsed once per search although the lexical generator and the
    query shape both read them (and agents repeat queries)."""
    return tuple(query_terms(query))


@functools.lru_cache(maxsize=8192)
def _field_tokens(fields: tuple[str, str, str]) -> _FieldTokens:
    """Tokenised fields, cached by their text: the same records come back search after
    search, and tokenising them again was a third of the lexical stage."""
    return _FieldTokens(fields)


class _FieldTokens:
    """The token sequences of one row's indexed fields, for term coverage.

    Each field is kept both as FTS5 indexed it and with contractions reduced as query
    terms are, so "aditya's" in a record covers the term "aditya" either way; each
    sequence also in Porter stems, which plain words are compared by.
    """

    def __init__(self, fields: Sequence[str]) -> None:
        self.sequences: list[list[str]] = []
        for text in fields:
            raw = fts_tokens(text, reduce_contractions=False)
            reduced = fts_tokens(text)
            self.sequences.append(raw)
            if reduced != raw:
                self.sequences.append(reduced)
        self.words = {token for sequence in self.sequences for token in sequence}
        self.stemmed = [[porter_stem(token) for token in sequence] for sequence in self.sequences]
        self.stems = {stem for sequence in self.stemmed for stem in sequence}

    def covers(self, term: QueryTerm) -> bool:
        """Whether the row holds ``term``: identifiers and names as spelled, plain words
        by stem, so "deploying" covers "deploys" but ``Deploys`` only "deploys"."""
        if term.is_exact:
            return _holds(self.sequences, self.words, term.tokens)
        return _holds(self.stemmed, self.stems, term.stems)


def _holds(sequences: list[list[str]], words: set[str], tokens: tuple[str, ...]) -> bool:
    """A single token anywhere; several only contiguous within one sequence."""
    if len(tokens) == 1:
        return tokens[0] in words
    if not tokens or not all(token in words for token in tokens):
        return False
    width = len(tokens)
    for sequence in sequences:
        for start in range(len(sequence) - width + 1):
            if tuple(sequence[start : start + width]) == tokens:
                return True
    return False


# -- entities ---------------------------------------------------------------------------


def resolve_entity_aliases(
    store: Store,
    entities: list[str] | None,
    queries: list[str],
    scopes: Sequence[Scope],
    max_alias_tokens: int,
    broad_links: int | None = None,
    now: datetime | None = None,
) -> dict[str, list[str]]:
    """``{alias_norm: [entity_id, ...]}`` for every alias the request names.

    ``broad_links``: an entity found only in the query text that links more records than
    this is not a discriminating mention (the user's own person entity is the subject of
    nearly every personal memory) and is left out; an entity named in ``entities`` always
    counts. Only records active at ``now`` count (default: the store's clock). See
    docs/decisions.md "Broad entities in query text".

    The explicit ``entities`` strings are normalised whole; query text contributes every
    n-gram of up to ``max_alias_tokens`` words (possessives and contractions removed).
    All candidates go to the store in ONE batched lookup, not one per n-gram. Only
    entities in ``scopes`` count; a merged entity is followed to its survivor, and only
    active survivors in a readable scope are returned, each id once per alias.
    """
    candidates: dict[str, None] = {}
    explicit: set[str] = set()
    for name in entities or []:
        alias = normalize_alias(name)
        if alias:
            candidates[alias] = None
            explicit.add(alias)
    for query in queries:
        candidates.update(dict.fromkeys(alias_ngrams(query, max_alias_tokens)))
    if not candidates or not scopes:
        return {}
    readable = set(scopes)
    found = store.entities_by_aliases(
        list(candidates), scopes=scopes, statuses=(*ACTIVE_STATUSES, "merged")
    )
    out: dict[str, list[str]] = {}
    for alias, hits in found.items():
        ids: dict[str, None] = {}
        for entity in hits:
            survivor = store.follow_merges(entity) if entity.merged_into else entity
            if survivor.status in ACTIVE_STATUSES and survivor.scope in readable:
                ids[survivor.id] = None
        if ids:
            out[alias] = list(ids)
    out = _longest_mentions(out, explicit)
    if broad_links is not None:
        implicit = [eid for alias, ids in out.items() if alias not in explicit for eid in ids]
        counts = store.link_counts(implicit, broad_links, now) if implicit else {}
        out = {alias: kept for alias, ids in out.items()
               if (kept := [e for e in ids if alias in explicit or counts.get(e, 0) <= broad_links])}
    return out


def _longest_mentions(found: dict[str, list[str]], explicit: set[str]) -> dict[str, list[str]]:
    """Drop a query-text alias inside a longer one that also matched.

    "Acme North 2" in a question also contains the n-gram "acme north", another entity's
    name; the user named the longer one, so the shorter match is not a mention.
    """
    spans = {alias: f" {alias} " for alias in found if alias not in explicit}
    return {alias: ids for alias, ids in found.items()
            if alias in explicit or not any(len(other) > len(alias) and spans[alias] in padded
                                            for other, padded in spans.items())}


def entity_candidates(
    store: Store, alias_matches: dict[str, list[str]], eligible: EligibleSet, k: int
) -> list[tuple[str, str]]:
    """``(record_id, entity_id)`` of the ``k`` best eligible records linked to the
    resolved entities: ``about`` before ``mentions``, then most recent first; the
    eligible restriction applies before the limit, so ineligible records never crowd
    out eligible ones."""
    entity_ids = list(dict.fromkeys(eid for ids in alias_matches.values() for eid in ids))
    if not entity_ids or k <= 0:
        return []
    return store.records_for_entities(entity_ids, eligible, k)


# -- link hop ---------------------------------------------------------------------------

# An entity linked to this many records or more is no second hop (the user, a large
# account): a relative or a colleague has a handful.
_BROAD = 50


def linked_candidates(
    store: Store, sources: Sequence[str], eligible: EligibleSet, k: int
) -> list[tuple[str, str]]:
    """``(record_id, via)`` of up to ``k`` eligible records about the entities that the
    ``sources`` records mention, newest first.

    "What does Ayla's brother do for work?" finds "Ayla's brother is Quentin", which
    mentions Quentin; the answer, "Quentin works as a firefighter", shares neither a name
    nor much meaning with the question, so no other channel ranks it. This fourth channel
    does: it follows the links the best candidates of the other three carry.
    """
    if not sources or k <= 0:
        return []
    hits: list[tuple[str, str]] = []
    seen: set[str] = set()  # a record two sources reach counts once, for the first
    # Fetched past k: some of them are not eligible, and those never count.
    for record_id, via in store.records_about_mentioned(sources, 4 * k, _BROAD):
        if record_id in eligible and record_id not in seen:
            seen.add(record_id)
            hits.append((record_id, via))
            if len(hits) == k:
                break
    return hits
