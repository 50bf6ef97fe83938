"""CompletionClient: one provider-neutral structured completion for every hosted model.

The public :meth:`CompletionClient.complete` handles the timeout, bounded retries on
transient errors and validation of the answer against the JSON schema, once for every
provider; a provider implements only :meth:`CompletionClient._call`.

::

    CompletionClient.complete(request)
        _call(request) -> raw answer      the provider: one attempt, timeout_ms enforced
        retry transient HostedErrors      timeout, connection, 429, 5xx; at most max_retries
        validate against request.schema   once; a bad answer is "malformed", never retried
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from jsonschema.validators import validator_for

from retold.errors import RetoldError

__all__ = [
    "CompletionClient",
    "CompletionRequest",
    "FakeCompletionClient",
    "HostedError",
    "HostedFailure",
    "Message",
    "timed_out",
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
    schema_name: str  # names the answer for the provider: its tool, or its response format
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
            raise timed_out(self.model, request.timeout_ms) from exc
        except ConnectionError as exc:
            raise HostedError("provider", f"{self.model}: connection failed: {exc}", retryable=True) from exc

    @abstractmethod
    def _call(self, request: CompletionRequest) -> object:
        """One attempt: send ``request`` within ``request.timeout_ms`` and return the raw
        answer (normally the tool-input dict). Raise HostedError, with ``retryable`` set
        for transient failures; do not validate or retry here."""


def timed_out(model: str, timeout_ms: int) -> HostedError:
    """The transient failure of an attempt that outlived its ``timeout_ms``."""
    return HostedError("timeout", f"{model} did not answer within {timeout_ms} ms", retryable=True)


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
