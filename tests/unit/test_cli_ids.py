"""Ids as a person types them into ``retold``: the short id a search shows, the start of a
long id, an ambiguous part answered with one line, and ``retold forget`` undone by
``retold restore``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from retold import build_runtime, load_config
from retold.config.env import store_key
from retold.models import Principal, Scope
from retold.testing import make_record

AGENT, USER = "cli-agent", "cleo"
SCOPE = Scope("user", USER)
A = "0190aaaa-0000-7000-8000-0000dd628369"
B = "0190aaaa-0001-7000-8000-0000ee628369"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "retold.cli", *args], capture_output=True, text=True, timeout=120,
        env={**{k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}, "HF_HUB_OFFLINE": "1"},
    )


@pytest.fixture
def common(store_target: str, tmp_path: Path) -> tuple[str, ...]:
    """Two records whose short ids share their last six digits, and two sessions whose ids
    share their start; returns the --store and --config flags."""
    config = tmp_path / "config.yaml"
    config.write_text(f"store:\n  path: {tmp_path / 'mem.sqlite'}\nembedding:\n  model: fake\n")
    overrides = {"store": {store_key(store_target): store_target}}
    with build_runtime(load_config(config, overrides=overrides)) as rt:
        rt.host.grant(AGENT, SCOPE, read=True, write=True)
        for session in ("sess-alpha", "sess-beta"):
            rt.hooks.on_session_start(Principal(AGENT, USER, session, None))
        for record_id, content in ((A, "Cleo walks along the river."), (B, "Cleo drinks green tea.")):
            record = make_record(id=record_id, scope=SCOPE, content=content, attribute=None,
                                 subject=f"ent_cleo/{record_id}", source_ref="session:sess-alpha<turn:1>")
            rt.store.write_record(record)
            rt.store.put_embedding(record_id, rt.embedder.name, rt.embedder.version,
                                   rt.embedder.embed_documents([content])[0])
    return "--store", store_target, "--config", str(config)


def _ok(*args: str) -> subprocess.CompletedProcess[str]:
    result = run_cli(*args)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result


def _fails(code: int, *args: str) -> str:
    """The one line a refused command prints."""
    result = run_cli(*args)
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_the_short_id_or_the_start_of_an_id_names_a_record(common: tuple[str, ...]) -> None:
    for typed in ("dd628369", "0190aaaa-0000", A):
        assert json.loads(_ok("get", typed, *common).stdout)["record"]["id"] == A, typed
    assert _ok("pin", "ee628369", "--reason", "keep", *common).stdout.strip() == f"pinned {B}"
    assert _ok("unpin", "ee628369", "--reason", "done", *common).stdout.strip() == f"unpinned {B}"
    events = _ok("events", "--record", "ee628369", *common).stdout
    assert "record.pinned" in events and "record.unpinned" in events and B in events and A not in events
    line = _ok("activation", "dd628369", "conditional", "--resolver", "dana", "--reason", "asked",
               *common).stdout
    assert line.startswith(f"record {A}: conditional")


def test_an_ambiguous_part_lists_the_candidates_in_one_line(common: tuple[str, ...]) -> None:
    line = _fails(2, "get", "628369", *common)
    assert line == (f"retold get: 628369 is ambiguous: 2 record ids start or end with it ({A}, {B});"
                    " give more of the id")
    assert "0190aaaa is ambiguous" in _fails(2, "forget", "0190aaaa", "--reason", "r", *common)
    # Nothing was forgotten by the refused command.
    assert json.loads(_ok("get", A, *common).stdout)["record"]["status"] == "confirmed"
    line = _fails(2, "extract", "sess", *common)
    assert line == ("retold extract: sess is ambiguous: 2 session ids start or end with it"
                    " (sess-alpha, sess-beta); give more of the id")
    assert _fails(1, "extract", "sess-al", *common) == (
        "retold extract: session sess-alpha has not ended; extraction runs after it ends")


def test_wildcards_and_short_parts_name_nothing(common: tuple[str, ...]) -> None:
    assert _fails(1, "get", "d_628369", *common) == "retold get: no record d_628369"
    assert _fails(1, "get", "%8369", *common) == "retold get: no record %8369"
    assert _fails(1, "get", "369", *common) == "retold get: no record 369"


def test_forget_is_undone_by_restore(common: tuple[str, ...]) -> None:
    search = ("search", "--agent", AGENT, "--user", USER, "--json", *common, "river", "walks")
    assert A in [r["id"] for r in json.loads(_ok(*search).stdout)["results"]]

    forgot = _ok("forget", "dd628369", "--reason", "Cleo asked", "--as", "dana", *common)
    lines = forgot.stdout.strip().splitlines()
    assert lines[0].startswith(f"forgot {A} (it was confirmed); event ")
    assert lines[1].startswith("searches no longer return it; `retold restore dd628369 --reason ...`"
                               " brings it back until ")
    assert forgot.stderr == ""  # nothing else is said on the way, the judge's choice included
    assert A not in [r["id"] for r in json.loads(_ok(*search).stdout)["results"]]
    detail = json.loads(_ok("get", "dd628369", *common).stdout)
    assert detail["record"]["status"] == "deleted"
    forgotten = [e for e in detail["events"] if e["kind"] == "record.forgotten"]
    assert [(e["actor"], e["payload"]["reason"]) for e in forgotten] == [("dana", "Cleo asked")]
    assert _fails(2, "forget", A, "--reason", "again", *common) == (
        f"retold forget: memory {A} is already forgotten")

    restored = _ok("restore", "dd628369", "--reason", "by mistake", *common)
    assert restored.stdout.startswith(f"restored {A} as confirmed; event ")
    assert A in [r["id"] for r in json.loads(_ok(*search).stdout)["results"]]


def test_forget_refuses_what_it_cannot_do(common: tuple[str, ...]) -> None:
    assert _fails(2, "forget", "ffff0000", "--reason", "r", *common) == "retold forget: no record ffff0000"
    assert "--reason" in _fails(2, "forget", A, *common)
    assert "credential" in _fails(2, "forget", A, "--reason", "sk-ant-api03-" + "x" * 90, *common)
    assert "`retold restore` can bring it back" in " ".join(_ok("forget", "--help").stdout.split())
