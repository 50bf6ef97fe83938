"""A local stand-in for OpenAI's Chat Completions API, for driving the real SDK in tests.

It refuses a tools list the way the API does (a malformed name, an input schema that is
not an object or combines schemas at its top level, a ``strict`` function whose schema
breaks the strict-mode rules) and otherwise answers from a script of tool calls and
replies::

    with serve_openai_stub() as stub:
        stub.script(tool_call("memory_write", {...}), reply("Noted."))
        client = openai.OpenAI(api_key="test", base_url=stub.base_url)

A request that arrives with nothing left in the script gets HTTP 400.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from retold.tools.export import STRICT_UNSUPPORTED, TOOL_NAME

__all__ = ["OpenAIStub", "Scripted", "refusal", "reply", "serve_openai_stub", "tool_call"]


@dataclass(frozen=True)
class Scripted:
    """One scripted answer: a function call (``name`` and ``arguments``) or a text reply."""

    text: str | None = None
    name: str | None = None
    arguments: dict[str, Any] | None = None


def tool_call(name: str, arguments: dict[str, Any]) -> Scripted:
    """Answer with one call of function ``name`` with ``arguments``."""
    return Scripted(name=name, arguments=arguments)


def reply(text: str) -> Scripted:
    """Answer with assistant text and ``finish_reason: stop``."""
    return Scripted(text=text)


def refusal(tools: list[Any]) -> str | None:
    """Why the API would refuse this tools list, or None."""
    for index, tool in enumerate(tools):
        function = tool.get("function", {}) if isinstance(tool, dict) else {}
        where = f"tools[{index}].function"
        if not TOOL_NAME.fullmatch(str(function.get("name", ""))):
            return f"Invalid '{where}.name': string does not match pattern."
        params = function.get("parameters", {})
        if params.get("type") != "object" or {"oneOf", "anyOf", "allOf"} & set(params):
            return f"Invalid schema for function '{function['name']}': schema must be a JSON Schema " \
                   "of 'type: \"object\"', got a combinator at the top level."
        if function.get("strict"):
            problem = _strict_problem(params)
            if problem:
                return f"Invalid schema for function '{function['name']}': {problem}"
    return None


def _strict_problem(node: Any, path: str = "") -> str | None:
    if isinstance(node, list):
        return next((p for i, n in enumerate(node) if (p := _strict_problem(n, f"{path}/{i}"))), None)
    if not isinstance(node, dict):
        return None
    bad = sorted(STRICT_UNSUPPORTED & set(node))
    if bad:
        return f"In context=({path or '/'}), '{bad[0]}' is not permitted."
    where = f"In context=({path or '/'}),"
    if node.get("type") == "object" or "properties" in node:
        if node.get("additionalProperties") is not False:
            return f"{where} 'additionalProperties' is required to be supplied and to be false."
        missing = [k for k in node.get("properties", {}) if k not in node.get("required", [])]
        if missing:
            return f"{where} 'required' is required to include every key; missing '{missing[0]}'."
    return next((p for k, v in node.items() if (p := _strict_problem(v, f"{path}/{k}"))), None)


class OpenAIStub:
    """The running stub: ``base_url`` for the SDK, ``script()`` and the recorded requests."""

    def __init__(self) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._script: deque[Scripted] = deque()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.requests: list[dict[str, Any]] = []

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def script(self, *answers: Scripted) -> None:
        """Queue how the next requests are answered, one answer per request."""
        with self._lock:
            self._script.extend(answers)

    def _next(self, body: dict[str, Any]) -> Scripted | None:
        with self._lock:
            self.requests.append(body)
            return self._script.popleft() if self._script else None

    def _completion(self, answer: Scripted, body: dict[str, Any]) -> dict[str, Any]:
        n = next(self._ids)
        message: dict[str, Any] = {"role": "assistant", "content": answer.text, "refusal": None}
        if answer.name is not None:
            message["tool_calls"] = [{"id": f"call_stub{n:04d}", "type": "function", "function": {
                "name": answer.name, "arguments": json.dumps(answer.arguments or {})}}]
        return {
            "id": f"chatcmpl-stub{n:04d}", "object": "chat.completion", "created": 0,
            "model": body.get("model", "unknown"),
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": "tool_calls" if answer.name else "stop"}],
            "usage": {"prompt_tokens": 42, "completion_tokens": 17, "total_tokens": 59},
        }


def _handler_for(stub: OpenAIStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the name http.server dispatches to
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path.split("?")[0] != "/v1/chat/completions":
                self._send(404, _error(f"no route {self.path}"))
                return
            body = json.loads(raw or b"{}")
            answer = stub._next(body)
            refused = refusal(body.get("tools") or [])
            if refused:
                self._send(400, _error(refused))
            elif answer is None:
                self._send(400, _error("the stub has no scripted answer for this request"))
            else:
                self._send(200, stub._completion(answer, body))

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base signature
            pass

    return Handler


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}


@contextmanager
def serve_openai_stub() -> Iterator[OpenAIStub]:
    """Run an :class:`OpenAIStub` for the duration of the ``with`` block."""
    stub = OpenAIStub()
    stub._thread.start()
    try:
        yield stub
    finally:
        stub._server.shutdown()
        stub._server.server_close()
