"""What the clients on the two official provider SDKs share: building the SDK's client
lazily, and mapping its errors.

The ``anthropic`` and ``openai`` packages are generated from one template, so they raise
the same error classes (``APITimeoutError`` inside ``APIConnectionError``,
``APIStatusError`` with the HTTP status); one mapping turns either into a HostedError.
Neither SDK is imported until a provider is first used.
"""

from __future__ import annotations

import importlib
import threading
from abc import abstractmethod
from types import ModuleType
from typing import Generic, TypeVar

from retold.hosted.client import CompletionClient, HostedError, timed_out

__all__ = ["SdkClient", "import_sdk", "sdk_failure"]

T = TypeVar("T")


class SdkClient(CompletionClient, Generic[T]):
    """A CompletionClient on an official SDK, whose client (a ``T``) is built on first use.

    It is built once even when several threads ask at once (query rewrites run on worker
    threads), and with the SDK's own retries off, so that
    :meth:`CompletionClient.complete` alone decides what is retried and how often. A
    provider names its package and implements :meth:`_build` and :meth:`_call`.
    """

    sdk_name: str  # the package imported on first use

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
        self._sdk: T | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # never show the key
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"

    def prepare(self) -> None:
        """Import the SDK and build its client now."""
        self._client()

    def _client(self) -> T:
        with self._lock:
            if self._sdk is None:
                self._sdk = self._build(import_sdk(self.sdk_name, self.model))
            return self._sdk

    @abstractmethod
    def _build(self, sdk: ModuleType) -> T:
        """The SDK's client for this key and endpoint, with the SDK's retries off."""


def import_sdk(name: str, model: str) -> ModuleType:
    """The SDK package ``name``, or HostedError ``not_configured`` when it is not installed:
    the optional extra is missing, and no retry can install it."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise HostedError(
            "not_configured", f"{model} needs the {name} SDK: pip install 'retold[hosted]'"
        ) from exc


def sdk_failure(sdk: ModuleType, exc: Exception, api: str, model: str, timeout_ms: int) -> HostedError:
    """``exc``, raised by the SDK module ``sdk`` while calling ``api``, as a HostedError.

    Timeouts, lost connections, HTTP 429 and 5xx are transient; any other status is our
    request or our key, and asking again cannot fix it. Neither can OpenAI's 429 for an
    exhausted quota, which says so in its error code.
    """
    if isinstance(exc, sdk.APITimeoutError):  # before APIConnectionError: it is one
        return timed_out(model, timeout_ms)
    if isinstance(exc, sdk.APIConnectionError):
        return HostedError("provider", f"cannot reach the {api}: {exc}", retryable=True)
    if isinstance(exc, sdk.APIStatusError):
        status: int = exc.status_code
        transient = (status == 429 or status >= 500) and getattr(exc, "code", None) != "insufficient_quota"
        return HostedError("provider", f"{api} answered HTTP {status}: {exc.message}", retryable=transient)
    return HostedError("provider", f"{api} error: {exc}")
