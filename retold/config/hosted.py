"""``hosted:``: which provider serves the hosted models, and the rules that tie it to the
model names the other blocks give.

A provider that cannot serve a configured model, or an API-key variable that belongs to
the other provider, would otherwise show up only as failed extractions; the config
loader reports them instead, one line each, naming the key to change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

__all__ = ["HostedConfig", "HostedProvider", "StructuredOutput", "hosted_errors"]

HostedProvider = Literal["anthropic", "openai"]
StructuredOutput = Literal["auto", "tools"]

# Each provider's own key variable, used to spot a key meant for the other provider.
_STANDARD_KEY_ENV: dict[str, str] = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}


@dataclass(frozen=True, slots=True)
class HostedConfig:
    """``hosted:`` - the hosted-model provider for extraction, review and query rewriting; without
    a key everything else works and extraction reports ``not_configured``."""

    # anthropic = the Anthropic Messages API; openai = any OpenAI-compatible Chat Completions
    # server (OpenAI, OpenRouter, vLLM, Ollama), chosen by base_url
    provider: HostedProvider = "anthropic"
    base_url: str | None = None  # None = the provider's own endpoint
    api_key_env: str = "ANTHROPIC_API_KEY"  # no key there = hosted models not configured
    max_retries: int = 2  # retries of a timeout, 429 or 5xx; 0 = none
    # openai only: auto = a strict JSON-schema response format when the answer schema fits
    # strict mode, else a forced tool call; tools = always a tool call
    structured_output: StructuredOutput = "auto"


def hosted_errors(hosted: HostedConfig, models: Mapping[str, str]) -> list[str]:
    """What is wrong with ``hosted`` given the hosted models the config names (dotted key
    to model name), one line each."""
    errors: list[str] = []
    if not hosted.api_key_env.strip():
        errors.append("hosted.api_key_env: must name the environment variable that holds the API key")
    elif any(hosted.api_key_env == env and provider != hosted.provider
             for provider, env in _STANDARD_KEY_ENV.items()):
        errors.append(
            f"hosted.api_key_env: {hosted.api_key_env} holds a key for another provider than"
            f" hosted.provider {hosted.provider}; name the variable that holds its key"
            f" (e.g. {_STANDARD_KEY_ENV[hosted.provider]})")
    if hosted.base_url is not None:
        url = urlsplit(hosted.base_url)
        if url.scheme not in ("http", "https") or not url.netloc:
            errors.append(f"hosted.base_url: must be an http:// or https:// URL, got {hosted.base_url!r}")
    if hosted.provider == "anthropic":
        errors.extend(
            f"{key}: hosted.provider anthropic serves only claude-* models, not {model!r}; set"
            " hosted.provider: openai for an OpenAI-compatible server"
            for key, model in models.items() if not model.startswith("claude-"))
    elif hosted.base_url is None:
        claude = sorted(key for key, model in models.items() if model.startswith("claude-"))
        if claude:
            errors.append(
                f"hosted.base_url: not set, so hosted.provider openai asks api.openai.com, which serves"
                f" no Claude model ({', '.join(claude)}); set base_url to the server that serves"
                " them, or name OpenAI models")
    return errors

