"""A store with a damaged page of its scope index, read through every path a user has:
each answers what the undamaged store answers, or an error that names the damage and
``retold check``; none answers part of the store as if it were all of it. The writes
(tools and session hooks) add nothing to such a store.

Ten runs, each damaging a different leaf page of the index the way a torn write would
(``tests.conditions.corrupt_leaf``); SQLite's own integrity check confirms each damage."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from retold import build_runtime
from retold.cli import main
from retold.errors import StoreCorruptError
from retold.models import Principal
from retold.runtime import Runtime
from retold.testing import TEST_GATE, World, make_world
from tests.conditions import corrupt_leaf
from tests.sql import rows

pytestmark = pytest.mark.sqlite_only("the bytes of a store file; PostgreSQL checks its own pages")

RECORDS = 300
# (leaf page, offset from its end) of each run: cells of the index a read of the scope
# goes through, so each damage makes that read short (a cell that sorts out of place ends
# the search for its range, as in the report this test comes from) or fail.
RUNS = [(5, -2000), (6, -2000), (7, -2000), (8, -2000), (9, -2000), (10, -2000), (6, -400), (7, -400),
        (7, -1000), (0, -400)]
TOKEN = "principal-token-aditya-0001"


@dataclass
class Filled:
    world: World
    store: Path  # the undamaged store file
    config: Path  # the CLI's config: the world's fake embedding family
    target: str  # the id of one record of the scope


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Filled:
    folder = tmp_path_factory.mktemp("filled")
    world = make_world(folder / "w")
    for n in range(RECORDS):
        assert world.write(content=f"Aditya keeps thing{n} on shelf {n % 7}.", attribute=f"shelf_{n}").ok
    world.rt.close()
    config = folder / "config.yaml"
    # JSON is YAML: the world's embedding family and search gate, so the CLI finds what it does.
    embedding = {"model": "fake", "version": world.embedder.version, "dims": world.embedder.dims}
    config.write_text(json.dumps({"embedding": embedding, "retrieval": {"gate": TEST_GATE}}))
    ((target,),) = rows(world.rt.store.path, "SELECT id FROM records WHERE content LIKE '%thing150 %'")
    return Filled(world, Path(world.rt.store.path), config, str(target))


@dataclass(frozen=True)
class Refusal:
    """A path's error: its message, and for the CLI its exit code."""

    message: str
    code: int = 0


class Store:
    """One copy of the filled store for one path, damaged or not."""

    def __init__(self, filled: Filled, folder: Path, damage: tuple[int, int] | None) -> None:
        self.filled, self.path = filled, folder / "memory.sqlite"
        shutil.copy(filled.store, self.path)
        if damage is not None:
            corrupt_leaf(self.path, "records_scope", *damage)
            try:
                found = rows(self.path, "PRAGMA integrity_check")
            except sqlite3.DatabaseError:
                found = []  # SQLite's check gave up on the page: damaged all the same
            assert found != [("ok",)], "the damage must be real"

    @contextlib.contextmanager
    def runtime(self) -> Iterator[Runtime]:
        world = self.filled.world
        config = world.rt.config.replace({"store": {"path": str(self.path)}, "ui": {"tokens": [
            {"sha256": _digest(TOKEN), "agent_id": world.p.agent_id, "user_id": world.p.user_id}]}})
        with build_runtime(config, clock=world.clock, embedder=world.embedder, judge=world.judge,
                           environ={}) as rt:
            yield rt

    def cli(self, *args: str) -> Any:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([*args, "--store", str(self.path), "--config", str(self.filled.config)])
        if code:
            lines = err.getvalue().strip().splitlines()
            assert len(lines) == 1, err.getvalue()  # one line, never a traceback
            return Refusal(lines[0], code)
        return out.getvalue()

    def tool(self, name: str, payload: dict[str, Any]) -> Any:
        with self.runtime() as rt:
            answer = rt.tools.call(name, self.filled.world.p, payload)
        if "error" in answer:
            return Refusal(answer["error"]["message"])
        return answer

    def writes(self) -> int:
        """Sessions, turns and records, counted without any index."""
        counts = rows(self.path, "SELECT (SELECT count(*) FROM sessions), (SELECT count(*) FROM"
                                 " session_turns),"
                                 " (SELECT count(*) FROM records NOT INDEXED)")
        return sum(counts[0])


def _digest(token: str) -> str:
    from retold.ui.access import token_digest

    return token_digest(token)


def _ids(text: str) -> list[str]:
    return sorted(line.split("\t", 1)[0] for line in text.splitlines())


def _dump(s: Store) -> Any:
    out = s.cli("dump", "--scope", "user:aditya")
    return out if isinstance(out, Refusal) else _ids(out)


def _export(s: Store) -> Any:
    out = s.cli("export", "--scope", "user:aditya")
    return out if isinstance(out, Refusal) else out.count('"line":"record"')


def _search(s: Store) -> Any:
    # What `retold search` runs, at the world's clock (the records' expiries are the
    # world's); the command itself is checked by test_the_search_command_refuses_a_damaged_store.
    with s.runtime() as rt:
        try:
            report = rt.operations.search(s.filled.world.p.agent_id, "aditya", "thing150 shelf")
        except StoreCorruptError as exc:
            return Refusal(str(exc))
    return [r.record.id for r in report.outcome.response.results]


