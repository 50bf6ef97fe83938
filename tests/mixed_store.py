"""A SQLite store with a realistic mix of rows, for the tests that move a store.

Written through the tools, the host, the hooks and an extraction, as a store in use would
be: confirmed statements, one superseded by a newer value, one erased, a conflict, a
shared project record, a pin, a search, a write stored without its vector (the encoder was
down), an ended and extracted session with its stages, summary and one record (sampled for
the extraction audit and answered), a profile block and a re-embed half staged. Every
table but ``migration_issues`` (only a legacy store has rows there) ends up holding rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from retold.clock import new_id, to_iso
from retold.ingest.extractor import FakeExtractor
from retold.ingest.reviewer import TableReviewer
from retold.models import CandidateRecord, ExtractionOutput, Principal, Scope, SessionSummary
from retold.quality.audit import answer_audit, sample_for_audit
from retold.store import EmbeddingFamily
from retold.store.audit import Verdicts
from retold.testing import AGENT, T0, TEST_GATE, FakeEmbedder, World, make_world
from retold.utility.decision import TurnDecision

__all__ = ["EMPTY_TABLES", "MixedStore", "build_mixed_store", "config_text"]

# Tables the mix leaves empty, and why: only a legacy store has unmapped rows.
EMPTY_TABLES = frozenset({"migration_issues"})
PROJECT = Scope("project", "atlas")


@dataclass(frozen=True)
class MixedStore:
    path: Path
    current_id: str  # Aditya's editor now (Helix)
    superseded_id: str  # what it was (Neovim)
    erased_id: str
    project_id: str
    last_seq: int
    records_version: int


def config_text() -> str:
    """A config for the CLI that opens the mixed store: the fake embedder's family and the
    test gate, as the world uses them."""
    embedder = FakeEmbedder()
    return (f"embedding:\n  model: fake\n  version: {embedder.version}\n  dims: {embedder.dims}\n"
            + yaml.safe_dump({"retrieval": {"gate": TEST_GATE}}))


def _write(world: World, principal: Principal, said: str, content: str, attribute: str,
           **extra: object) -> str:
    world.say("user", said, principal)
    out = world.rt.tools.call("memory_write", principal, {
        "type": "semantic", "content": content, "attribute": attribute,
        "source_kind": "user_statement", "evidence": said,
        "entities": [{"kind": "person", "name": "Aditya", "role": "about"}], **extra})
    assert "error" not in out, out
    return str(out["record_id"])


def _encoder_down(texts: list[str]) -> np.ndarray:
    raise RuntimeError("the encoder is down")


def build_mixed_store(tmp_path: Path) -> MixedStore:
    """The mixed store at ``tmp_path / "memory.sqlite"``, closed."""
    world = make_world(tmp_path)
    rt, p = world.rt, world.p
    old = _write(world, p, "My editor is Neovim, I use it for everything.",
                 "Aditya uses Neovim as his editor.", "editor")
    current = _write(world, p, "I switched my editor to Helix last week.",
                     "Aditya uses Helix as his editor.", "editor")
    _write(world, p, "I drink oat milk flat whites every morning.",
           "Aditya drinks oat milk flat whites.", "coffee_order")
    _write(world, p, "Please answer in British English.", "Aditya wants answers in British English.",
           "answer_language")
    erased = _write(world, p, "My locker code is 4417 at the gym.", "Aditya's gym locker code is 4417.",
                    "locker_code")
    tea = _write(world, p, "I never drink coffee after noon.", "Aditya never drinks coffee after noon.",
                 "coffee_cutoff")
    rt.store.add_conflict(tea, old)
    world.share(PROJECT, write=True)
    in_project = Principal(AGENT, "aditya", "s1", PROJECT.id)
    project = _write(world, in_project, "The atlas deploys go through the staging cluster first.",
                     "Atlas deploys go through the staging cluster first.", "deploy_process",
                     write_target="current_project")
    rt.tools.call("memory_search", p, {"queries": ["which editor does Aditya use?"]})
    embed = rt.embedder.embed_documents
    rt.embedder.embed_documents = _encoder_down  # type: ignore[method-assign]
    _write(world, p, "I cycle to work on Tuesdays.", "Aditya cycles to work on Tuesdays.", "commute")
    rt.embedder.embed_documents = embed  # type: ignore[method-assign]
    assert rt.host.pin(current, "the user asked to keep it")
    rt.profiles.for_session(p)
    # Host-issued memory's rows: one evaluated bundle and one decided turn.
    rt.store.record_bundle_result("0123456789abcdef", {"planner": "scripted"}, passed=True,
                                  evidence="the mixed store", by="tests")
    decision = TurnDecision(new_id(), to_iso(T0), AGENT, "aditya", "s1", 3,
                            "0123456789abcdef", "no_gap", gaps=[], timings_ms={"total": 1.5})
    rt.store.append_turn_decision(decision)
    rt.operations.erase_record(erased, "asked to forget", "ops")
    rt.store.stage_vectors([(current, np.ones(8, dtype=np.float32) / np.sqrt(8))],
                           EmbeddingFamily("other-model", "2", 8))
    rt.hooks.on_session_end(p)
    summary = SessionSummary("Aditya talked about his editor and his coffee.", [], [])
    morning = CandidateRecord(type="semantic", content="Aditya has coffee every morning.",
                              attribute="morning_routine", source_kind="user_statement",
                              evidence="I drink oat milk flat whites every morning.", evidence_turn=3,
                              entity_mentions=[], confidence=0.8)
    ran = rt.session_end.using(FakeExtractor(ExtractionOutput([morning], summary)), TableReviewer()).run("s1")
    assert ran.outcome == "extracted", ran
    # The extraction audit's sample of that run, answered.
    (sampled,) = sample_for_audit(rt.store, 0.0).added
    answer_audit(rt.store, sampled, Verdicts(True, True, False), "ops")
    rt.flush_search_log()
    assert rt.store.get_record(old).status == "superseded"  # type: ignore[union-attr]
    last_seq = max(r.seq or 0 for r in rt.store.find_records())
    version = rt.store.records_version()
    rt.close()
    return MixedStore(tmp_path / "memory.sqlite", current, old, erased, project, last_seq, version)
