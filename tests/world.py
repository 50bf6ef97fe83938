"""A small world for write-path tests: a real store file, fakes at the model boundaries."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retold import build_runtime, load_config
from retold.index.embedder import FakeEmbedder
from retold.ingest.equivalence import FakeJudge
from retold.ingest.ingestor import WriteRequest, WriteResult
from retold.models import EntityMention, Principal, Record, Scope
from retold.runtime import Runtime
from retold.util import ManualClock
from tests.factories import T0

AGENT = "research-agent"
ADITYA = Scope("user", "aditya")
TABLES = (
    "records", "records_fts", "embeddings", "entities", "entity_aliases", "record_entities",
    "record_conflicts", "events", "grants", "sessions", "session_turns", "search_log",
)


@dataclass
class World:
    rt: Runtime
    judge: FakeJudge
    embedder: FakeEmbedder
    clock: ManualClock
    p: Principal
    results: list[WriteResult] = field(default_factory=list)

    def say(self, role: str, text: str, principal: Principal | None = None) -> None:
        self.p = self.rt.hooks.on_turn(principal or self.p, role, text)

    def write(self, principal: Principal | None = None, origin: str = "tool", **fields: Any) -> WriteResult:
        fields.setdefault("type", "semantic")
        if "entities" in fields:
            fields["entities"] = tuple(
                m if isinstance(m, EntityMention) else EntityMention(*m) for m in fields["entities"]
            )
        result = self.rt.ingestor.write(principal or self.p, WriteRequest(**fields), origin=origin)  # type: ignore[arg-type]
        self.results.append(result)
        return result

    def record(self, record_id: str | None) -> Record:
        assert record_id is not None
        found = self.rt.store.get_record(record_id)
        assert found is not None
        return found

    def counts(self) -> dict[str, int]:
        with self.rt.store.snapshot() as conn:
            counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
        counts["records_version"] = self.rt.store.records_version()
        return counts

    def events(self, kind: str) -> list[dict[str, Any]]:
        return self.rt.store.events(kind=kind)


# Unit tests state the floors they rely on instead of inheriting the calibrated defaults.
TEST_GATE = {
    "dense_floor": {"semantic": 0.45, "episodic": 0.40, "procedural": 0.45, "session_summary": 0.50},
    "relative_floor": 0.5,
}


def make_world(tmp_path: Path, *, grant_personal: bool = True, **ingestion: Any) -> World:
    config = load_config(overrides={
        "store": {"path": str(tmp_path / "memory.sqlite")},
        "embedding": {"model": "fake"},
        "ingestion": ingestion,
        "retrieval": {"gate": TEST_GATE},
    })
    clock = ManualClock(T0)
    judge = FakeJudge()
    embedder = FakeEmbedder()
    rt = build_runtime(config, clock=clock, embedder=embedder, judge=judge)
    if grant_personal:
        rt.host.grant(AGENT, ADITYA, read=True, write=True)
    rt.host.provision_user("aditya", aliases=["Aditya"])
    principal = Principal(AGENT, "aditya", "s1", None)
    rt.hooks.on_session_start(principal)
    return World(rt, judge, embedder, clock, principal)
