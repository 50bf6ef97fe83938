"""Whether two copies of a store answer searches alike: the check after a store moves.

The same sample of records (:func:`retold.store.sampling.sample_records`) is searched on
both stores through the search pipeline the tools use, each as a reader who may read the
record, with a query made of the record's own words: the name of the entity it is about,
its attribute and the start of its content. The stores' lexical indexes rank differently
(FTS5's bm25, and BM25 assembled from ``ts_rank`` on PostgreSQL), so the top results need
not be equal; what must hold is that a record the source store finds among its top ``k`` (itself, or a
record with exactly its text) the target finds too. The overlap of the two top lists is
reported alongside. See docs/decisions.md, "Moving a SQLite store into PostgreSQL".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from retold.models import Principal, SearchRequest
from retold.policy.grants import GrantSource, can_read
from retold.retrieve.retriever import SearchOutcome
from retold.store.sampling import SampledRecord

__all__ = ["SampleComparison", "SearchComparison", "compare_searches", "sample_query"]

Search = Callable[[Principal, SearchRequest], SearchOutcome]
_CONTENT_WORDS = 8  # enough of the content to name what the record says


@dataclass(frozen=True)
class SampleComparison:
    """One sampled record's search on both stores: the ids each returned, best first, and
    whether each found the record (itself, or a record with the very same text: a search
    keeps one of several identical memories, and which one depends on the rank order)."""

    record_id: str
    query: str
    source_ids: tuple[str, ...]
    target_ids: tuple[str, ...]
    found_in_source: bool
    found_in_target: bool

    @property
    def agrees(self) -> bool:
        """Both stores find the record, or neither does."""
        return self.found_in_source == self.found_in_target

    @property
    def overlap(self) -> float:
        """The share of the longer top list that both lists hold (1.0 when both are empty)."""
        longest = max(len(self.source_ids), len(self.target_ids))
        return 1.0 if not longest else len(set(self.source_ids) & set(self.target_ids)) / longest


@dataclass(frozen=True)
class SearchComparison:
    """Every sampled search, and how many sampled records no reader could search."""

    k: int
    samples: tuple[SampleComparison, ...]
    unreadable: int = 0

    @property
    def agreeing(self) -> int:
        return sum(s.agrees for s in self.samples)

    @property
    def found_in_both(self) -> int:
        return sum(s.found_in_source and s.found_in_target for s in self.samples)

    @property
    def lost(self) -> tuple[SampleComparison, ...]:
        """Records the source store finds and the target does not: what fails the check."""
        return tuple(s for s in self.samples if s.found_in_source and not s.found_in_target)

    @property
    def gained(self) -> int:
        """Records only the target finds (reported, not a failure)."""
        return sum(s.found_in_target and not s.found_in_source for s in self.samples)

    @property
    def mean_overlap(self) -> float:
        return sum(s.overlap for s in self.samples) / len(self.samples) if self.samples else 1.0

    @property
    def ok(self) -> bool:
        return not self.lost


def sample_query(sample: SampledRecord) -> str:
    """The words a user might search this record by: its entity's name, its attribute and
    the first words of its content."""
    parts = [sample.subject_name or "", (sample.attribute or "").replace("_", " "),
             " ".join(sample.content.split()[:_CONTENT_WORDS])]
    return " ".join(part for part in parts if part.strip())


def compare_searches(
    samples: Sequence[SampledRecord], grants: GrantSource, source: Search, target: Search, *, k: int = 5,
) -> SearchComparison:
    """Search for each sample on both stores and compare the top ``k`` ids. A sample whose
    reader may not read it under ``grants`` (the grant policy's rules) is counted, not
    searched."""
    compared: list[SampleComparison] = []
    unreadable = 0
    for sample in samples:
        reader = sample.reader
        principal = Principal(reader.agent_id, reader.user_id, None, reader.project_id)
        if not can_read(grants, principal, sample.scope):
            unreadable += 1
            continue
        query = sample_query(sample)
        tops = [search(principal, SearchRequest(queries=[query], k=k)).response.results[:k]
                for search in (source, target)]
        ids = [tuple(r.record.id for r in top) for top in tops]
        found = [any(r.record.id == sample.record_id or r.record.content == sample.content for r in top)
                 for top in tops]
        compared.append(SampleComparison(sample.record_id, query, ids[0], ids[1], found[0], found[1]))
    return SearchComparison(k, tuple(compared), unreadable)
