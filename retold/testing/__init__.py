"""Test doubles at the model boundaries, shared by the tests and the benchmarks.

The fakes live next to the protocols they stand in for; this package gathers them in
one import, with a record factory and a small "world" (a real store file, a granted
agent, a provisioned user and an open session, with fakes for every model).
``retold.testing.anthropic_stub`` and ``retold.testing.openai_stub`` serve scripted
Anthropic Messages and OpenAI Chat Completions APIs on loopback so the real SDKs can be
driven without a network; ``retold.testing.langchain_chat`` and
``retold.testing.crewai_llm`` are scripted chat models for the framework adapters (the
stand-ins ``RETOLD_SCRIPTED_MODEL`` switches on).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from retold.clock import ManualClock, new_id
from retold.config import is_database_url, read_config
from retold.hosted import FakeCompletionClient
from retold.index.embedder import FakeEmbedder
from retold.index.reranker import FakeReranker, NoReranker
from retold.ingest.equivalence import ExactJudge, FakeJudge
from retold.ingest.extractor import FakeExtractor, ReplayExtractor
from retold.ingest.ingestor import WriteRequest, WriteResult
from retold.ingest.reviewer import TableReviewer
from retold.ingest.session import InProcessScheduler
from retold.models import EntityMention, Principal, Record, Scope
from retold.retrieve.rewrite import FakeRewriter, NoRewriter
from retold.runtime import Runtime, build_runtime
from retold.store.location import add_tenant
from retold.tenant import DEFAULT_TENANT
from retold.utility.admission import ScriptedJudge
from retold.utility.decision import Gap
from retold.utility.planner import ScriptedPlanner

__all__ = [
    "ADITYA",
    "AGENT",
    "T0",
    "TEST_GATE",
    "ExactJudge",
    "FakeCompletionClient",
    "Gap",
    "ScriptedJudge",
    "ScriptedPlanner",
    "FakeEmbedder",
    "FakeExtractor",
    "FakeJudge",
    "FakeReranker",
    "FakeRewriter",
    "InProcessScheduler",
    "ManualClock",
    "NoReranker",
    "NoRewriter",
    "ReplayExtractor",
    "TableReviewer",
    "World",
    "make_record",
    "make_world",
]

T0 = datetime(2026, 9, 3, 12, 0, tzinfo=UTC)
AGENT = "research-agent"
ADITYA = Scope("user", "aditya")

# Unit tests state the gate they rely on instead of inheriting the one fitted for MiniLM:
# a search answers once its closest record's cosine beyond the question's names reaches
# 0.4, or a record carrying the names holds every asked word (either makes the score 0.5),
# never for a question naming something unknown, and keeps the records scoring at least a
# fifth of the top one (three tenths for host-issued searches).
TEST_GATE: dict[str, object] = {
    "weights": {"beyond_names": 20.0, "asked_coverage": 8.0, "unknown_name": -40.0, "lead": 0.0},
    "bias": -8.0,
    "answer_at": {"tool": 0.5, "host": 0.5},
    "tail_fraction": {"tool": 0.2, "host": 0.3},
}


def make_record(**fields: Any) -> Record:
    """A valid confirmed semantic record in user:aditya, overridable field by field."""
    base = Record(
        id=new_id(),
        type="semantic",
        version=1,
        content="Aditya prefers concise technical explanations.",
        subject="ent_aditya/explanation_style",
        subject_entity_id=None,
        attribute="explanation_style",
        scope=Scope("user", "aditya"),
        source_kind="user_statement",
        source_ref="session:s1<turn:1>",
        creator_agent_id="research-agent",
        evidence="Keep answers concise.",
        created_at=T0,
        event_at=T0,
        expires_at=None,
        valid_from=None,
        valid_until=None,
        review_at=None,
        review_flagged_at=None,
        confidence=0.95,
        status="confirmed",
        supersedes_id=None,
        reinforcements=0,
        last_reinforced_at=None,
    )
    return replace(base, **fields)


@dataclass
class World:
    """A runtime over a real store file with fakes at every model boundary; ended sessions
    are recorded in ``rt.scheduler.scheduled`` and left for the test to extract."""

    rt: Runtime
    judge: FakeJudge
    embedder: FakeEmbedder
    clock: ManualClock
    p: Principal
    results: list[WriteResult] = field(default_factory=list)

    def say(self, role: str, text: str, principal: Principal | None = None) -> None:
        """Record one turn (and follow a session split)."""
        self.p = self.rt.hooks.on_turn(principal or self.p, role, text)

    def write(self, principal: Principal | None = None, origin: str = "tool", **fields: Any) -> WriteResult:
        """One explicit write; ``entities`` may be EntityMention or plain tuples."""
        fields.setdefault("type", "semantic")
        if "entities" in fields:
            fields["entities"] = tuple(
                m if isinstance(m, EntityMention) else EntityMention(*m) for m in fields["entities"]
            )
        result = self.rt.ingestor.write(principal or self.p, WriteRequest(**fields), origin=origin)  # type: ignore[arg-type]
        self.results.append(result)
        return result

    def share(self, scope: Scope, *, write: bool = False, agent: str = AGENT,
              user_id: str | None = None) -> None:
        """Grant ``agent`` a shared (project or org) scope and make the user a member, the
        two things a session needs before it reads (or writes) that scope; ``user_id``
        defaults to the world's own user."""
        self.rt.host.grant(agent, scope, read=True, write=write)
        self.rt.host.add_member(scope, user_id or self.p.user_id)

    @property
    def target(self) -> str:
        """What the world's store opens: its file path, or its PostgreSQL URL (with any
        password, unlike ``rt.store.path``); what ``--store`` or another runtime is given."""
        return self.rt.config.store.target

    def record(self, record_id: str | None) -> Record:
        assert record_id is not None
        found = self.rt.store.get_record(record_id)
        assert found is not None
        return found

    def counts(self) -> dict[str, int]:
        """Rows per table, once every search so far has its log row written."""
        self.rt.flush_search_log()
        return self.rt.store.row_counts()

    def events(self, kind: str) -> list[dict[str, Any]]:
        return self.rt.store.events(kind=kind)


