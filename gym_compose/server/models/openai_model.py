"""openai_model: a proxy from the Responses API to any OpenAI-compatible endpoint.

`api_mode: responses` (default) passes `/v1/responses` through; `api_mode: chat_completions`
converts to `/chat/completions` and back, for vLLM, SGLang, llama.cpp, Ollama. Upstream calls have
timeouts, retries and a concurrency cap (`upstream.UpstreamCallConfig`); a call that fails for good
answers 502 (504 for a timeout) with the reason: the agent's rollout fails with it, the server goes on.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gym_compose.net.web import json_response, read_json_object
from gym_compose.server.base import BaseServer, BaseServerConfig
from gym_compose.server.models.chat_conversion import chat_to_response, responses_to_chat
from gym_compose.server.models.upstream import UpstreamCallConfig, UpstreamClient, UpstreamError
from gym_compose.server.task_header import TASK_HEADER

LOG = logging.getLogger("gym_compose.server.openai_model")
API_MODES = ("responses", "chat_completions")


class OpenAIModelConfig(BaseServerConfig, UpstreamCallConfig):
    openai_base_url: str
    openai_api_key: str = ""
    openai_model: str = ""
    openai_default_headers: dict[str, str] = {}
    extra_body: dict[str, Any] = {}
    api_mode: str = "responses"
    forward_task_header: bool = False  # only for a mock_model upstream: it carries the row's answers


class OpenAIModel(BaseServer):
    config: OpenAIModelConfig

    _upstream: Optional[UpstreamClient] = None

    def setup_webserver(self) -> Starlette:
        if self.config.api_mode not in API_MODES:
            raise ValueError(f"api_mode must be one of {', '.join(API_MODES)}, not {self.config.api_mode!r}")
        headers = dict(self.config.openai_default_headers)
        if self.config.openai_api_key:
            headers["Authorization"] = f"Bearer {self.config.openai_api_key}"
        self._upstream = UpstreamClient(self.config.openai_base_url, self.config, headers, key_name="openai_base_url")
        return Starlette(routes=[
            Route("/v1/responses", self._responses, methods=["POST"]),
            Route("/v1/chat/completions", self._chat_completions, methods=["POST"]),
        ])

    def _headers(self, request: Request) -> dict[str, str]:
        if self.config.forward_task_header and TASK_HEADER in request.headers:
            return {TASK_HEADER: request.headers[TASK_HEADER]}
        return {}

    async def _call(self, path: str, body: dict[str, Any], request: Request) -> dict[str, Any]:
        if self.config.openai_model:
            body["model"] = self.config.openai_model
        body.update(self.config.extra_body)
        assert self._upstream is not None  # set up with the web server
        return await self._upstream.post_json(path, body, self._headers(request))

    async def _responses(self, request: Request) -> Response:
        params = await read_json_object(request)
        try:
            if self.config.api_mode == "responses":
                return json_response(await self._call("/responses", params, request))
            try:
                chat = responses_to_chat(params, self.config.openai_model)
            except (ValueError, KeyError, TypeError, AttributeError) as error:
                raise UpstreamError(
                    f"the request cannot be sent to a chat-completions endpoint: {_reason(error)}") from error
            completion = await self._call("/chat/completions", chat, request)
            try:
                return json_response(chat_to_response(completion, params))
            except (ValueError, KeyError, TypeError, AttributeError) as error:
                raise UpstreamError(
                    f"upstream model endpoint answered a chat completion that cannot be read: {_reason(error)}"
                ) from error
        except UpstreamError as error:
            return upstream_error_response(error)

    async def _chat_completions(self, request: Request) -> Response:
        body = await read_json_object(request)
        try:
            return json_response(await self._call("/chat/completions", body, request))
        except UpstreamError as error:
            return upstream_error_response(error)

    async def on_shutdown(self) -> None:
        if self._upstream is not None:
            await self._upstream.aclose()
        await super().on_shutdown()


def upstream_error_response(error: UpstreamError) -> Response:
    body: dict[str, Any] = {"error": str(error), "type": "upstream_error"}
    if error.upstream_status is not None:
        body["upstream_status"] = error.upstream_status
    return json_response(body, error.status)


def _reason(error: Exception) -> str:
    return str(error) if isinstance(error, ValueError) else f"{type(error).__name__}: {error}"
