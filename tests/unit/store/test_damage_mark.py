"""A SQLite store found damaged takes no more writes, in any process, until a check
passes: damage made with the file's bytes (or an index that lost rows), found by the
periodic check or by a read, then writes tried through other runtimes on the same file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from retold import build_runtime
from retold.cli import main
from retold.errors import StoreCorruptError
from retold.runtime import Runtime
from retold.store.damage import damage_noted, mark_path
from retold.testing import World, make_world
from tests.conditions import corrupt_fts_segments, stale_index
from tests.sql import rows

pytestmark = pytest.mark.sqlite_only("the bytes of a store file; PostgreSQL checks its own pages")


def _write(n: int) -> dict[str, Any]:
    return {"type": "semantic", "content": f"Aditya moved the gadget{n} to the attic.",
            "attribute": f"attic_{n}", "source_kind": "user_statement",
            "evidence": f"I moved the gadget{n} to the attic."}


@pytest.fixture
def filled(tmp_path: Path) -> World:
    """A closed store of 300 records, enough for several full-text segment pages, and a
    session whose turns the writes below quote (a damaged store records no more turns)."""
    world = make_world(tmp_path / "w")
    for n in range(300):
        assert world.write(content=f"Aditya keeps thing{n} on shelf {n % 7}.", attribute=f"shelf_{n}").ok
    for n in range(3):
        world.say("user", f"I moved the gadget{n} to the attic.")
    world.rt.close()
    return world


def _open(world: World) -> Runtime:
    return build_runtime(world.rt.config, clock=world.clock, embedder=world.embedder, judge=world.judge,
                         environ={})


def _tool_write(world: World, rt: Runtime, n: int) -> dict[str, Any]:
    answer: dict[str, Any] = rt.tools.call("memory_write", world.p, _write(n))
    return answer


def _any_write(rt: Runtime) -> None:
    """Open and commit an empty write transaction, as every write does first."""
    with rt.store.atomic():
        pass


def test_damaged_full_text_pages_found_by_the_periodic_check_stop_every_writer(filled: World) -> None:
    path = filled.rt.store.path
    corrupt_fts_segments(path)
    with _open(filled) as agent, _open(filled) as worker:
        # The damage sits in old segments, which a write does not read.
        assert "record_id" in _tool_write(filled, agent, 0)
        report = worker.operations.check()  # what the beat's retold.check runs
        assert report is not None and report.damaged and "fts_index" in report.summary()
        before = rows(path, "SELECT count(*) FROM records")
        for rt in (agent, worker):
            refused = _tool_write(filled, rt, 1)
            assert refused["error"]["code"] == "store_unavailable", refused
            assert "damaged" in refused["error"]["message"]
            assert str(path) not in refused["error"]["message"]  # no server path reaches the model
        assert rows(path, "SELECT count(*) FROM records") == before
        # Reads go on: what the store holds is still readable where it is not damaged.
        assert "results" in agent.tools.call("memory_search", filled.p, {"queries": ["shelf thing5"]})


def test_loading_a_whole_snapshot_lets_writes_in_again(filled: World, tmp_path: Path) -> None:
    path = filled.rt.store.path
    with _open(filled) as rt:
        rt.operations.snapshot_save(tmp_path / "good.sqlite")
    corrupt_fts_segments(path)
    with _open(filled) as rt:
        assert rt.operations.check() is not None
        assert damage_noted(path) is not None
        assert _tool_write(filled, rt, 1)["error"]["code"] == "store_unavailable"
        rt.operations.snapshot_load(tmp_path / "good.sqlite")
        assert damage_noted(path) is None
        assert "record_id" in _tool_write(filled, rt, 2)


def test_a_dump_that_meets_a_stale_index_stops_writes_in_other_runtimes(
        filled: World, capsys: pytest.CaptureFixture[str]) -> None:
    path = filled.rt.store.path
    stale_index(path, "records_scope", "rowid % 3 <> 0")
    assert main(["dump", "--scope", "user:aditya", "--store", path]) == 4
    assert "scope index lists" in capsys.readouterr().err
    with _open(filled) as rt:
        assert _tool_write(filled, rt, 1)["error"]["code"] == "store_unavailable"
        with pytest.raises(StoreCorruptError, match="found damaged .*scope index lists.*retold check"):
            _any_write(rt)


def test_a_check_that_passes_clears_a_mark_and_says_so(filled: World,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = filled.rt.store.path
    mark_path(path).write_text('{"at": "2026-12-01T10:00:00+00:00", "reason": "a torn write"}\n')
    with _open(filled) as rt, pytest.raises(StoreCorruptError, match="at 2026-12-01T10:00:00.*a torn write"):
        _any_write(rt)
    assert main(["check", "--quick", "--store", path]) == 0
    assert "writes are taken again" in capsys.readouterr().out
    assert not mark_path(path).exists()
    with _open(filled) as rt:
        assert "record_id" in _tool_write(filled, rt, 2)


def test_a_check_that_finds_damage_says_writes_are_refused(filled: World,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = filled.rt.store.path
    corrupt_fts_segments(path)
    assert main(["check", "--store", path]) == 4
    assert "writes to this store are refused until a check passes" in capsys.readouterr().out
    assert damage_noted(path) is not None
