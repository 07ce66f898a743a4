"""openai_model: a proxy from the Responses API to any OpenAI-compatible endpoint.

`api_mode: responses` (default) passes `/v1/responses` through; `api_mode: chat_completions`
converts to `/chat/completions` and back, for vLLM, SGLang, llama.cpp, Ollama. An upstream error
or timeout answers 502 with the reason (the agent's rollout fails with it; the server goes on).
"""

from __future__ import annotations

import logging
from typing import Any, Optional
from urllib.parse import urlsplit

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gym_compose.server.agents.common import TASK_HEADER
from gym_compose.server.base import BaseServer, BaseServerConfig
from gym_compose.server.http_client import HttpClient, PeerConnectError, PeerTimeout
from gym_compose.server.models.chat_conversion import chat_to_response, responses_to_chat
from gym_compose.server.web import json_response, read_json_object

LOG = logging.getLogger("gym_compose.server.openai_model")
API_MODES = ("responses", "chat_completions")


class OpenAIModelConfig(BaseServerConfig):
    openai_base_url: str
    openai_api_key: str = ""
    openai_model: str = ""
    openai_default_headers: dict[str, str] = {}
    extra_body: dict[str, Any] = {}
    api_mode: str = "responses"
    request_timeout_seconds: float = 600.0
    forward_task_header: bool = False  # only for a mock_model upstream: it carries the row's answers


class UpstreamError(Exception):
    def __init__(self, message: str, status: int = 502):
        self.status = status
        super().__init__(message)


class _Upstream:
    """Plain-HTTP upstreams (in-network servers) use the fast pooled client; HTTPS uses httpx."""

    def __init__(self, base_url: str, timeout: float):
        self.base_url = base_url.rstrip("/")
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"openai_base_url must be an http(s) URL, not {base_url!r}")
        self.plain = parts.scheme == "http"
        self.host, self.port, self.prefix = parts.hostname, parts.port or (80 if self.plain else 443), parts.path
        self.timeout = timeout
        self._fast = HttpClient(timeout=timeout) if self.plain else None
        self._httpx = None

    async def post(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, bytes]:
        if self._fast is not None:
            answer = await self._fast.request("POST", self.host, self.port, self.prefix + path,
                                              json=body, headers=headers)
            return answer.status, answer.body
        import httpx

        if self._httpx is None:
            self._httpx = httpx.AsyncClient(timeout=self.timeout)
        answer = await self._httpx.post(self.base_url + path, content=orjson.dumps(body),
                                        headers={"content-type": "application/json", **headers})
        return answer.status_code, answer.content

    async def aclose(self) -> None:
        if self._fast is not None:
            await self._fast.aclose()
        if self._httpx is not None:
            await self._httpx.aclose()


class OpenAIModel(BaseServer):
    config: OpenAIModelConfig

    _upstream: Optional[_Upstream] = None

    def setup_webserver(self) -> Starlette:
        if self.config.api_mode not in API_MODES:
            raise ValueError(f"api_mode must be one of {', '.join(API_MODES)}, not {self.config.api_mode!r}")
        self._upstream = _Upstream(self.config.openai_base_url, self.config.request_timeout_seconds)
        return Starlette(routes=[
            Route("/v1/responses", self._responses, methods=["POST"]),
            Route("/v1/chat/completions", self._chat_completions, methods=["POST"]),
        ])

    def _headers(self, request: Request) -> dict[str, str]:
        headers = dict(self.config.openai_default_headers)
        if self.config.openai_api_key:
            headers["Authorization"] = f"Bearer {self.config.openai_api_key}"
        if self.config.forward_task_header and TASK_HEADER in request.headers:
            headers[TASK_HEADER] = request.headers[TASK_HEADER]
        return headers

    async def _call(self, path: str, body: dict[str, Any], request: Request) -> dict[str, Any]:
        if self.config.openai_model:
            body["model"] = self.config.openai_model
        body.update(self.config.extra_body)
        try:
            status, raw = await self._upstream.post(path, body, self._headers(request))
        except (PeerConnectError, PeerTimeout, OSError) as error:
            raise UpstreamError(f"upstream model endpoint {self.config.openai_base_url} failed: {error}") from error
        except Exception as error:  # httpx errors, when the upstream is HTTPS
            raise UpstreamError(f"upstream model endpoint {self.config.openai_base_url} failed: {error!r}") from error
        if not 200 <= status < 300:
            raise UpstreamError(
                f"upstream model endpoint answered HTTP {status}: {raw[:2000].decode('utf-8', 'replace')}",
                502 if status >= 500 or status in (401, 403, 404, 429) else status,
            )
        try:
            answer = orjson.loads(raw)
        except orjson.JSONDecodeError as error:
            raise UpstreamError(
                f"upstream model endpoint answered HTTP {status} with a body that is not JSON ({error}): "
                f"{raw[:2000].decode('utf-8', 'replace')}"
            ) from error
        if not isinstance(answer, dict):
            raise UpstreamError(f"upstream model endpoint answered HTTP {status} with JSON that is not an object: "
                                f"{raw[:2000].decode('utf-8', 'replace')}")
        return answer

    async def _responses(self, request: Request) -> Response:
        params = await read_json_object(request)
        try:
            if self.config.api_mode == "responses":
                return json_response(await self._call("/responses", params, request))
            try:
                chat = responses_to_chat(params, self.config.openai_model)
            except (ValueError, KeyError, TypeError, AttributeError) as error:
                raise UpstreamError(f"the request cannot be sent to a chat-completions endpoint: {_reason(error)}") from error
            completion = await self._call("/chat/completions", chat, request)
            try:
                return json_response(chat_to_response(completion, params))
            except (ValueError, KeyError, TypeError, AttributeError) as error:
                raise UpstreamError(
                    f"upstream model endpoint answered a chat completion that cannot be read: {_reason(error)}"
                ) from error
        except UpstreamError as error:
            return json_response({"error": str(error), "type": "upstream_error"}, error.status)

    async def _chat_completions(self, request: Request) -> Response:
        body = await read_json_object(request)
        try:
            return json_response(await self._call("/chat/completions", body, request))
        except UpstreamError as error:
            return json_response({"error": str(error), "type": "upstream_error"}, error.status)

    async def on_shutdown(self) -> None:
        if self._upstream is not None:
            await self._upstream.aclose()
        await super().on_shutdown()


def _reason(error: Exception) -> str:
    return str(error) if isinstance(error, ValueError) else f"{type(error).__name__}: {error}"