def make_world(tmp_path: Path, *, grant_personal: bool = True, store: str | None = None,
               tenant: str = DEFAULT_TENANT, pack: str | Path | None = None,
               config: Mapping[str, Any] | None = None, **ingestion: Any) -> World:
    """A store under ``tmp_path`` (or at ``store``, a path or a PostgreSQL URL) with
    ``research-agent`` granted ``user:aditya``, the user provisioned, and session ``s1``
    open, all in ``tenant`` (added when missing); ``pack`` is the memory pack file
    (``tenancy.pack``), ``config`` overrides further config blocks and ``ingestion``
    overrides that one."""
    embedder = FakeEmbedder()
    target = store or str(tmp_path / "memory.sqlite")
    # The config names the fake's own family, as the store records it, so a CLI or worker
    # given this config opens the world's store without an embedding mismatch.
    settings = read_config(overrides={
        "store": {"url" if is_database_url(target) else "path": target},
        "embedding": {"model": "fake", "version": embedder.version, "dims": embedder.dims},
        "ingestion": ingestion,
        "retrieval": {"gate": TEST_GATE},
        "tenancy": {"pack": None if pack is None else str(pack)},
    })
    if config:
        settings = settings.replace(config)
    clock = ManualClock(T0)
    judge = FakeJudge()
    # No hosted-model key reaches a test world, whatever the environment holds.
    add_tenant(target, tenant)
    rt = build_runtime(settings, clock=clock, embedder=embedder, judge=judge,
                       scheduler=InProcessScheduler(), environ={}, tenant=tenant)
    if grant_personal:
        rt.host.grant(AGENT, ADITYA, read=True, write=True)
    rt.host.provision_user("aditya", aliases=["Aditya"])
    principal = Principal(AGENT, "aditya", "s1", None)
    rt.hooks.on_session_start(principal)
    return World(rt, judge, embedder, clock, principal)
