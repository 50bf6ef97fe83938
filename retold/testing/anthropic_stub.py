"""A local stand-in for the Anthropic Messages API, for driving the real SDK in tests.

Hosted-model tests run the official ``anthropic`` SDK against this
server on loopback instead of monkeypatching the client. A test scripts what the next
requests get (:meth:`AnthropicStub.script`) and reads back what the SDK sent
(:attr:`AnthropicStub.requests`)::

    stub.script(tool_use({"queries": ["a"]}), error(500), tool_use({...}, delay_s=1.0))

A request that arrives with nothing left in the script gets HTTP 400, which the client
does not retry, so an unexpected extra call fails the test loudly.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

__all__ = [
    "AnthropicStub",
    "Behaviour",
    "error",
    "rate_limited",
    "serve_anthropic_stub",
    "text_only",
    "tool_use",
]

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


@dataclass(frozen=True)
class Behaviour:
    """How the stub answers one request: after ``delay_s``, a tool call, a text block or
    an HTTP error."""

    kind: Literal["tool_use", "text", "error"]
    payload: Any = None  # the tool input, the text, or the error message
    status: int = 200
    delay_s: float = 0.0
    stop_reason: str | None = None  # None = the natural one for the kind
    tool_name: str | None = None  # None = the forced tool, else the first one offered


def tool_use(tool_input: Any, *, name: str | None = None, delay_s: float = 0.0,
             stop_reason: str = "tool_use") -> Behaviour:
    """Answer with one ``tool_use`` block carrying ``tool_input``, for tool ``name`` (by
    default the forced tool, else the first one offered)."""
    return Behaviour("tool_use", tool_input, delay_s=delay_s, stop_reason=stop_reason, tool_name=name)


def text_only(text: str = "I would rather not use the tool.") -> Behaviour:
    """Answer with a single text block and no tool call."""
    return Behaviour("text", text, stop_reason="end_turn")


def error(status: int, message: str = "scripted failure", *, delay_s: float = 0.0) -> Behaviour:
    """Answer HTTP ``status`` with an Anthropic error body."""
    return Behaviour("error", message, status=status, delay_s=delay_s)


def rate_limited() -> Behaviour:
    """Answer HTTP 429 ``rate_limit_error``."""
    return error(429, "Number of request tokens has exceeded your per-minute rate limit")


class AnthropicStub:
    """The running stub: ``base_url`` for the SDK, ``script()`` and the recorded requests."""

    def __init__(self) -> None:
        self._script: deque[Behaviour] = deque()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.requests: list[dict[str, Any]] = []  # each request body, in arrival order
        self.headers: list[dict[str, str]] = []  # the matching headers, names lower-cased
        self.stopping = threading.Event()  # wakes delayed answers at teardown
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        # Daemon handler threads: a handler still sleeping out a timeout must not hold up
        # the test run's exit.
        self._server.daemon_threads = True
        host, port = self._server.server_address[:2]
        self.base_url = f"http://{host!s}:{port}"
        # A short poll interval so shutdown() at teardown returns in milliseconds.
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="anthropic-stub", daemon=True
        )

    @property
    def api_keys(self) -> list[str | None]:
        """The API key each request carried, in arrival order."""
        with self._lock:
            return [_credential(h) for h in self.headers]

    def script(self, *behaviours: Behaviour) -> None:
        """Queue how the next requests are answered, one behaviour per request."""
        with self._lock:
            self._script.extend(behaviours)

    def start(self) -> None:
        """Serve on the ephemeral loopback port in a background thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _next(self, body: dict[str, Any], headers: dict[str, str]) -> Behaviour | None:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            return self._script.popleft() if self._script else None

    def _message(self, behaviour: Behaviour, body: dict[str, Any]) -> dict[str, Any]:
        """A Messages API response in the real shape."""
        n = next(self._ids)
        if behaviour.kind == "tool_use":
            tools = body.get("tools") or [{}]
            name = (behaviour.tool_name or (body.get("tool_choice") or {}).get("name")
                    or tools[0].get("name", "tool"))
            block: dict[str, Any] = {
                "type": "tool_use",
                "id": f"toolu_stub{n:04d}",
                "name": name,
                "input": behaviour.payload,
            }
        else:
            block = {"type": "text", "text": behaviour.payload}
        return {
            "id": f"msg_stub{n:04d}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "unknown"),
            "content": [block],
            "stop_reason": behaviour.stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": 42, "output_tokens": 17},
        }


def _credential(headers: dict[str, str]) -> str | None:
    # SDK versions differ: older ones send x-api-key, newer ones an Authorization bearer.
    bearer = headers.get("authorization", "")
    return headers.get("x-api-key") or (bearer[7:] if bearer.lower().startswith("bearer ") else None)


def _error_body(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": _ERROR_TYPES.get(status, "api_error"), "message": message}}


def _refused_tool(tools: list[Any]) -> str | None:
    """The API's own refusals of a tools list: a malformed name or an input schema that is
    not an object, or that combines schemas at its top level (the whole request fails)."""
    for index, tool in enumerate(tools):
        name = tool.get("name", "") if isinstance(tool, dict) else ""
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", str(name)):
            return f"tools.{index}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
        schema = tool.get("input_schema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            return f"tools.{index}.input_schema.type: Input should be 'object'"
        if any(key in schema for key in ("oneOf", "anyOf", "allOf")):
            return (f"tools.{index}.custom.input_schema: input_schema does not support oneOf, "
                    "allOf, or anyOf at the top level")
    return None


def _handler_for(stub: AnthropicStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the name http.server dispatches to
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k.lower(): v for k, v in self.headers.items()}
            if self.path.split("?")[0] != "/v1/messages":
                self._send(404, _error_body(404, f"no route {self.path}"))
                return
            body = json.loads(raw or b"{}")
            behaviour = stub._next(body, headers)
            if not _credential(headers):
                self._send(401, _error_body(401, "x-api-key header is required"))
                return
            missing = [k for k in ("model", "max_tokens", "messages") if k not in body]
            if missing:
                self._send(400, _error_body(400, f"missing: {', '.join(missing)}"))
                return
            refused = _refused_tool(body.get("tools") or [])
            if refused:
                self._send(400, _error_body(400, refused))
                return
            if behaviour is None:
                self._send(400, _error_body(400, "the stub has no scripted answer for this request"))
                return
            if behaviour.delay_s and stub.stopping.wait(behaviour.delay_s):
                return  # torn down while waiting; the client gave up long ago
            if behaviour.kind == "error":
                self._send(behaviour.status, _error_body(behaviour.status, str(behaviour.payload)))
            else:
                self._send(200, stub._message(behaviour, body))

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("request-id", "req_stub")
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client timed out and closed the connection: expected in timeout tests

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base signature
            pass  # keep test output clean

    return Handler


@contextmanager
def serve_anthropic_stub() -> Iterator[AnthropicStub]:
    """Run an :class:`AnthropicStub` for the duration of the ``with`` block."""
    stub = AnthropicStub()
    stub.start()
    try:
        yield stub
    finally:
        stub.stop()
