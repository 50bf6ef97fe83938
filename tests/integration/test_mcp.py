"""``retold mcp`` driven by the MCP SDK's own client: over stdio (a spawned server for one
principal) and over streamable HTTP (bearer tokens from config, 401 without one).

The server runs as a real subprocess with ``embedding.model: fake``, so no model loads.
Skipped locally when the ``mcp`` extra is missing; required in CI.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.optional import need

need("mcp")

import anyio  # noqa: E402
import httpx2  # noqa: E402
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from retold import build_runtime, load_config  # noqa: E402
from retold.mcp_server import PROFILE_URI, token_digest  # noqa: E402
from retold.models import Principal, Scope  # noqa: E402
from retold.store.location import add_tenant, tenant_store_path  # noqa: E402
from tests.ports import free_port, wait_listening  # noqa: E402
from tests.sql import rows  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
AGENT, USER, PROJECT = "mcp-agent", "cleo", "atlas"
TOKEN = "test-token-for-cleo"
ACME_TOKEN = "test-token-for-cleo-in-acme"  # the same principal, in another tenant
TOOLS = {"memory_search", "memory_get", "memory_write", "memory_revise", "memory_forget"}
WAIT = 10.0  # seconds; every wait below is bounded by this
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, Path]:
    """A store where the agent may read and write Cleo's and the project's memory, and a
    config with the fake embedder and one MCP token; returns (store, config)."""
    config = tmp_path / "config.yaml"
    config.write_text(
        "embedding:\n  model: fake\n"
        "mcp:\n  tokens:\n"
        f"    - sha256: {token_digest(TOKEN)}\n      agent_id: {AGENT}\n      user_id: {USER}\n"
        f"    - sha256: {token_digest(ACME_TOKEN)}\n      agent_id: {AGENT}\n      user_id: {USER}\n"
        "      tenant: acme\n",
        encoding="utf-8")
    path = tmp_path / "mem.sqlite"
    with _runtime(path, config) as rt:
        rt.host.grant(AGENT, Scope("user", USER), read=True, write=True)
        rt.host.grant(AGENT, Scope("project", PROJECT), read=True, write=True)
    return path, config


def _runtime(path: Path, config: Path) -> Any:
    return build_runtime(load_config(config, overrides={"store": {"path": str(path)}}))


def _expected_tools(path: Path, config: Path, project: str | None) -> dict[str, dict[str, Any]]:
    with _runtime(path, config) as rt:
        return {s["name"]: s for s in rt.tools.schemas(Principal(AGENT, USER, project_id=project))}


def _check_listing(listed: Any, expected: dict[str, dict[str, Any]]) -> None:
    tools = {tool.name: tool for tool in listed.tools}
    assert set(tools) == TOOLS == set(expected)
    for name, tool in tools.items():
        assert tool.description == expected[name]["description"]
        assert tool.input_schema == expected[name]["input_schema"], name
        assert not {"oneOf", "anyOf", "allOf"} & set(tool.input_schema), name


def _text(result: Any) -> str:
    return "\n".join(block.text for block in result.content)


WRITE = {"type": "semantic", "content": "Cleo's favourite editor is Helix.", "attribute": "editor",
         "source_kind": "agent_inference"}
CLAIMED = {"type": "semantic", "content": "Cleo's timezone is Europe/Lisbon.", "attribute": "timezone",
           "source_kind": "user_statement", "evidence": "I live in Lisbon, so use Lisbon time."}


# -- stdio -----------------------------------------------------------------------------------


def test_stdio_serves_the_five_tools_and_keeps_unverifiable_claims_provisional(
        store: tuple[Path, Path]) -> None:
    path, config = store
    expected = _expected_tools(path, config, PROJECT)
    params = StdioServerParameters(
        command=sys.executable, cwd=str(ROOT), env=ENV,
        args=["-m", "retold.cli", "mcp", "--store", str(path), "--config", str(config),
              "--agent", AGENT, "--user", USER, "--project", PROJECT])
    seen: dict[str, Any] = {}

    async def drive() -> None:
        with anyio.fail_after(WAIT * 2):
            async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                _check_listing(await session.list_tools(), expected)

                written = await session.call_tool("memory_write", WRITE)
                assert not written.is_error, _text(written)
                # the text is the result as compact JSON, less the timings
                shown = {k: v for k, v in written.structured_content.items() if k != "timings_ms"}
                assert json.loads(_text(written)) == shown
                seen["written"] = written.structured_content["record_id"]

                found = await session.call_tool("memory_search", {"queries": ["Cleo favourite editor"]})
                assert not found.is_error, _text(found)
                assert _text(found) == found.structured_content["rendered"]
                assert "Helix" in _text(found)
                contents = [r["content"] for r in found.structured_content["results"]]
                assert WRITE["content"] in contents

                claimed = await session.call_tool("memory_write", CLAIMED)
                assert not claimed.is_error, _text(claimed)
                assert claimed.structured_content["status"] == "provisional"
                assert "evidence not found in session" in claimed.structured_content["note"]
                seen["claimed"] = claimed.structured_content["record_id"]

                bad = await session.call_tool("memory_search", {"queries": "not a list"})
                assert bad.is_error
                error = bad.structured_content["error"]
                assert error["code"] == "invalid_input"
                assert "invalid_input" in _text(bad) and error["message"] in _text(bad)

    anyio.run(drive)

    with _runtime(path, config) as rt:
        claimed = rt.store.get_record(seen["claimed"])
        assert claimed is not None
        # no transcript reaches an MCP server, so the quote cannot be found in the session
        assert claimed.source_kind == "agent_inference" and claimed.status == "provisional"
    # one fresh session for the server process, started for this principal and ended on exit
    sessions = rows(path, "SELECT id, agent_id, user_id, project_id, ended_at FROM sessions")
    assert len(sessions) == 1
    session_id, agent, user, project, ended_at = sessions[0]
    assert session_id.startswith("mcp-") and (agent, user, project) == (AGENT, USER, PROJECT)
    assert ended_at is not None


def test_stdio_puts_the_profile_in_the_instructions_and_serves_it_as_a_resource(
        store: tuple[Path, Path]) -> None:
    path, config = store
    said = "Please always answer me in British English."
    with _runtime(path, config) as rt:  # an earlier session where Cleo stated a preference
        earlier = Principal(AGENT, USER, "earlier")
        rt.hooks.on_session_start(earlier)
        rt.hooks.on_turn(earlier, "user", said)
        written = rt.tools.call("memory_write", earlier, {
            "type": "semantic", "content": "Cleo wants answers in British English.",
            "attribute": "answer_language", "source_kind": "user_statement", "evidence": said})
        assert written["activation"] == "ambient", written
    params = StdioServerParameters(
        command=sys.executable, cwd=str(ROOT), env=ENV,
        args=["-m", "retold.cli", "mcp", "--store", str(path), "--config", str(config),
              "--agent", AGENT, "--user", USER])
    seen: dict[str, str] = {}

    async def drive() -> None:
        with anyio.fail_after(WAIT * 2):
            async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                started = await session.initialize()
                seen["instructions"] = started.instructions or ""
                listed = await session.list_resources()
                assert [str(r.uri) for r in listed.resources] == [PROFILE_URI]
                read_back = await session.read_resource(PROFILE_URI)
                seen["resource"] = read_back.contents[0].text  # type: ignore[union-attr]

    anyio.run(drive)
    assert "Cleo wants answers in British English." in seen["resource"]
    assert seen["instructions"].endswith(seen["resource"])
    (stored,) = rows(path, "SELECT text FROM profile_blocks WHERE session_id LIKE 'mcp-%'")
    assert stored == (seen["resource"],)


def test_stdio_stops_on_sigterm_with_stdin_open_and_ends_its_session(store: tuple[Path, Path]) -> None:
    path, config = store
    proc = subprocess.Popen(
        [sys.executable, "-m", "retold.cli", "mcp", "--store", str(path), "--config", str(config),
         "--agent", AGENT, "--user", USER],
        cwd=ROOT, env={**os.environ, **ENV}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + WAIT
        while not rows(path, "SELECT id FROM sessions"):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1]
            time.sleep(0.05)
        time.sleep(0.3)  # past the session start, into the read loop
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=WAIT) == 0, proc.communicate()[1]
        assert [ended is not None for (ended,) in rows(path, "SELECT ended_at FROM sessions")] == [True]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=WAIT)


# -- streamable HTTP -------------------------------------------------------------------------------


def _serve_http(path: Path, config: Path, port: int) -> subprocess.Popen[str]:
    """``retold mcp --http`` on ``port``, started; the caller waits for it to listen."""
    return subprocess.Popen(
        [sys.executable, "-m", "retold.cli", "mcp", "--store", str(path), "--config", str(config),
         "--http", f"127.0.0.1:{port}"],
        cwd=ROOT, env={**os.environ, **ENV}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture
def http_server(store: tuple[Path, Path]) -> Iterator[str]:
    path, config = store
    port = free_port()
    proc = _serve_http(path, config, port)
    try:
        wait_listening(port, proc, "the MCP HTTP server", WAIT)
        yield f"http://127.0.0.1:{port}/mcp"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=WAIT) == 0, proc.communicate()[1]
        # a graceful stop ends every session the server started
        assert all(ended for (ended,) in rows(path, "SELECT ended_at FROM sessions"))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=WAIT)


def test_http_says_where_it_listens_and_nothing_before(store: tuple[Path, Path]) -> None:
    path, config = store
    port = free_port()
    proc = _serve_http(path, config, port)
    try:
        wait_listening(port, proc, "the MCP HTTP server", WAIT)
        assert proc.stderr is not None
        first = proc.stderr.readline()  # said once the socket is bound, so it is there by now
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=WAIT) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=WAIT)
    assert first == f"retold mcp: listening on http://127.0.0.1:{port}/mcp (Ctrl-C stops it)\n"


def test_http_with_a_valid_token_serves_the_tools(http_server: str, store: tuple[Path, Path]) -> None:
    path, config = store
    expected = _expected_tools(path, config, None)

    async def drive() -> None:
        with anyio.fail_after(WAIT):
            async with (
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as client,
                streamable_http_client(http_server, http_client=client) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                _check_listing(await session.list_tools(), expected)
                written = await session.call_tool("memory_write", WRITE)
                assert not written.is_error, _text(written)
                found = await session.call_tool("memory_search", {"queries": ["Cleo favourite editor"]})
                assert "Helix" in _text(found)

    anyio.run(drive)
    # the token's principal got one session, still open while the server runs
    sessions = rows(path, "SELECT id, agent_id, user_id, ended_at FROM sessions")
    assert [(a, u, e) for _, a, u, e in sessions] == [(AGENT, USER, None)]
    assert sessions[0][0].startswith("mcp-")


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong-token"},
                                     {"Authorization": f"Basic {TOKEN}"},
                                     {"Authorization": f"Bearer {ACME_TOKEN}"}])
def test_http_without_a_valid_token_gets_401(http_server: str, headers: dict[str, str]) -> None:
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    response = httpx2.post(http_server, json=initialize, timeout=WAIT, headers={
        **headers, "Accept": "application/json, text/event-stream"})
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")

    async def drive() -> None:
        with anyio.fail_after(WAIT):
            async with (
                httpx2.AsyncClient(headers=headers) as client,
                streamable_http_client(http_server, http_client=client) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()

    with pytest.raises(Exception) as failure:  # noqa: B017 (the SDK's own error type varies by stage)
        anyio.run(drive)
    assert not isinstance(failure.value, TimeoutError)


# -- command-line refusals ---------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "retold.cli", "mcp", *args], capture_output=True,
                          text=True, timeout=WAIT * 3, cwd=ROOT, env={**os.environ, **ENV})


def test_http_without_tokens_and_stdio_without_a_principal_refuse_to_start(
        store: tuple[Path, Path], tmp_path: Path) -> None:
    path, _ = store
    bare = tmp_path / "bare.yaml"
    bare.write_text("embedding:\n  model: fake\n", encoding="utf-8")
    for args, needle in (
        (["--store", str(path), "--config", str(bare), "--http", "127.0.0.1:1"], "mcp.tokens"),
        (["--store", str(path), "--config", str(bare)], "--agent and --user"),
        (["--store", str(path), "--config", str(bare), "--http", "nowhere"], "HOST:PORT"),
    ):
        result = _cli(*args)
        assert result.returncode == 2, (args, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0], result.stderr


# -- starting from a desktop client ------------------------------------------------------------


def test_print_config_gives_a_block_that_starts_the_server_and_names_a_missing_grant(
        store: tuple[Path, Path], tmp_path: Path) -> None:
    path, config = store
    printed = _cli("--print-config", "--store", str(path), "--config", str(config), "--agent", AGENT,
                   "--user", USER)
    assert printed.returncode == 0, printed.stderr
    block = json.loads(printed.stdout)["mcpServers"]["retold"]
    assert Path(block["command"]).is_absolute() and str(path.resolve()) in block["args"]
    # started from another folder, as a desktop app would, with only the block's own settings
    params = StdioServerParameters(command=block["command"], args=block["args"], cwd=str(tmp_path),
                                   env={**block["env"], "PYTHONPATH": str(ROOT)})
    names: list[str] = []

    async def drive() -> None:
        with anyio.fail_after(WAIT * 2):
            async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                names.extend(t.name for t in (await session.list_tools()).tools)

    anyio.run(drive)
    assert set(names) == TOOLS
    refused = _cli("--print-config", "--store", str(path), "--config", str(config), "--agent", "stranger",
                   "--user", USER)
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 1 and refused.stdout == ""
    assert len(lines) == 1 and f"retold grant stranger user:{USER} --read --write --store {path.resolve()}" \
        in lines[0], refused.stderr


def _start(args: list[str], errlog: Path) -> dict[str, Any]:
    """Connect a client to ``retold mcp ARGS`` and report what it saw."""
    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT), env=ENV,
                                   args=["-m", "retold.cli", "mcp", *args])
    seen: dict[str, Any] = {}

    async def drive() -> None:
        with anyio.fail_after(WAIT * 2), errlog.open("w") as err:
            async with stdio_client(params, errlog=err) as (read, write), \
                    ClientSession(read, write) as session:
                seen["instructions"] = (await session.initialize()).instructions or ""
                seen["tools"] = [t.name for t in (await session.list_tools()).tools]
                seen["call"] = await session.call_tool("memory_search", {"queries": ["anything"]})

    anyio.run(drive)
    return seen


def test_a_server_that_cannot_start_tells_the_client_why(store: tuple[Path, Path], tmp_path: Path) -> None:
    _, config = store
    missing = tmp_path / "nowhere.sqlite"
    seen = _start(["--store", str(missing), "--config", str(config), "--agent", AGENT, "--user", USER],
                  tmp_path / "err.log")
    assert f"no store at {missing}" in seen["instructions"] and seen["tools"] == []
    assert seen["call"].is_error and f"no store at {missing}" in seen["call"].content[0].text
    assert f"no store at {missing}" in (tmp_path / "err.log").read_text()
    assert not missing.exists()


def test_an_agent_without_a_grant_is_told_so_rather_than_served_an_empty_memory(
        store: tuple[Path, Path], tmp_path: Path) -> None:
    path, config = store
    seen = _start(["--store", str(path), "--config", str(config), "--agent", "stranger", "--user", USER],
                  tmp_path / "err.log")
    assert "agent 'stranger' holds no grant" in seen["instructions"]
    assert "agent 'stranger' holds no grant" in (tmp_path / "err.log").read_text()
    assert "memory_write" not in seen["tools"]
    answer = seen["call"].structured_content
    assert answer["results"] == [] and "holds no grant" in answer["empty_reason"]
    assert "holds no grant" in _text(seen["call"])  # the text the model reads


def test_stdio_serves_only_the_tenant_it_was_started_for(store: tuple[Path, Path]) -> None:
    """The same agent and user in two tenants: a server started for acme never returns what
    the default tenant holds, and writes only into acme."""
    path, config = store
    secret = "Cleo's billing contact is Zebulon Quartzfield, zq@canary.example."
    with _runtime(path, config) as rt:
        done = rt.tools.call("memory_write", Principal(AGENT, USER), {**WRITE, "content": secret,
                                                                      "attribute": "billing"})
        assert done["outcome"] == "created", done
    add_tenant(path, "acme")
    with build_runtime(load_config(config, overrides={"store": {"path": str(path)}}), tenant="acme") as rt:
        rt.host.grant(AGENT, Scope("user", USER), read=True, write=True)
    params = StdioServerParameters(
        command=sys.executable, cwd=str(ROOT), env=ENV,
        args=["-m", "retold.cli", "mcp", "--store", str(path), "--config", str(config), "--tenant", "acme",
              "--agent", AGENT, "--user", USER])

    async def drive() -> None:
        with anyio.fail_after(WAIT * 2):
            async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                found = await session.call_tool("memory_search", {"queries": ["Cleo billing contact"]})
                assert not found.is_error and found.structured_content["results"] == []
                assert "canary" not in _text(found)
                written = await session.call_tool("memory_write", WRITE)
                assert not written.is_error, _text(written)

    anyio.run(drive)
    with _runtime(path, config) as rt:  # the default tenant gained nothing
        assert [r.content for r in rt.store.find_records(content=WRITE["content"])] == []
    assert rows(tenant_store_path(path, "acme"), "SELECT count(*) FROM records") == [(1,)]
