"""The MCP server: the five memory tools over the Model Context Protocol, for clients that
cannot embed the Python library (desktop assistants, IDE agents, other languages).

An edge, like the CLI: it sees the Runtime and nothing below imports it. Over stdio the
principal comes from the command line; over streamable HTTP every request's bearer token
names it (config ``mcp.tokens``, which holds only SHA-256 hashes), and a request without a
known token is answered 401 before any tool runs. Each principal gets one Retold session per
server process, ``mcp-<uuid>``, started on first use and ended when the server stops.

An MCP client sends no transcript, so a quoted ``evidence`` is never found in the session:
the write path keeps a claimed user statement as a provisional agent inference
(docs/decisions.md "MCP writes are inferences"). Nothing here changes that.

This module imports the ``mcp`` SDK at the top; the CLI imports it only inside its ``mcp``
command, so ``import retold`` never needs the extra.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import anyio
from mcp import types
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from retold.config import McpTokenConfig
from retold.config.tokens import token_digest, tokens_for
from retold.errors import ConfigError
from retold.ingest.session import SessionHooks
from retold.models import Principal
from retold.policy.grants import no_grant_reason, readable_scopes
from retold.runtime import Runtime
from retold.tools.export import result_text

__all__ = ["PROFILE_URI", "build_server", "call_result", "serve_failure", "serve_http", "serve_stdio",
           "token_digest"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")
Identify = Callable[[ServerRequestContext[Any, Any]], Principal]
"""Finds the principal of one request (and starts its session on first use)."""

SERVER_NAME = "retold"
HTTP_PATH = "/mcp"
PROFILE_URI = "retold://profile"


def call_result(tool: str, result: Mapping[str, Any]) -> types.CallToolResult:
    """A tool result as an MCP answer: the text the model reads (a search's rendered block,
    compact JSON otherwise), the whole result as structured content, and ``is_error`` for
    a refused call so the model sees the code and message and can correct itself."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=result_text(tool, result))],
        structured_content=dict(result),
        is_error="error" in result,
    )


class _Sessions:
    """One Retold session per principal for the life of the server process."""

    def __init__(self, hooks: SessionHooks) -> None:
        self._hooks = hooks
        self._open: dict[Principal, Principal] = {}
        self._lock = threading.Lock()

    def principal(self, who: Principal) -> Principal:
        """``who`` (no session id) with its session, started the first time it is asked for."""
        with self._lock:
            found = self._open.get(who)
            if found is None:
                found = replace(who, session_id=f"mcp-{uuid.uuid4()}")
                self._hooks.on_session_start(found)
                self._open[who] = found
            return found

    def end_all(self) -> None:
        """End every session this server started (each schedules its extraction once)."""
        with self._lock:
            opened, self._open = list(self._open.values()), {}
        for principal in opened:
            try:
                self._hooks.on_session_end(principal)
            except Exception:  # one failure must not leave the other sessions open
                log.exception("could not end MCP session %s", principal.session_id)


