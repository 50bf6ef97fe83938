"""AnthropicClient: the Anthropic Messages API as a CompletionClient.

The answer is forced through a single tool whose ``input_schema`` is the request's
schema. The SDK is imported only when the client is first used.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

from retold.hosted.client import CompletionRequest, HostedError
from retold.hosted.sdk import SdkClient, sdk_failure
from retold.hosted.spend import note

if TYPE_CHECKING:  # only for annotations: the SDK stays unimported until first use
    import anthropic

__all__ = ["AnthropicClient"]


class AnthropicClient(SdkClient["anthropic.Anthropic"]):
    """Structured completions through the official ``anthropic`` SDK."""

    sdk_name = "anthropic"

    def _build(self, sdk: ModuleType) -> anthropic.Anthropic:
        client: anthropic.Anthropic = sdk.Anthropic(api_key=self._api_key, base_url=self.base_url,
                                                    max_retries=0)
        return client

    def _call(self, request: CompletionRequest) -> object:
        import anthropic
        from anthropic.types import MessageParam, ToolChoiceToolParam, ToolParam, ToolUseBlock

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
        except anthropic.APIError as exc:
            raise sdk_failure(anthropic, exc, "Anthropic API", self.model, request.timeout_ms) from exc
        usage = getattr(response, "usage", None)
        note(getattr(usage, "input_tokens", None), getattr(usage, "output_tokens", None))
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
