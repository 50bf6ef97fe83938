"""ScriptedApi: a JSON API on a loopback port that answers from a script, for driving the
real provider SDKs in tests without a network.

Each provider stub (``anthropic_stub``, ``openai_stub``) says what its one route is, how
it refuses a request and what a scripted answer looks like; serving, scripting, recording
requests and delaying answers past a client's timeout are the same for both and live
here.
"""

from __future__ import annotations

import itertools
import json
import threading
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, TypeVar

__all__ = ["Reply", "ScriptedApi", "credential"]

B = TypeVar("B")  # how one request is answered, in a provider's own terms


@dataclass(frozen=True)
class Reply:
    """What the stub sends back: an HTTP status and JSON body, after ``delay_s``."""

    status: int
    body: dict[str, Any]
    delay_s: float = 0.0


class ScriptedApi(ABC, Generic[B]):
    """The running server: ``base_url`` for the SDK, ``script()`` and the recorded requests.

    A request that arrives with nothing left in the script is answered by
    :meth:`respond` with ``None``; the stubs make that an HTTP 400, which no client
    retries, so an unexpected extra call fails its test loudly.
    """

    route: str  # the one path served, e.g. "/v1/messages"
    base_path: str = ""  # appended to the origin in base_url, e.g. "/v1"

    def __init__(self) -> None:
        self._script: deque[B] = deque()
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
        self.base_url = f"http://{host!s}:{port}{self.base_path}"
        # A short poll interval so shutdown() at teardown returns in milliseconds.
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name=type(self).__name__, daemon=True
        )

    @property
    def api_keys(self) -> list[str | None]:
        """The API key each request carried, in arrival order."""
        with self._lock:
            return [credential(h) for h in self.headers]

    def script(self, *answers: B) -> None:
        """Queue how the next requests are answered, one per request."""
        with self._lock:
            self._script.extend(answers)

    def start(self) -> None:
        """Serve on the ephemeral loopback port in a background thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def next_id(self) -> int:
        """A fresh number for the ids in an answer."""
        return next(self._ids)

    def _next(self, body: dict[str, Any], headers: dict[str, str]) -> B | None:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            return self._script.popleft() if self._script else None

    @abstractmethod
    def respond(self, body: dict[str, Any], headers: dict[str, str], scripted: B | None) -> Reply:
        """The reply to one request on the route, given the next scripted answer (None when
        the script is empty): a refusal where the real API would refuse the request."""

    @abstractmethod
    def not_found(self, path: str) -> dict[str, Any]:
        """The error body for a request to any other path (sent with HTTP 404)."""


def credential(headers: dict[str, str]) -> str | None:
    """The API key a request carried: ``x-api-key`` or an ``Authorization`` bearer token."""
    bearer = headers.get("authorization", "")
    return headers.get("x-api-key") or (bearer[7:] if bearer.lower().startswith("bearer ") else None)


def _handler_for(api: ScriptedApi[Any]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # Keep-alive, as the real APIs offer: the SDK's connection pool then reuses one
        # connection instead of paying a connect and a server thread per request.
        protocol_version = "HTTP/1.1"
        # Headers and body leave in two writes; with Nagle's algorithm on, the body would
        # wait for the client's delayed ACK of the headers (up to 40 ms on Linux), a cost
        # no real API adds to a response.
        disable_nagle_algorithm = True

        def do_POST(self) -> None:  # noqa: N802 - the name http.server dispatches to
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k.lower(): v for k, v in self.headers.items()}
            if self.path.split("?")[0] != api.route:
                self._send(Reply(404, api.not_found(self.path)))
                return
            body = json.loads(raw or b"{}")
            reply = api.respond(body, headers, api._next(body, headers))
            if reply.delay_s and api.stopping.wait(reply.delay_s):
                return  # torn down while waiting; the client gave up long ago
            self._send(reply)

        def _send(self, reply: Reply) -> None:
            data = json.dumps(reply.body).encode()
            try:
                self.send_response(reply.status)
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
