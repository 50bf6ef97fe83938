"""The foundation smoke behind ``retold demo``.

Until the worker pipeline exists, the demo shows what the foundation does end to end:
migrate a fresh store, embed a few memories with the configured model, store their
vectors, load the vector index from SQLite and answer two dense queries with it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from retold.models import Record, Scope
from retold.runtime import Runtime
from retold.util import Timer, new_id

__all__ = ["SMOKE_MEMORIES", "SmokeResult", "run_smoke"]

SMOKE_MEMORIES = (
    "Aditya prefers concise technical explanations.",
    "The project uses Conventional Commits for every commit message.",
    "Run the benchmark with a warm embedder, then record per-stage timings.",
    "On 2026-08-12 vector-only retrieval missed exact error messages.",
)
SMOKE_QUERIES = ("how should answers to Aditya be written", "commit message format")


@dataclass(frozen=True)
class SmokeResult:
    answers: dict[str, list[tuple[str, float]]]  # query -> [(content, cosine), ...]
    index_rows: int
    timings_ms: dict[str, float]


def run_smoke(rt: Runtime, say: Callable[[str], None] = print) -> SmokeResult:
    """Write the smoke memories into ``rt``'s store and read them back by meaning."""
    timer = Timer()
    scope = Scope("user", "demo")
    report = rt.store.migrate()
    say(f"store {rt.store.path}: schema version {report.version}")
    vectors = rt.embedder.embed_documents(list(SMOKE_MEMORIES))
    timer.mark("embed")
    now = rt.clock.now()
    contents: dict[str, str] = {}
    with rt.store.atomic():
        for content, vec in zip(SMOKE_MEMORIES, vectors, strict=True):
            record = Record(
                id=new_id(), type="semantic", version=1, content=content, subject="-",
                subject_entity_id=None, attribute=None, scope=scope, source_kind="system",
                source_ref="demo", creator_agent_id="demo", evidence=None, created_at=now,
                event_at=now, expires_at=None, valid_from=None, valid_until=None,
                review_at=None, review_flagged_at=None, confidence=0.9, status="confirmed",
                supersedes_id=None, reinforcements=0, last_reinforced_at=None,
            )
            rt.store.insert_record(record)
            rt.store.put_embedding(record.id, rt.embedder.name, rt.embedder.version, vec)
            contents[record.id] = content
    timer.mark("write")
    outcome = rt.refresh_index()
    timer.mark("index")
    say(f"wrote {len(contents)} memories; vector index {outcome}: {len(rt.index)} rows")
    eligible = set(rt.store.eligible_ids([scope]))
    answers: dict[str, list[tuple[str, float]]] = {}
    for query in SMOKE_QUERIES:
        hits = rt.index.search(rt.embedder.embed_queries([query])[0], eligible, 1)
        answers[query] = [(contents.get(rid, rid), score) for rid, score in hits]
        for content, score in answers[query]:
            say(f"  {query!r} -> {content!r} (cosine {score:.2f})")
    timer.mark("search")
    return SmokeResult(answers, len(rt.index), timer.as_dict())
