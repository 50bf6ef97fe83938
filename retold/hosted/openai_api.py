"""OpenAIClient: any OpenAI-compatible Chat Completions API as a CompletionClient.

One client serves OpenAI, OpenRouter, vLLM and Ollama: ``base_url`` picks the server. The
answer comes back as a strict ``json_schema`` response format when the schema fits strict
mode (:func:`retold.hosted.strict.strict_form`), else as a forced call of one function
whose parameters are the schema. The SDK is imported only when the client is first used.
"""

from __future__ import annotations

import json
from types import ModuleType
from typing import TYPE_CHECKING

from retold.config.hosted import StructuredOutput
from retold.hosted.client import CompletionRequest, HostedError
from retold.hosted.sdk import SdkClient, sdk_failure
from retold.hosted.spend import note
from retold.hosted.strict import strict_form

if TYPE_CHECKING:  # only for annotations: the SDK stays unimported until first use
    import openai
    from openai.types.chat import ChatCompletion

__all__ = ["OPENAI_BASE_URL", "OpenAIClient"]

# Passed explicitly when no base_url is configured: left unset, the SDK would read
# OPENAI_BASE_URL from the environment, and only the composition root reads it.
OPENAI_BASE_URL = "https://api.openai.com/v1"


class OpenAIClient(SdkClient["openai.OpenAI"]):
    """Structured completions through the official ``openai`` SDK.

    ``structured_output="tools"`` always uses a forced function call, for servers that
    do not implement the ``json_schema`` response format.
    """

    sdk_name = "openai"

    def __init__(
        self,
        model: str,
        api_key: str,
        base_url: str | None = None,
        max_retries: int = 2,
        *,
        retry_backoff_s: float = 0.25,
        structured_output: StructuredOutput = "auto",
    ) -> None:
        super().__init__(model, api_key, base_url or OPENAI_BASE_URL, max_retries,
                         retry_backoff_s=retry_backoff_s)
        self.structured_output: StructuredOutput = structured_output

    def _build(self, sdk: ModuleType) -> openai.OpenAI:
        client: openai.OpenAI = sdk.OpenAI(api_key=self._api_key, base_url=self.base_url, max_retries=0)
        return client

    def _call(self, request: CompletionRequest) -> object:
        import openai
        from openai.types.chat import (
            ChatCompletionFunctionToolParam,
            ChatCompletionMessageParam,
            ChatCompletionNamedToolChoiceParam,
        )
        from openai.types.shared_params import ResponseFormatJSONSchema

        client = self._client()
        messages: list[ChatCompletionMessageParam] = [{"role": "system", "content": request.system}]
        messages.extend({"role": "user", "content": m.content} if m.role == "user"
                        else {"role": "assistant", "content": m.content} for m in request.messages)
        strict = strict_form(request.schema) if self.structured_output == "auto" else None
        response_format: ResponseFormatJSONSchema | openai.Omit = openai.omit
        tools: list[ChatCompletionFunctionToolParam] | openai.Omit = openai.omit
        choice: ChatCompletionNamedToolChoiceParam | openai.Omit = openai.omit
        if strict is not None:
            response_format = {"type": "json_schema", "json_schema": {
                "name": request.schema_name, "schema": strict, "strict": True}}
        else:
            tools = [{"type": "function", "function": {
                "name": request.schema_name,
                "description": f"Record the answer as one {request.schema_name} object.",
                "parameters": request.schema}}]
            choice = {"type": "function", "function": {"name": request.schema_name}}
        try:
            response = client.chat.completions.create(
                model=self.model,
                messages=messages,
                max_completion_tokens=request.max_output_tokens,
                response_format=response_format,
                tools=tools,
                tool_choice=choice,
                timeout=request.timeout_ms / 1000,
            )
        except openai.APIError as exc:
            api = f"OpenAI-compatible API at {self.base_url}"
            raise sdk_failure(openai, exc, api, self.model, request.timeout_ms) from exc
        usage = getattr(response, "usage", None)
        note(getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None))
        return self._answer(response, request, as_content=strict is not None)

    def _answer(self, response: ChatCompletion, request: CompletionRequest, *, as_content: bool) -> object:
        """The answer object from the message content (strict) or the forced function call."""
        from openai.types.chat import ChatCompletionMessageFunctionToolCall

        if not response.choices:
            raise HostedError("malformed", f"{self.model} answered no choices")
        choice = response.choices[0]
        if choice.finish_reason == "length":
            # An answer cut at the token cap is partial JSON at best; never trust it.
            raise HostedError("malformed", f"{self.model} hit max_output_tokens={request.max_output_tokens}")
        message = choice.message
        if message.refusal:
            raise HostedError("malformed", f"{self.model} refused to answer: {message.refusal}")
        if choice.finish_reason == "content_filter":
            raise HostedError("malformed", f"{self.model}: the answer was withheld by a content filter")
        if as_content:
            if not message.content:
                raise HostedError("malformed", f"{self.model} answered nothing, not a {request.schema_name}")
            return self._decoded(message.content, request)
        for call in message.tool_calls or ():
            if (isinstance(call, ChatCompletionMessageFunctionToolCall)
                    and call.function.name == request.schema_name):
                return self._decoded(call.function.arguments, request)
        what = "text" if message.content else "nothing"
        raise HostedError("malformed", f"{self.model} answered with {what}, not a {request.schema_name} call")

    def _decoded(self, text: str, request: CompletionRequest) -> object:
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise HostedError("malformed", f"{self.model}: the {request.schema_name} answer is not JSON: "
                                           f"{exc.msg} at character {exc.pos}") from exc
