"""``retold export`` and ``import`` move one scope's memory between stores: SQLite to
PostgreSQL and back gives the same file and the same searches; an import goes through the
write path's checks (grants, credentials, entities resolved against the target), lands
provisional unless confirmed, changes nothing the second time, refuses a newer file in one
line and reports a bad line by its number while the rest lands."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from retold.cli import main
from retold.cli.common import EXIT_REFUSED
from retold.clock import ManualClock
from retold.config import is_database_url, read_config
from retold.ingest.equivalence import FakeJudge
from retold.ingest.extractor import FakeExtractor
from retold.ingest.reviewer import TableReviewer
from retold.models import ExtractionOutput, Principal, Scope, SessionSummary
from retold.portable.lines import ImportRefused
from retold.runtime import Runtime, build_runtime
from retold.store.migrations import LATEST
from retold.testing import AGENT, T0, TEST_GATE, FakeEmbedder, InProcessScheduler, World, make_world
from tests.mixed_store import config_text
from tests.unit.tools.test_handlers import tools, user_fact

ADITYA = Scope("user", "aditya")
P = Principal(AGENT, "aditya", None, None)


def _export(rt: Runtime, scope: Scope = ADITYA, **options: bool) -> list[str]:
    out = io.StringIO()
    rt.operations.export(scope, out, include_history=True, **options)
    return out.getvalue().splitlines()


def _body(lines: list[str]) -> list[dict[str, Any]]:
    """Every line but the header's export time."""
    rows = [json.loads(line) for line in lines]
    rows[0].pop("exported_at")
    return rows


def _runtime(target: str | Path, *, grant: bool = True) -> Runtime:
    """A runtime as the test world builds one, on any store; the agent may write Aditya's
    scope there."""
    embedder = FakeEmbedder()
    config = read_config(overrides={
        "store": {"url" if is_database_url(str(target)) else "path": str(target)},
        "embedding": {"model": "fake", "version": embedder.version, "dims": embedder.dims},
        "retrieval": {"gate": TEST_GATE}})
    rt = build_runtime(config, clock=ManualClock(T0), embedder=embedder, judge=FakeJudge(),
                       scheduler=InProcessScheduler(), environ={})
    if grant:
        rt.host.grant(AGENT, ADITYA, read=True, write=True)
    return rt


def _top5(rt: Runtime, query: str) -> list[str]:
    hits = rt.tools.call("memory_search", P, {"queries": [query]})["results"]
    return [h["id"] for h in hits if h["scope"] == str(ADITYA)][:5]


def _said(world: World, said: str, content: str, attribute: str) -> str:
    world.say("user", said)
    out = tools(world).call("memory_write", world.p, {
        "type": "semantic", "content": content, "attribute": attribute, "source_kind": "user_statement",
        "evidence": said, "entities": [{"kind": "person", "name": "Aditya", "role": "about"}]})
    assert "error" not in out, out
    return str(out["record_id"])


def _one_scope_store(tmp_path: Path) -> Path:
    """A store holding only Aditya's scope, with what travels: a supersession, a conflict,
    a pin, an activation, a provisional inference and a session summary."""
    world = make_world(tmp_path)
    old = _said(world, "My editor is Neovim, I use it for everything.", "Aditya uses Neovim as his editor.",
                "editor")
    current = _said(world, "I switched my editor to Helix last week.", "Aditya uses Helix as his editor.",
                    "editor")
    _said(world, "I drink oat milk flat whites every morning.", "Aditya drinks oat milk flat whites.",
          "coffee_order")
    _said(world, "Please answer in British English.", "Aditya wants answers in British English.",
          "answer_language")
    tea = _said(world, "I never drink coffee after noon.", "Aditya never drinks coffee after noon.",
                "coffee_cutoff")
    world.write(content="Aditya may be training for a marathon.", attribute="training")
    world.rt.store.add_conflict(tea, old)
    assert world.rt.host.pin(current, "the user asked to keep it")
    world.rt.profiles.for_session(world.p)
    world.rt.hooks.on_session_end(world.p)
    summary = SessionSummary("Aditya talked about his editor and his coffee.", [], [])
    ran = world.rt.session_end.using(FakeExtractor(ExtractionOutput([], summary)), TableReviewer()).run("s1")
    assert ran.outcome == "extracted", ran
    world.rt.close()
    return tmp_path / "memory.sqlite"


def test_sqlite_to_postgresql_and_back_keeps_every_field_and_every_search(
    tmp_path: Path, pg_database: str,
) -> None:
    from tests import postgres

    source = _runtime(_one_scope_store(tmp_path / "a"), grant=False)
    first = _export(source)
    header = json.loads(first[0])
    assert header["counts"]["records"] == 7 and header["embedding"]["model"] == "fake"
    rows = [json.loads(line) for line in first]
    assert {r["status"] for r in rows if r["line"] == "record"} == {"superseded", "confirmed", "provisional"}
    assert any(r["line"] == "entity" for r in rows) and any(r.get("pinned") for r in rows)
    on_pg = _runtime(postgres.fresh_schema(pg_database))
    back = _runtime(tmp_path / "back.sqlite")
    try:
        result = on_pg.operations.import_lines(first, P, confirm=True)
        assert (result.failed, result.embedded, result.unchanged, result.created) == ([], 0, 0, 7)
        second = _export(on_pg)
        assert _body(second) == _body(first)
        back.operations.import_lines(second, P, confirm=True)
        assert _body(_export(back)) == _body(first)
        for query in ("which editor does Aditya use", "coffee", "British English answers",
                      "what does Aditya drink in the morning", "Helix", "marathon training"):
            assert _top5(on_pg, query) == _top5(source, query) == _top5(back, query), query
    finally:
        for rt in (source, on_pg, back):
            rt.close()


