"""A local stand-in for the Anthropic Messages API, for driving the real SDK in tests.

Hosted-model tests run the official ``anthropic`` SDK against this
server on loopback instead of monkeypatching the client. A test scripts what the next
requests get (:meth:`AnthropicStub.script`) and reads back what the SDK sent
(:attr:`AnthropicStub.requests`)::

    stub.script(tool_use({"queries": ["a"]}), error(500), tool_use({...}, delay_s=1.0))

A request that arrives with nothing left in the script gets HTTP 400, which the client
does not retry, so an unexpected extra call fails the test loudly.

:class:`StandIn` answers every request instead, with a text reply saying that no model was
called; ``python -m retold.testing.anthropic_stub`` serves it and prints the two variables
that point the SDK at it, so an example written for the Messages API runs with no key.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from retold.testing.loopback import Reply, ScriptedApi, credential
from retold.testing.scripted import stand_in_reply

__all__ = [
    "AnthropicStub",
    "Behaviour",
    "StandIn",
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


class AnthropicStub(ScriptedApi[Behaviour]):
    """The running stub: ``base_url`` for the SDK, ``script()`` and the recorded requests."""

    route = "/v1/messages"

    def respond(self, body: dict[str, Any], headers: dict[str, str], scripted: Behaviour | None) -> Reply:
        """Refuse what the Messages API refuses, else play ``scripted``."""
        if not credential(headers):
            return Reply(401, _error_body(401, "x-api-key header is required"))
        missing = [k for k in ("model", "max_tokens", "messages") if k not in body]
        if missing:
            return Reply(400, _error_body(400, f"missing: {', '.join(missing)}"))
        refused = _refused_tool(body.get("tools") or [])
        if refused:
            return Reply(400, _error_body(400, refused))
        if scripted is None:
            return Reply(400, _error_body(400, "the stub has no scripted answer for this request"))
        if scripted.kind == "error":
            failure = _error_body(scripted.status, str(scripted.payload))
            return Reply(scripted.status, failure, scripted.delay_s)
        return Reply(200, self._message(scripted, body), scripted.delay_s)

    def not_found(self, path: str) -> dict[str, Any]:
        return _error_body(404, f"no route {path}")

    def _message(self, behaviour: Behaviour, body: dict[str, Any]) -> dict[str, Any]:
        """A Messages API response in the real shape."""
        n = self.next_id()
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


@contextmanager
def serve_anthropic_stub(stub: AnthropicStub | None = None) -> Iterator[AnthropicStub]:
    """Run ``stub`` (by default a plain :class:`AnthropicStub`; a subclass may answer in its
    own way) for the duration of the ``with`` block."""
    stub = stub or AnthropicStub()
    stub.start()
    try:
        yield stub
    finally:
        stub.stop()


class StandIn(AnthropicStub):
    """A stub that answers what is not scripted with :func:`stand_in_reply` for the newest
    user message: the text names the model asked for, so nobody mistakes it for an answer."""

    def respond(self, body: dict[str, Any], headers: dict[str, str], scripted: Behaviour | None) -> Reply:
        if scripted is None:
            scripted = text_only(stand_in_reply(str(body.get("model", "a model")), _last_user_text(body)))
        return super().respond(body, headers, scripted)


def _last_user_text(body: dict[str, Any]) -> str:
    """The text of the newest user message that has any (tool results carry none)."""
    for message in reversed(body.get("messages") or []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        texts = [b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text"]
        if texts:
            return " ".join(texts)
    return ""


def main() -> None:
    """Serve :class:`StandIn` until interrupted, after printing how to point the SDK at it."""
    stand_in = StandIn()
    stand_in.start()
    print(f"export ANTHROPIC_BASE_URL={stand_in.base_url}")
    print("export ANTHROPIC_API_KEY=scripted-stand-in")
    print("# a scripted stand-in for the Messages API; no model is called. Ctrl-C stops it.",
          file=sys.stderr, flush=True)
    sys.stdout.flush()
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        stand_in.stop()


if __name__ == "__main__":
    main()