def build_server(rt: Runtime, identify: Identify, *, profile: str = "") -> Server[Any]:
    """A low-level MCP server whose tools are exactly ``rt.tools.schemas(principal)``.

    The low-level server registers the published JSON Schemas as they are; a decorator
    server would derive new ones from Python signatures. Bad arguments reach the handlers,
    which answer ``invalid_input`` like every other adapter. ``profile`` (the one stdio
    principal's profile block) goes into the server's instructions, which a client reads
    once at start; every caller can also read its own block as the :data:`PROFILE_URI`
    resource, which is how HTTP clients, whose principals differ, get theirs.
    """
    # The Runtime builds its parts on first use and is not meant for concurrent callers;
    # one call at a time also matches SQLite's single writer.
    serial = threading.Lock()

    async def in_worker(work: Callable[[], _T]) -> _T:
        def locked() -> _T:
            with serial:
                return work()

        return await anyio.to_thread.run_sync(locked)

    async def list_tools(ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        schemas = await in_worker(lambda: rt.tools.schemas(identify(ctx)))
        return types.ListToolsResult(tools=[
            types.Tool(name=s["name"], description=s["description"], input_schema=s["input_schema"])
            for s in schemas
        ])

    async def call_tool(ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments: dict[str, Any] = params.arguments or {}
        result = await in_worker(lambda: rt.tools.call(params.name, identify(ctx), arguments))
        return call_result(params.name, result)

    async def list_resources(ctx: ServerRequestContext[Any, Any],
                             params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[types.Resource(
            name="profile", uri=PROFILE_URI, mime_type="text/plain",
            description="This session's profile: the user's standing facts and instructions, fixed"
                        " for the session, and how many memories of each kind a search could find.")])

    async def read_resource(ctx: ServerRequestContext[Any, Any],
                            params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        if str(params.uri) != PROFILE_URI:
            raise ValueError(f"unknown resource {params.uri}")
        block = await in_worker(lambda: rt.profiles.for_session(identify(ctx)))
        return types.ReadResourceResult(contents=[types.TextResourceContents(
            uri=PROFILE_URI, mime_type="text/plain", text=block.text)])

    instructions = f"{_INSTRUCTIONS}\n\n{profile}" if profile else _INSTRUCTIONS
    return Server(SERVER_NAME, instructions=instructions, on_list_tools=list_tools,
                  on_call_tool=call_tool, on_list_resources=list_resources,
                  on_read_resource=read_resource)


_INSTRUCTIONS = ("Durable memory for this user. Search before answering from memory; write what the user"
                 " states or decides, quoting their words as evidence.")


# -- stdio ------------------------------------------------------------------------------------


def serve_stdio(rt: Runtime, agent_id: str, user_id: str, project_id: str | None = None) -> None:
    """Serve one principal over stdin/stdout until the client closes stdin or a SIGINT or
    SIGTERM arrives; the session starts before the first message and ends on the way out.

    An agent that may read nothing but its private scope is served all the same (a grant
    may come later), but says so once on stderr, which clients keep in their server log,
    and in the instructions the client reads: otherwise it looks like an empty memory."""
    sessions = _Sessions(rt.hooks)
    principal = sessions.principal(Principal(agent_id, user_id, project_id=project_id))
    lacking = no_grant_reason(rt.store, principal, readable_scopes(rt.store, principal))
    if lacking:
        print(f"retold mcp: {lacking}", file=sys.stderr)
    # Assembled as the session starts, before the client's first request.
    profile = rt.profiles.for_session(principal).text
    note = f"Note: {lacking}." if lacking else ""
    server = build_server(rt, lambda ctx: principal, profile="\n\n".join(p for p in (note, profile) if p))
    try:
        anyio.run(_run_stdio, server)
    finally:
        sessions.end_all()


def serve_failure(reason: str) -> None:
    """Answer a client over stdio with why the server could not start: the reason as the
    server's instructions and as the error of every tool call, with no tools listed, until
    the client closes stdin. A client shows a server that answers; one that exited at once
    shows only a broken pipe."""

    async def list_tools(ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[])

    async def call_tool(ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(type="text", text=reason)], is_error=True)

    anyio.run(_run_stdio, Server(SERVER_NAME, instructions=reason, on_list_tools=list_tools,
                                 on_call_tool=call_tool))


async def _run_stdio(server: Server[Any]) -> None:
    async with anyio.create_task_group() as group:
        group.start_soon(_cancel_on_signal, group.cancel_scope)
        async with stdio_server(stdin=await _stdin_lines()) as (read, write):
            await server.run(read, write, server.create_initialization_options())
        group.cancel_scope.cancel()


class _PipeLines:
    """Lines of the stdin pipe read by the event loop itself.

    The SDK's default reader blocks a worker thread in ``readline``, which no cancellation
    can interrupt, so a stop signal with stdin still open would hang until the client
    closed it; a read on the loop is cancelled at once and the sessions end.
    """

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> _PipeLines:
        return self

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


_MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # one JSON-RPC message per line; the default limit is 64 KiB


async def _stdin_lines() -> Any:
    """stdin for the SDK's stdio transport: a :class:`_PipeLines` where stdin is a pipe or a
    terminal, or None (the SDK's own reader) where it is a regular file."""
    reader = asyncio.StreamReader(limit=_MAX_MESSAGE_BYTES)
    try:
        await asyncio.get_running_loop().connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    except ValueError:  # a regular file cannot be watched by the loop
        return None
    return _PipeLines(reader)


async def _cancel_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            scope.cancel()
            return


# -- streamable HTTP ----------------------------------------------------------------------------


class _TokenVerifier:
    """Maps a bearer token to its configured principal by the token's SHA-256.

    Comparing hashes rather than tokens means a timing difference can reveal at most the
    hash of the caller's own guess, never a configured token.
    """

    def __init__(self, tokens: Sequence[McpTokenConfig]) -> None:
        self._by_digest = {t.sha256: Principal(t.agent_id, t.user_id, project_id=t.project_id)
                           for t in tokens}

    async def verify_token(self, token: str) -> AccessToken | None:
        digest = token_digest(token)
        if digest not in self._by_digest:
            return None
        # The digest is the client id: the SDK binds each MCP session to the client that
        # opened it, and the raw token is kept nowhere.
        return AccessToken(token=digest, client_id=digest, scopes=[])

    def principal_of(self, ctx: ServerRequestContext[Any, Any]) -> Principal:
        """The principal behind the request's verified token."""
        request = ctx.request
        user = getattr(request, "scope", {}).get("user") if request is not None else None
        if not isinstance(user, AuthenticatedUser):
            # the auth middleware answers 401 first; reaching here is a wiring error
            raise PermissionError("request reached a tool without a verified bearer token")
        return self._by_digest[user.access_token.client_id]


def serve_http(rt: Runtime, host: str, port: int, *,
               on_listening: Callable[[str], None] | None = None) -> None:
    """Serve streamable HTTP at ``http://host:port/mcp`` until SIGINT or SIGTERM;
    ``on_listening(url)`` is called once the socket is bound, so what it says is true.

    Every request must carry ``Authorization: Bearer <token>`` for a token in
    ``mcp.tokens``; with none configured this refuses to start, because it never serves
    anonymous callers.
    """
    import uvicorn

    class Announced(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.started and on_listening is not None:
                on_listening(f"http://{_url_host(host)}:{port}{HTTP_PATH}")

    tokens = tokens_for(rt.config.mcp.tokens, rt.tenant)
    if not tokens:
        raise ConfigError(f"mcp.tokens: no bearer token of tenant {rt.tenant} configured; the HTTP server"
                          " never serves anonymous callers")
    verifier = _TokenVerifier(tokens)
    sessions = _Sessions(rt.hooks)
    server = build_server(rt, lambda ctx: sessions.principal(verifier.principal_of(ctx)))
    # The SDK installs its bearer middleware only with AuthSettings; this server is its own
    # issuer (no OAuth routes, no resource metadata), so the URL is informational.
    auth = AuthSettings(issuer_url=f"http://{_url_host(host)}:{port}",  # type: ignore[arg-type]
                        resource_server_url=None)
    app = server.streamable_http_app(streamable_http_path=HTTP_PATH, host=host, auth=auth,
                                     token_verifier=verifier)
    # uvicorn shuts down gracefully on SIGINT/SIGTERM and then re-raises the signal to the
    # handler it found; ours turns that into a normal return so the sessions still end.
    previous = {sig: signal.signal(sig, _raise_stop) for sig in _STOP_SIGNALS}
    try:
        Announced(uvicorn.Config(app, host=host, port=port, log_level="warning")).run()
    except _Stop:
        pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sessions.end_all()


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Stop(Exception):
    """A stop signal, raised where the main thread was when it arrived."""


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop(signal.Signals(signum).name)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