ATLAS = Scope("project", "atlas")


def _facts(world: World) -> list[str]:
    ids = [user_fact(world)["record_id"],
           _said(world, "I drink oat milk flat whites every morning.", "Aditya drinks oat milk flat whites.",
                 "coffee_order")]
    world.share(ATLAS, write=True)
    return ids


def _found(world: World, query: str) -> list[str]:
    answer = tools(world).call("memory_search", world.p, {"queries": [query]})
    return [h["content"] for h in answer["results"]]


def test_an_import_lands_provisional_and_the_same_file_twice_changes_nothing(world: World) -> None:
    _facts(world)
    lines = _export(world.rt)
    result = world.rt.operations.import_lines(lines, world.p, into=ATLAS)
    assert (result.created, result.unchanged, result.failed, result.entities_matched) == (2, 0, [], 1)
    landed = world.rt.store.find_records(scopes=[ATLAS])
    assert {r.status for r in landed} == {"provisional"}
    assert "Aditya drinks oat milk flat whites." in _found(world, "oat milk flat white")
    event = world.events("record.imported")[0]
    origin = event["payload"]
    assert (origin["origin_scope"], origin["origin_status"]) == ("user:aditya", "confirmed")

    before = world.counts()
    again = world.rt.operations.import_lines(lines, world.p, into=ATLAS)
    assert (again.created, again.unchanged, again.failed) == (0, 2, [])
    assert world.counts() == before


def test_a_bad_line_is_reported_by_number_and_the_rest_lands(world: World) -> None:
    _facts(world)
    lines = _export(world.rt)
    record = json.loads(lines[-1])
    leaked = dict(record, id="leak-1", content="Aditya's API key is sk-ant-api03-" + "x" * 40)
    lines = [*lines, "{not json", json.dumps(leaked)]
    result = world.rt.operations.import_lines(lines, world.p, into=ATLAS)
    assert result.created == 2
    assert [f.line for f in result.failed] == [len(lines) - 1, len(lines)]
    assert result.failed[0].reason.startswith("not JSON (Expecting property name")
    assert result.failed[1].reason.startswith("secret_detected: ")
    assert not world.rt.store.find_records(content="sk-ant-api03-" + "x" * 40)


def test_a_newer_file_or_an_unwritable_scope_is_refused_whole(world: World) -> None:
    _facts(world)
    lines = _export(world.rt)
    newer = [json.dumps(dict(json.loads(lines[0]), schema_version=LATEST + 1)), *lines[1:]]
    before = world.counts()
    with pytest.raises(ImportRefused, match="newer Retold"):
        world.rt.operations.import_lines(newer, world.p, into=ATLAS)
    with pytest.raises(ImportRefused, match="may not write user:olu"):
        world.rt.operations.import_lines(lines, world.p, into=Scope("user", "olu"))
    assert world.counts() == before


def test_vectors_are_computed_again_when_the_family_differs(world: World) -> None:
    _facts(world)
    lines = _export(world.rt)
    header = json.loads(lines[0])
    header["embedding"] = {"model": "another-model", "version": "3", "dims": 768}
    records = [json.dumps(dict(json.loads(line), vector=None)) if '"line":"record"' in line else line
               for line in lines[1:]]
    result = world.rt.operations.import_lines([json.dumps(header), *records], world.p, into=ATLAS)
    assert (result.created, result.embedded) == (2, 2)
    assert "Aditya drinks oat milk flat whites." in _found(world, "oat milk flat white")


def test_cli_export_then_import_and_one_line_refusals(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    _facts(world)
    world.rt.close()
    config = tmp_path / "cli.yaml"
    config.write_text(config_text())
    base = ["--store", world.target, "--config", str(config)]
    out = tmp_path / "aditya.jsonl"
    assert main(["export", "--scope", "user:aditya", "--include-history", "--out", str(out), *base]) == 0
    assert "exported 2 records (2 with vectors)" in capsys.readouterr().out
    who = ["--agent", AGENT, "--user", "aditya"]
    assert main(["import", str(out), *who, "--into", "project:atlas", *base]) == 0
    said = capsys.readouterr().out
    assert "imported 2 records into project:atlas (0 already there, 0 failed)" in said
    assert "landed provisional" in said
    newer = tmp_path / "newer.jsonl"
    lines = out.read_text().splitlines()
    newer.write_text("\n".join([json.dumps(dict(json.loads(lines[0]), retold_export=99)), *lines[1:]]))
    assert main(["import", str(newer), "--agent", AGENT, "--user", "aditya", *base]) == EXIT_REFUSED
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "newer Retold" in err
