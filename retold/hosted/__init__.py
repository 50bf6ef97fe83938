"""Hosted models: one provider-neutral structured completion for extraction, review and
query rewriting.

::

    client.py          CompletionClient.complete: timeout, bounded retries, schema validation
    anthropic_api.py   AnthropicClient._call: the Anthropic Messages API, one forced tool
    openai_api.py      OpenAIClient._call: any OpenAI-compatible Chat Completions API
    strict.py          strict_form: whether a schema can be sent in OpenAI's strict mode
    sdk.py             what both official SDKs share: lazy building, error mapping
    factory.py         client_from_config: the client the ``hosted:`` block names

Each provider implements one private method; everything a caller relies on (the
retries, the timeout, the validation, failing closed with a HostedError) happens once
in :class:`CompletionClient`.
"""

from retold.hosted.anthropic_api import AnthropicClient
from retold.hosted.client import (
    CompletionClient,
    CompletionRequest,
    FakeCompletionClient,
    HostedError,
    HostedFailure,
    Message,
)
from retold.hosted.factory import client_from_config
from retold.hosted.openai_api import OpenAIClient

__all__ = [
    "AnthropicClient",
    "CompletionClient",
    "CompletionRequest",
    "FakeCompletionClient",
    "HostedError",
    "HostedFailure",
    "Message",
    "OpenAIClient",
    "client_from_config",
]
