"""CompletionClient: one provider-neutral structured completion for every hosted model.

The public :meth:`CompletionClient.complete` handles the timeout, bounded retries on
transient errors and validation of the answer against the JSON schema, once for every
provider; a provider implements only :meth:`CompletionClient._call`. The Anthropic SDK is
imported only when its provider is first used.

::

    CompletionClient.complete(request)
        _call(request) -> raw answer      the provider: one attempt, timeout_ms enforced
        retry transient HostedErrors      timeout, connection, 429, 5xx; at most max_retries
        validate against request.schema   once; a bad answer is "malformed", never retried
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from jsonschema.validators import validator_for

from retold.errors import RetoldError

if TYPE_CHECKING:  # only for annotations: the SDK stays unimported until first use
    import anthropic
    from anthropic.types import MessageParam, ToolChoiceToolParam, ToolParam

    from retold.config import HostedConfig

__all__ = [
    "AnthropicClient",
    "CompletionClient",
    "CompletionRequest",
    "FakeCompletionClient",
    "HostedError",
    "Message",
    "client_from_config",
]

log = logging.getLogger(__name__)

HostedFailure = Literal["timeout", "provider", "malformed", "not_configured"]

# Backoff before retry n (0-based) is retry_backoff_s * 2**n, never more than this.
_MAX_BACKOFF_S = 2.0


class HostedError(RetoldError):
    """A hosted call failed; ``kind`` says how (callers fail closed on any of them).

    ``retryable`` marks a transient failure (a timeout, a lost connection, HTTP 429 or
    5xx) that :meth:`CompletionClient.complete` may try again; providers set it.
    """

    def __init__(self, kind: HostedFailure, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.kind: HostedFailure = kind
        self.retryable = retryable


@dataclass(frozen=True)
class Message:
    """One conversation turn sent to the model."""

    role: Literal["user", "assistant"]
    content: str


@dataclass(frozen=True)
class CompletionRequest:
    """One structured completion: the answer must be a JSON object matching ``schema``."""

    system: str
    messages: tuple[Message, ...]
    schema: dict[str, Any]
    schema_name: str  # the tool name the provider is asked to call with the answer
    max_output_tokens: int
    timeout_ms: int


class CompletionClient(ABC):
    """Template: ``complete`` does retries and validation; providers do ``_call``."""

    model: str
    max_retries: int = 2
    retry_backoff_s: float = 0.25

    def prepare(self) -> None:  # noqa: B027 - optional hook, a no-op unless a provider needs it
        """Load what the provider needs now instead of on the first call.

        Hot-path callers (the query rewriter) use it so a first call's short timeout is
        not spent importing an SDK. Raises HostedError ``not_configured`` when the
        provider cannot be used at all.
        """

    def complete(self, request: CompletionRequest) -> dict[str, Any]:
        """The validated answer object, or HostedError.

        Each attempt gets ``request.timeout_ms``; a transient failure is retried up to
        ``max_retries`` times with a short exponential backoff. The answer is checked
        against ``request.schema`` once: a non-object or non-matching answer is
        ``malformed`` and not retried (the same prompt would most likely fail again).
        """
        attempts = 1 + max(self.max_retries, 0)
        for attempt in range(attempts):
            try:
                answer = self._attempt(request)
            except HostedError as exc:
                if not exc.retryable or attempt + 1 == attempts:
                    if attempt == 0:
                        raise
                    raise HostedError(
                        exc.kind, f"{exc} (after {attempt + 1} attempts)", retryable=exc.retryable
                    ) from exc
                delay = min(self.retry_backoff_s * 2**attempt, _MAX_BACKOFF_S)
                log.info("%s: %s; retrying in %.2f s", self.model, exc, delay)
                time.sleep(delay)
                continue
            return _validated(answer, request, self.model)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _attempt(self, request: CompletionRequest) -> object:
        # A provider should map its own errors; builtin timeouts and connection errors
        # from a simpler provider are still recognised as transient.
        try:
            return self._call(request)
        except TimeoutError as exc:
            raise HostedError(
                "timeout", f"{self.model} did not answer within {request.timeout_ms} ms", retryable=True
            ) from exc
        except ConnectionError as exc:
            raise HostedError("provider", f"{self.model}: connection failed: {exc}", retryable=True) from exc

    @abstractmethod
    def _call(self, request: CompletionRequest) -> object:
        """One attempt: send ``request`` within ``request.timeout_ms`` and return the raw
        answer (normally the tool-input dict). Raise HostedError, with ``retryable`` set
        for transient failures; do not validate or retry here."""


def _validated(answer: object, request: CompletionRequest, model: str) -> dict[str, Any]:
    if not isinstance(answer, dict):
        raise HostedError("malformed", f"{model} answered {type(answer).__name__}, not a JSON object")
    validator = validator_for(request.schema, default=Draft202012Validator)(request.schema)
    error = best_match(validator.iter_errors(answer))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise HostedError(
            "malformed", f"{model}: answer does not match {request.schema_name}: {where}: {error.message}"
        )
    return answer


@dataclass
class FakeCompletionClient(CompletionClient):
    """Scripted answers for tests: each call pops the next answer; an exception
    in the script is raised. Every request is recorded in ``calls``."""

    answers: Sequence[dict[str, Any] | Exception | Callable[[CompletionRequest], dict[str, Any]]]
    model: str = "fake-model"
    calls: list[CompletionRequest] = field(default_factory=list)

    def complete(self, request: CompletionRequest) -> dict[str, Any]:
        """Record ``request`` and play the next scripted answer.

        No retry and no validation: this fake stands at the provider boundary, so a test
        gets exactly the answer or the HostedError it scripted.
        """
        self.calls.append(request)
        return self._call(request)

    def _call(self, request: CompletionRequest) -> dict[str, Any]:
        if len(self.calls) > len(self.answers):
            raise HostedError("provider", "fake client has no more scripted answers")
        answer = self.answers[len(self.calls) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer(request) if callable(answer) else answer


class AnthropicClient(CompletionClient):
    """The Anthropic Messages API as a CompletionClient: the answer is forced through a
    single tool whose ``input_schema`` is the request's schema.

    The SDK client is built on first use with the SDK's own retries off, so that
    :meth:`CompletionClient.complete` alone decides what is retried and how often.
    """

    def __init__(
        self,
        model: str,
        api_key: str,
        base_url: str | None = None,
        max_retries: int = 2,
        *,
        retry_backoff_s: float = 0.25,
    ) -> None:
        self.model = model
        self.base_url = base_url
        self.max_retries = max_retries
        self.retry_backoff_s = retry_backoff_s
        self._api_key = api_key
        self._sdk: anthropic.Anthropic | None = None
        self._lock = threading.Lock()  # rewrites run on worker threads

    def __repr__(self) -> str:  # never show the key
        return f"AnthropicClient(model={self.model!r}, base_url={self.base_url!r})"

    def prepare(self) -> None:
        """Import the SDK and build its client now."""
        self._client()

    def _client(self) -> anthropic.Anthropic:
        with self._lock:
            if self._sdk is None:
                try:
                    import anthropic
                except ImportError as exc:
                    raise HostedError(
                        "not_configured",
                        f"{self.model} needs the Anthropic SDK: pip install 'retold[hosted]'",
                    ) from exc
                self._sdk = anthropic.Anthropic(api_key=self._api_key, base_url=self.base_url, max_retries=0)
            return self._sdk

    def _call(self, request: CompletionRequest) -> object:
        import anthropic
        from anthropic.types import ToolUseBlock

        client = self._client()
        messages: list[MessageParam] = [
            {"role": "user", "content": m.content}
            if m.role == "user"
            else {"role": "assistant", "content": m.content}
            for m in request.messages
        ]
        tool: ToolParam = {
            "name": request.schema_name,
            "description": f"Record the answer as one {request.schema_name} object.",
            "input_schema": request.schema,
        }
        choice: ToolChoiceToolParam = {"type": "tool", "name": request.schema_name}
        try:
            response = client.messages.create(
                model=self.model,
                max_tokens=request.max_output_tokens,
                system=request.system,
                messages=messages,
                tools=[tool],
                tool_choice=choice,
                timeout=request.timeout_ms / 1000,
            )
        except anthropic.APITimeoutError as exc:  # before APIConnectionError: it is one
            raise HostedError(
                "timeout", f"{self.model} did not answer within {request.timeout_ms} ms", retryable=True
            ) from exc
        except anthropic.APIConnectionError as exc:
            raise HostedError("provider", f"cannot reach the Anthropic API: {exc}", retryable=True) from exc
        except anthropic.APIStatusError as exc:
            # 429 and 5xx (529 overloaded included) pass; any other 4xx is our request or
            # our key, and asking again cannot fix it.
            transient = exc.status_code == 429 or exc.status_code >= 500
            message = f"Anthropic API answered HTTP {exc.status_code}: {exc.message}"
            raise HostedError("provider", message, retryable=transient) from exc
        except anthropic.APIError as exc:
            raise HostedError("provider", f"Anthropic API error: {exc}") from exc
        if response.stop_reason == "max_tokens":
            # A tool call cut at the token cap carries a partial input; never trust it.
            raise HostedError("malformed", f"{self.model} hit max_output_tokens={request.max_output_tokens}")
        for block in response.content:
            if isinstance(block, ToolUseBlock) and block.name == request.schema_name:
                return block.input
        kinds = ", ".join(getattr(b, "type", "?") for b in response.content) or "nothing"
        raise HostedError(
            "malformed", f"{self.model} answered with {kinds}, not a {request.schema_name} call"
        )


def client_from_config(
    model: str, hosted: HostedConfig, environ: Mapping[str, str]
) -> CompletionClient | None:
    """The CompletionClient for ``model``, or None when no API key is available.

    The key is read from ``environ[hosted.api_key_env]``; the caller passes ``os.environ``
    (nothing here reads the environment itself). Without a key the product still runs
    and the hosted components report that they are not configured. ``claude-*`` models
    use the Anthropic SDK; any other model name is HostedError ``not_configured``, whether
    or not a key is set, because no provider serves it.
    """
    if not model.startswith("claude-"):
        raise HostedError(
            "not_configured", f"no hosted provider for model {model!r} (supported: claude-* models)"
        )
    api_key = environ.get(hosted.api_key_env, "").strip()
    if not api_key:
        return None
    return AnthropicClient(model, api_key, base_url=hosted.base_url, max_retries=hosted.max_retries)
