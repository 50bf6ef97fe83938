"""The pack's governance keys that act on stored records: ``governance.erasure`` (what an
erase takes beside the record) and ``retold pack apply`` (re-classifying and re-masking
what was written under an older pack)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from retold.cli import main
from retold.config import is_database_url
from retold.ingest.extractor import FakeExtractor
from retold.ingest.reviewer import TableReviewer
from retold.models import ExtractionOutput, Principal, SessionSummary
from retold.testing import AGENT, World, make_world
from tests.sql import fts_ids, rows, stored_bytes, tables_holding

CANARY = "zq-canary-41d7"
Worlds = Callable[..., World]


@pytest.fixture
def tenant(tmp_path: Path, store_target: str) -> Iterator[Worlds]:
    """``tenant(pack_yaml)``: tenant acme on the test store under that pack."""
    opened: list[World] = []

    def make(pack_yaml: str) -> World:
        pack = tmp_path / "packs.yaml"
        pack.write_text(pack_yaml, encoding="utf-8")
        world = make_world(tmp_path, store=store_target, tenant="acme", pack=pack)
        opened.append(world)
        return world

    yield make
    for world in opened:
        world.rt.close()


@pytest.fixture
def quiet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A working folder with no config file and no RETOLD_* variables."""
    for name in ("RETOLD_CONFIG", "RETOLD_TENANT", "RETOLD_STORE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


def _holds(world: World, text: str) -> bool:
    """Whether ``text`` is anywhere in the store: the SQLite file and its WAL, or any row
    of any PostgreSQL table."""
    target = world.target
    if is_database_url(target):
        return bool(tables_holding(target, text))
    return text.lower().encode() in stored_bytes(world.rt.store.path)  # the tenant's own file


# -- governance.erasure ---------------------------------------------------------------------------


def _plant(world: World) -> str:
    """A record holding the canary, written in session s1 (whose transcript never says it),
    a summary of s1 restating it, and a later search that returned both."""
    world.say("user", "Please remember my locker code for the gym, I keep forgetting it.")
    written = world.write(type="semantic", content=f"Aditya's gym locker code is {CANARY}.",
                          attribute="locker_code", source_kind="user_statement",
                          evidence="remember my locker code for the gym")
    assert written.ok and written.record_id, written.note
    world.say("assistant", "Noted.")
    world.rt.hooks.on_session_end(world.p)
    summary = SessionSummary(f"Aditya shared his gym locker code {CANARY}.", [], [])
    ran = world.rt.session_end.using(FakeExtractor(ExtractionOutput([], summary)), TableReviewer()).run("s1")
    assert ran.outcome == "extracted", ran
    later = Principal(AGENT, "aditya", "s2", None)
    world.rt.hooks.on_session_start(later)
    found = world.rt.tools.call("memory_search", later, {"queries": [f"gym locker code {CANARY}"]})
    assert {r["id"] for r in found["results"]} >= {written.record_id}
    return written.record_id


def test_a_cascading_erase_leaves_the_canary_in_no_table(tenant: Worlds) -> None:
    world = tenant("default:\n  governance: {erasure: cascade_to_derived}\n")
    record_id = _plant(world)
    assert _holds(world, CANARY)
    erased = world.rt.operations.erase_record(record_id, "asked to")
    assert erased.counts["summaries"] == 1 and erased.counts["search_logs"] >= 1
    assert not _holds(world, CANARY)
    assert world.events("record.erased")[-1]["payload"]["mode"] == "cascade_to_derived"


def test_a_record_only_erase_keeps_the_summary_and_the_search_log(tenant: Worlds) -> None:
    world = tenant("default:\n  governance: {erasure: record_only}\n")
    record_id = _plant(world)
    erased = world.rt.operations.erase_record(record_id, "asked to")
    assert "summaries" not in erased.counts
    assert world.record(record_id).content == ""
    kept = world.rt.store.find_records(source_kind="session_summary", source_ref="session:s1")
    assert [CANARY in r.content for r in kept] == [True]
    logged = rows(world.rt.store, "SELECT request FROM search_log WHERE session_id = 's2'")
    assert any(CANARY in str(request) for (request,) in logged)


@pytest.mark.parametrize("mode", ["cascade_to_derived", "record_only"])
def test_erasing_a_session_takes_its_summary_only_when_the_pack_cascades(tenant: Worlds, mode: str) -> None:
    world = tenant(f"default:\n  governance: {{erasure: {mode}}}\n")
    _plant(world)
    world.rt.operations.erase_session("s1", "asked to")
    summaries = world.rt.store.find_records(source_kind="session_summary", source_ref="session:s1")
    if mode == "cascade_to_derived":
        assert [(r.status, r.content) for r in summaries] == [("deleted", "")]
    else:
        assert [CANARY in r.content for r in summaries] == [True]


# -- retold pack apply ----------------------------------------------------------------------------

SSN = "Aditya's SSN is 123-45-6789."
REDACT = ("default:\n  governance:\n    sensitivity_classes:\n      - none\n"
          "      - {name: pii, decided_by: pattern, pattern: '\\b\\d{3}-\\d{2}-\\d{4}\\b'}\n"
          "    redact_before_embedding: [pii]\n")


def _apply(world: World, *flags: str, capsys: pytest.CaptureFixture[str]) -> str:
    config = Path(world.rt.config.tenancy.pack or "").parent / "apply-config.yaml"
    fake = world.embedder  # the world's embedding family, so the command opens its store
    config.write_text(f"embedding: {{model: fake, version: {fake.version}, dims: {fake.dims}}}\n"
                      f"tenancy: {{pack: {world.rt.config.tenancy.pack}}}\n", encoding="utf-8")
    code = main(["pack", "apply", "--tenant", "acme", "--store", world.target, "--config", str(config),
                 *flags])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out.strip()


def test_pack_apply_masks_what_a_changed_pack_redacts(tenant: Worlds, quiet: None,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    world = tenant("default: {}\n")
    ssn = world.write(type="semantic", content=SSN, attribute="ssn").record_id
    world.write(type="semantic", content="Aditya lives in Berlin.", attribute="city")
    assert fts_ids(world.rt.store, "6789") == {ssn}
    Path(world.rt.config.tenancy.pack or "").write_text(REDACT, encoding="utf-8")

    dry = _apply(world, capsys=capsys)
    assert dry == ("tenant acme (dry run, nothing written; --yes applies it): 2 records re-classified, "
                   "1 changed class, 1 newly masked, 0 unmasked, 0 masked differently, 1 to re-embed")
    assert (world.record(ssn).sensitivity, world.record(ssn).redacted_content) == ("none", None)

    done = _apply(world, "--yes", capsys=capsys)
    assert done.endswith("2 records re-classified, 1 changed class, 1 newly masked, 0 unmasked, "
                         "0 masked differently, 1 re-embedded")
    record = world.record(ssn)
    assert (record.sensitivity, record.redacted_content) == ("pii", "Aditya's SSN is [pii].")
    assert record.content == SSN  # the reader still gets the raw text
    assert fts_ids(world.rt.store, "6789") == set() and fts_ids(world.rt.store, "SSN") == {ssn}
    stored = rows(world.rt.store, "SELECT vector FROM embeddings WHERE record_id = ?", ssn)[0][0]
    masked = world.embedder.embed_documents(["Aditya's SSN is [pii]."])[0]
    assert np.allclose(np.frombuffer(bytes(stored), dtype=np.float32), masked, atol=1e-6)
    assert world.events("pack.applied")[-1]["payload"]["counts"]["newly_masked"] == 1

    # Applied again, nothing changes; a pack that drops the mask unmasks and re-embeds.
    assert _apply(world, "--yes", capsys=capsys).endswith("0 newly masked, 0 unmasked, 0 masked differently, "
                                                           "0 re-embedded")
    Path(world.rt.config.tenancy.pack or "").write_text("default: {}\n", encoding="utf-8")
    assert _apply(world, "--yes", capsys=capsys).endswith("1 changed class, 0 newly masked, 1 unmasked, "
                                                           "0 masked differently, 1 re-embedded")
    assert world.record(ssn).redacted_content is None and fts_ids(world.rt.store, "6789") == {ssn}


def test_pack_apply_refuses_another_pack_file_in_one_line(quiet: None, capsys: pytest.CaptureFixture[str],
                                                          tmp_path: Path) -> None:
    assert main(["pack", "apply", "--pack", str(tmp_path / "p.yaml")]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "tenancy.pack" in err
    assert main(["pack", "show", "--yes"]) == 1
    assert "takes no --yes" in capsys.readouterr().err
