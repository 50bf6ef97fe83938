"""client_from_config: the CompletionClient that the ``hosted:`` config block names for a model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from retold.hosted.anthropic_api import AnthropicClient
from retold.hosted.client import CompletionClient, HostedError
from retold.hosted.openai_api import OpenAIClient

if TYPE_CHECKING:
    from retold.config.hosted import HostedConfig

__all__ = ["client_from_config"]


def client_from_config(
    model: str, hosted: HostedConfig, environ: Mapping[str, str]
) -> CompletionClient | None:
    """The CompletionClient for ``model``, or None when no API key is available.

    The key is read from ``environ[hosted.api_key_env]``; the caller passes ``os.environ``
    (nothing here reads the environment itself). Without a key the product still runs
    and the hosted components report that they are not configured. ``hosted.provider``
    picks the SDK: ``anthropic`` serves only ``claude-*`` models, so any other name is
    HostedError ``not_configured`` whether or not a key is set; ``openai`` serves any
    model name its server knows.
    """
    if hosted.provider == "anthropic" and not model.startswith("claude-"):
        raise HostedError(
            "not_configured",
            f"no hosted provider for model {model!r}: hosted.provider anthropic serves only claude-*"
            " models; set hosted.provider: openai for an OpenAI-compatible server",
        )
    api_key = environ.get(hosted.api_key_env, "").strip()
    if not api_key:
        return None
    if hosted.provider == "openai":
        return OpenAIClient(model, api_key, base_url=hosted.base_url, max_retries=hosted.max_retries,
                            structured_output=hosted.structured_output)
    return AnthropicClient(model, api_key, base_url=hosted.base_url, max_retries=hosted.max_retries)
