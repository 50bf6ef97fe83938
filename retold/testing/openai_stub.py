"""A local stand-in for OpenAI's Chat Completions API, for driving the real SDK in tests.

It refuses what the API refuses (no key; a request without a model or messages; a tools
list with a malformed name, an input schema that is not an object or combines schemas at
its top level, or a ``strict`` function whose schema breaks the strict-mode rules; a
``json_schema`` response format the same rules refuse; a ``tool_choice`` naming no
offered function) and otherwise answers from a script::

    with serve_openai_stub() as stub:
        stub.script(answer({"queries": ["a"]}), error(500), tool_call("memory_write", {...}))
        client = openai.OpenAI(api_key="test", base_url=stub.base_url)

:func:`answer` replies in the form the request asked for: JSON content for a
``json_schema`` response format, else a call of the forced (or first) function. A request
that arrives with nothing left in the script gets HTTP 400, which no client retries.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from retold.testing.loopback import Reply, ScriptedApi, credential
from retold.tools.export import STRICT_UNSUPPORTED, TOOL_NAME

__all__ = [
    "OpenAIStub",
    "Scripted",
    "answer",
    "error",
    "model_refusal",
    "refusal",
    "refused_request",
    "reply",
    "serve_openai_stub",
    "tool_call",
]

_ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error",
                429: "requests", 500: "server_error", 503: "server_error"}


@dataclass(frozen=True)
class Scripted:
    """How the stub answers one request, after ``delay_s``."""

    kind: Literal["answer", "tool_call", "text", "refusal", "error"]
    payload: Any = None  # the answer object, the call's arguments, the text or the error message
    name: str | None = None  # tool_call: the function called
    status: int = 200  # error: the HTTP status
    code: str | None = None  # error: the API's error code, e.g. "insufficient_quota"
    delay_s: float = 0.0
    finish_reason: str | None = None  # None = the natural one for the kind


def answer(obj: Any, *, delay_s: float = 0.0, finish_reason: str | None = None) -> Scripted:
    """Answer with ``obj`` in the form the request asked for (JSON content or a function call)."""
    return Scripted("answer", obj, delay_s=delay_s, finish_reason=finish_reason)


def tool_call(name: str, arguments: Any) -> Scripted:
    """Answer with one call of function ``name`` with ``arguments``."""
    return Scripted("tool_call", arguments, name=name)


def reply(text: str) -> Scripted:
    """Answer with assistant text and ``finish_reason: stop``."""
    return Scripted("text", text)


def model_refusal(text: str = "I can't help with that.") -> Scripted:
    """Answer with the model declining: ``message.refusal`` set, no content."""
    return Scripted("refusal", text)


def error(status: int, message: str = "scripted failure", *, code: str | None = None,
          delay_s: float = 0.0) -> Scripted:
    """Answer HTTP ``status`` with an OpenAI error body."""
    return Scripted("error", message, status=status, code=code, delay_s=delay_s)


def refused_request(body: dict[str, Any]) -> str | None:
    """Why the API would refuse this request body, or None."""
    missing = [key for key in ("model", "messages") if key not in body]
    if missing:
        return f"Missing required parameter: '{missing[0]}'."
    tools = body.get("tools") or []
    refused = refusal(tools)
    if refused:
        return refused
    response_format = body.get("response_format") or {}
    if response_format.get("type") == "json_schema":
        spec = response_format.get("json_schema") or {}
        if not TOOL_NAME.fullmatch(str(spec.get("name", ""))):
            return "Invalid 'response_format.json_schema.name': string does not match pattern."
        schema = spec.get("schema") or {}
        if spec.get("strict"):
            problem = ("schema must be a JSON Schema of 'type: \"object\"'" if schema.get("type") != "object"
                       else _strict_problem(schema))
            if problem:
                return f"Invalid schema for response_format '{spec['name']}': {problem}"
    chosen = body.get("tool_choice")
    if isinstance(chosen, dict):
        name = (chosen.get("function") or {}).get("name")
        if name not in {(t.get("function") or {}).get("name") for t in tools if isinstance(t, dict)}:
            return f"Invalid value for 'tool_choice': no function named '{name}' among the tools."
    return None


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


class OpenAIStub(ScriptedApi[Scripted]):
    """The running stub: ``base_url`` for the SDK, ``script()`` and the recorded requests."""

    route = "/v1/chat/completions"
    base_path = "/v1"

    def respond(self, body: dict[str, Any], headers: dict[str, str], scripted: Scripted | None) -> Reply:
        """Refuse what the Chat Completions API refuses, else play ``scripted``."""
        if not credential(headers):
            return Reply(401, _error(401, "You didn't provide an API key.", "invalid_api_key"))
        refused = refused_request(body)
        if refused:
            return Reply(400, _error(400, refused))
        if scripted is None:
            return Reply(400, _error(400, "the stub has no scripted answer for this request"))
        if scripted.kind == "error":
            return Reply(scripted.status, _error(scripted.status, str(scripted.payload), scripted.code),
                         scripted.delay_s)
        return Reply(200, self._completion(scripted, body), scripted.delay_s)

    def not_found(self, path: str) -> dict[str, Any]:
        return _error(404, f"no route {path}")

    def _completion(self, scripted: Scripted, body: dict[str, Any]) -> dict[str, Any]:
        """A chat.completion object in the real shape."""
        n = self.next_id()
        message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
        call_name = scripted.name if scripted.kind == "tool_call" else None
        as_json = (body.get("response_format") or {}).get("type") == "json_schema"
        if scripted.kind == "answer" and not as_json and body.get("tools"):
            chosen = body.get("tool_choice")
            forced = chosen.get("function", {}).get("name") if isinstance(chosen, dict) else None
            call_name = forced or body["tools"][0]["function"]["name"]
        if call_name is not None:
            message["tool_calls"] = [{"id": f"call_stub{n:04d}", "type": "function", "function": {
                "name": call_name, "arguments": json.dumps(scripted.payload)}}]
        elif scripted.kind == "answer":
            message["content"] = json.dumps(scripted.payload)
        elif scripted.kind == "refusal":
            message["refusal"] = scripted.payload
        else:
            message["content"] = scripted.payload
        natural = "tool_calls" if call_name is not None else "stop"
        return {
            "id": f"chatcmpl-stub{n:04d}", "object": "chat.completion", "created": 0,
            "model": body.get("model", "unknown"),
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": scripted.finish_reason or natural}],
            "usage": {"prompt_tokens": 42, "completion_tokens": 17, "total_tokens": 59},
        }


def _error(status: int, message: str, code: str | None = None) -> dict[str, Any]:
    kind = "insufficient_quota" if code == "insufficient_quota" else _ERROR_TYPES.get(status, "server_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


@contextmanager
def serve_openai_stub() -> Iterator[OpenAIStub]:
    """Run an :class:`OpenAIStub` for the duration of the ``with`` block."""
    stub = OpenAIStub()
    stub.start()
    try:
        yield stub
    finally:
        stub.stop()
