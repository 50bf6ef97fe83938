"""What the planner and the judge share: one structured call to a hosted model under a
versioned system prompt. Prompts are package files, so a prompt change is a new file and
a new version, and so a new bundle hash."""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from typing import Any

from retold.hosted.client import CompletionClient, CompletionRequest, Message

__all__ = ["HostedPrompt", "load_prompt"]


@cache
def load_prompt(version: str) -> str:
    """The system prompt of ``version``, read from the package data on first use."""
    return files("retold.utility").joinpath("prompts").joinpath(f"{version}.md").read_text(encoding="utf-8")


class HostedPrompt:
    """A hosted model answering under the prompt ``prompt_version`` names."""

    prompt_version: str

    def __init__(self, client: CompletionClient, max_output_tokens: int) -> None:
        self._client, self._max_output_tokens = client, max_output_tokens

    @property
    def model(self) -> str:
        return self._client.model

    @property
    def version(self) -> str:
        """The model and prompt this answers with, for the bundle hash."""
        return f"{self._client.model}/{self.prompt_version}"

    def _ask(self, shown: str, schema: dict[str, Any], schema_name: str, timeout_ms: int,
             **fill: object) -> dict[str, Any]:
        """The validated answer to ``shown``; the prompt's ``{names}`` filled from ``fill``."""
        system = load_prompt(self.prompt_version)
        return self._client.complete(CompletionRequest(
            system=system.format(**fill) if fill else system, messages=(Message("user", shown),),
            schema=schema, schema_name=schema_name, max_output_tokens=self._max_output_tokens,
            timeout_ms=timeout_ms))
