"""CompletionClient: one provider-neutral structured completion (DESIGN.md decision 7).

The public :meth:`CompletionClient.complete` handles the timeout, bounded retries on
transient errors and validation of the answer against the JSON schema, once for every
provider; a provider implements only :meth:`CompletionClient._call`. The Anthropic SDK is
imported only when its provider is built.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from retold.errors import RetoldError

__all__ = [
    "CompletionClient",
    "CompletionRequest",
    "FakeCompletionClient",
    "HostedError",
    "Message",
]

HostedFailure = Literal["timeout", "provider", "malformed", "not_configured"]


class HostedError(RetoldError):
    """A hosted call failed; ``kind`` says how (callers fail closed on any of them)."""

    def __init__(self, kind: HostedFailure, message: str) -> None:
        super().__init__(message)
        self.kind: HostedFailure = kind


@dataclass(frozen=True)
class Message:
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
    """Template: ``complete`` does timeout, retries and validation; providers do ``_call``."""

    model: str

    @abstractmethod
    def complete(self, request: CompletionRequest) -> dict[str, Any]:
        """The validated answer object, or HostedError."""


@dataclass
class FakeCompletionClient(CompletionClient):
    """Scripted answers for tests (LLD 17.1): each call pops the next answer; an exception
    in the script is raised. Every request is recorded in ``calls``."""

    answers: Sequence[dict[str, Any] | Exception | Callable[[CompletionRequest], dict[str, Any]]]
    model: str = "fake-model"
    calls: list[CompletionRequest] = field(default_factory=list)

    def complete(self, request: CompletionRequest) -> dict[str, Any]:
        self.calls.append(request)
        if len(self.calls) > len(self.answers):
            raise HostedError("provider", "fake client has no more scripted answers")
        answer = self.answers[len(self.calls) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer(request) if callable(answer) else answer