def _get(s: Store) -> Any:
    out = s.cli("get", s.filled.target)
    return out if isinstance(out, Refusal) else json.loads(out)["record"]["content"]


def _memory_search(s: Store) -> Any:
    answer = s.tool("memory_search", {"queries": ["thing150 shelf"]})
    return answer if isinstance(answer, Refusal) else [r["id"] for r in answer["results"]]


def _memory_get(s: Store) -> Any:
    answer = s.tool("memory_get", {"ids": [s.filled.target]})
    return answer if isinstance(answer, Refusal) else [r.get("content") for r in answer["records"]]


def _profile(s: Store) -> Any:
    with s.runtime() as rt:
        try:
            return rt.profiles.assemble(s.filled.world.p).text
        except StoreCorruptError as exc:
            return Refusal(str(exc))


def _inspector(s: Store) -> Any:
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from retold.ui.app import create_app

    with s.runtime() as rt:
        client = TestClient(create_app(rt), headers={"authorization": f"Bearer {TOKEN}"})
        answers = [client.get(url) for url in ("/scopes", "/records?scope=user:aditya")]
    refused = [a for a in answers if a.status_code == 503]
    if refused:
        return Refusal(refused[0].text)
    assert all(a.status_code == 200 for a in answers)
    return [a.text.count("thing") for a in answers]


READS: dict[str, Callable[[Store], Any]] = {
    "dump": _dump, "export": _export, "search": _search, "get": _get, "memory_search": _memory_search,
    "memory_get": _memory_get, "profile": _profile, "inspector": _inspector,
}


def _refused_for_damage(answer: Refusal) -> None:
    assert "damaged" in answer.message and "retold check" in answer.message, answer
    assert answer.code in (0, 4), answer  # the CLI exits 4 for a damaged store, as `retold check` does


@pytest.fixture(scope="module")
def whole(filled: Filled, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What each read answers on the undamaged store."""
    found = {name: read(Store(filled, tmp_path_factory.mktemp(name), None)) for name, read in READS.items()}
    assert not any(isinstance(answer, Refusal) for answer in found.values()), found
    assert len(found["dump"]) == RECORDS and found["export"] == RECORDS and found["search"]
    return found


@pytest.mark.parametrize("run", range(len(RUNS)))
@pytest.mark.parametrize("name", list(READS))
def test_a_read_of_a_damaged_store_is_whole_or_refused(filled: Filled, whole: dict[str, Any], tmp_path: Path,
                                                      name: str, run: int) -> None:
    answer = READS[name](Store(filled, tmp_path, RUNS[run]))
    if isinstance(answer, Refusal):
        _refused_for_damage(answer)
    else:
        assert answer == whole[name]


WRITES: dict[str, Callable[[Store], Any]] = {
    "memory_write": lambda s: s.tool("memory_write", {
        "type": "semantic", "content": "Aditya moved the lamp to the attic.", "attribute": "lamp_place",
        "source_kind": "user_statement", "evidence": "I moved the lamp to the attic."}),
    "memory_revise": lambda s: s.tool("memory_revise", {"id": s.filled.target, "action": "confirm",
                                                        "reason": "checked"}),
    "memory_forget": lambda s: s.tool("memory_forget", {"id": s.filled.target, "reason": "asked"}),
}


@pytest.mark.parametrize("run", range(len(RUNS)))
@pytest.mark.parametrize("name", list(WRITES))
def test_a_tool_adds_nothing_to_a_damaged_store(filled: Filled, tmp_path: Path, name: str, run: int) -> None:
    store = Store(filled, tmp_path, RUNS[run])
    before = store.writes()
    answer = WRITES[name](store)
    assert isinstance(answer, Refusal), answer
    _refused_for_damage(answer)
    assert store.writes() == before


@pytest.mark.parametrize("run", range(len(RUNS)))
def test_the_session_hooks_add_nothing_to_a_damaged_store(filled: Filled, tmp_path: Path, run: int) -> None:
    store = Store(filled, tmp_path, RUNS[run])
    before = store.writes()
    principal = Principal(filled.world.p.agent_id, "aditya", "s-after-damage", None)
    with store.runtime() as rt:
        rt.hooks.on_session_start(principal)  # the first write of this process
        rt.hooks.on_turn(principal, "user", "I moved the lamp to the attic.")
        assert rt.hooks.unrecorded == {"s-after-damage": 1}  # counted, as for any store outage
    assert store.writes() == before


@pytest.mark.parametrize("run", range(len(RUNS)))
def test_the_search_command_refuses_a_damaged_store(filled: Filled, tmp_path: Path, run: int) -> None:
    store = Store(filled, tmp_path, RUNS[run])
    answer = store.cli("search", "--agent", filled.world.p.agent_id, "--user", "aditya", "thing150", "shelf")
    assert isinstance(answer, Refusal), answer
    _refused_for_damage(answer)


def test_an_export_that_reads_fewer_records_than_the_table_holds_is_refused(filled: Filled,
                                                                            tmp_path: Path) -> None:
    # This cell keeps the index's counts right but points one record at no row.
    answer = Store(filled, tmp_path, (8, -200)).cli("export", "--scope", "user:aditya")
    assert isinstance(answer, Refusal), answer
    _refused_for_damage(answer)
    assert "an export read 299 records" in answer.message
