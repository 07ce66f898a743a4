"""vllm_model: the Responses API in front of a vLLM (or SGLang) chat-completions endpoint.

Takes NeMo Gym 0.7's vllm_model config keys and does what it does (docs/models.md lists them):
reasoning parsing (`reasoning_content`/`reasoning` <-> `<think>` and reasoning items), chat
template kwargs, sampling overrides, extra body, default headers, several base URLs (a rollout's
turns stay on one), and for RL training `return_token_id_information`: every model turn's prompt
and generation token ids and generation log-probs on its last output item, the way NeMo Gym
shapes them, from inline vLLM token ids or the logprobs' `token_id:<id>` tokens plus `/tokenize`.
Upstream calls have timeouts, retries and a concurrency cap (`upstream.UpstreamCallConfig`).
The base URLs are late-bound: `PUT /_gym_compose/upstreams {"base_url": [...]}` replaces them while
the server runs (a trainer's vLLM engines, known only once they are up or after they moved);
calls already in flight finish on the old endpoints, new ones go to the new (docs/training.md).
"""

from __future__ import annotations

import copy
import hashlib
import logging
import os
import time
from typing import Any, Literal, Optional, Union

import orjson
from pydantic import Field, PrivateAttr, model_validator
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gym_compose.contract import UPSTREAMS_PATH
from gym_compose.net.web import json_response, read_json_object
from gym_compose.server.base import BaseServer, BaseServerConfig
from gym_compose.server.models.openai_model import upstream_error_response
from gym_compose.server.models.upstream import UpstreamCallConfig, UpstreamClient, UpstreamError
from gym_compose.server.models.vllm_conversion import (
    ROUTED_EXPERTS,
    TOKEN_FIELDS,
    Unconvertible,
    chat_to_response,
    parse_think,
    responses_to_chat,
    token_metadata,
    with_chat_defaults,
    wrap_think,
)
from gym_compose.server.sessions import SESSION_ID_KEY

LOG = logging.getLogger("gym_compose.server.vllm_model")
ReasoningField = Literal["both", "reasoning", "reasoning_content"]
_AUDIO_KEYS = ("audio_data", "audio_path", "audio_paths")


def _default_reasoning_field() -> str:
    return os.environ.get("NEMO_GYM_REASONING_FIELD", "").strip() or "both"


class VLLMModelConfig(BaseServerConfig, UpstreamCallConfig):
    base_url: Union[str, list[str]]
    api_key: str = ""
    model: str
    return_token_id_information: bool = False
    request_prompt_and_generation_token_ids: bool = False
    propagate_context_overflow_errors: bool = False
    uses_reasoning_parser: bool = True
    uses_interleaved_reasoning: bool = True
    reasoning_field: ReasoningField = Field(default_factory=_default_reasoning_field, validate_default=True)
    preserve_reasoning_in_assistant_content: bool = False
    replace_developer_role_with_system: bool = False
    sequential_reasoning_allowed: bool = True
    is_responses_native: bool = False
    chat_template_kwargs: Optional[dict[str, Any]] = None
    forward_request_chat_template_kwargs: bool = False
    continue_final_assistant_message: bool = False
    sampling_overrides: Optional[dict[str, Any]] = None
    extra_body: Optional[dict[str, Any]] = None
    default_headers: dict[str, str] = Field(default_factory=dict)
    forward_session_id_as_conversation_id: bool = False
    # NeMo Gym features this server does not have; set, they stop the server with a clear reason.
    supply_prefix_token_ids: bool = False
    use_completions_api: bool = False
    render_chat_template: bool = False
    endpoint_file: Optional[str] = None

    @model_validator(mode="after")
    def _supported(self) -> "VLLMModelConfig":
        unsupported = [key for key in ("supply_prefix_token_ids", "use_completions_api", "render_chat_template",
                                       "endpoint_file") if getattr(self, key)]
        if unsupported:
            raise ValueError(f"{', '.join(unsupported)}: not supported by gym-compose's vllm_model (NeMo Gym "
                             "extensions); remove the key(s), or run NeMo Gym's own vllm_model app.py")
        if self.is_responses_native and self.return_token_id_information:
            raise ValueError("return_token_id_information is not supported with is_responses_native")
        if isinstance(self.base_url, str):
            self.base_url = [self.base_url]
        if not self.base_url:
            raise ValueError("base_url: give at least one URL")
        return self


class _LocalAnswer(Exception):
    """A chat completion made here instead of upstream (NeMo Gym's empty completions)."""

    def __init__(self, completion: dict[str, Any]):
        self.completion = completion


class VLLMModel(BaseServer):
    config: VLLMModelConfig

    _clients: Optional[list[UpstreamClient]] = None
    _retired: list[UpstreamClient] = PrivateAttr(default_factory=list)  # replaced; closed at shutdown
    _warned_request_kwargs: bool = False

    def setup_webserver(self) -> Starlette:
        self._clients = self._make_clients(self._base_urls())
        if self.config.sampling_overrides:
            LOG.info("%s pins sampling on every request: %s", self.config.name, self.config.sampling_overrides)
        app = Starlette(routes=[
            Route("/v1/responses", self._responses, methods=["POST"]),
            Route("/v1/chat/completions", self._chat_completions, methods=["POST"]),
            Route(UPSTREAMS_PATH, self._upstreams, methods=["GET", "PUT"]),
        ])
        if len(self._clients) > 1 or self.config.forward_session_id_as_conversation_id:
            self.setup_session_middleware(app)
        return app

    def _base_urls(self) -> list[str]:
        urls = self.config.base_url
        return [urls] if isinstance(urls, str) else list(urls)

    def _make_clients(self, urls: list[str]) -> list[UpstreamClient]:
        headers = dict(self.config.default_headers)
        headers["Authorization"] = f"Bearer {self.config.api_key}"
        return [UpstreamClient(url, self.config, headers) for url in urls]

    # ---- routes ----

    async def _upstreams(self, request: Request) -> Response:
        """GET: the base URLs in use; PUT {"base_url": URL or [URL, ...]}: replace them (late binding)."""
        if request.method == "PUT":
            body = await read_json_object(request)
            urls = body.get("base_url")
            if isinstance(urls, str):
                urls = [urls]
            if not isinstance(urls, list) or not urls or not all(isinstance(url, str) for url in urls):
                return json_response({"error": "base_url must be a URL or a non-empty list of URLs",
                                      "type": "invalid_upstreams"}, 422)
            try:
                clients = self._make_clients(urls)
            except ValueError as error:
                return json_response({"error": str(error), "type": "invalid_upstreams"}, 422)
            old, self._clients = self._clients or [], clients
            self.config.base_url = list(urls)
            LOG.info("%s: upstream base URLs now %s", self.config.name, ", ".join(urls))
            self._retired.extend(old)  # calls in flight may still use them
        return json_response({"base_url": self._base_urls()})


    async def _responses(self, request: Request) -> Response:
        params = await read_json_object(request)
        keep_tokens = self.config.return_token_id_information
        try:
            if self.config.is_responses_native:
                return json_response(await self._responses_native(request, params))
            chat = responses_to_chat(params, keep_tokens)
            completion = await self._chat(request, chat)
            return json_response(chat_to_response(completion, params, self.config.model,
                                                  self.config.uses_reasoning_parser, keep_tokens))
        except Unconvertible as error:
            return json_response({"error": str(error), "type": "unconvertible_request"}, 422)
        except UpstreamError as error:
            return self._error_response(error)

    async def _chat_completions(self, request: Request) -> Response:
        body = await read_json_object(request)
        try:
            return json_response(with_chat_defaults(await self._chat(request, body)))
        except Unconvertible as error:
            return json_response({"error": str(error), "type": "unconvertible_request"}, 422)
        except UpstreamError as error:
            return self._error_response(error)

    def _error_response(self, error: UpstreamError) -> Response:
        if getattr(error, "propagate_body", False):
            return Response(error.body, status_code=error.upstream_status or 400, media_type="application/json")
        return upstream_error_response(error)

    # ---- the chat path ----

    async def _responses_native(self, request: Request, params: dict[str, Any]) -> dict[str, Any]:
        body = {key: value for key, value in params.items() if value is not None}
        body["model"] = self.config.model
        if self.config.chat_template_kwargs:
            body["chat_template_kwargs"] = copy.deepcopy(self.config.chat_template_kwargs)
        if self.config.extra_body:
            body = {**self.config.extra_body, **body}
        body.update(self.config.sampling_overrides or {})
        return await self._client(request).post_json("/responses", body)

    async def _chat(self, request: Request, body: dict[str, Any]) -> dict[str, Any]:
        body = self._prepare(request, copy.deepcopy(body))
        try:
            self._answer_locally_when_nothing_to_continue(body)
            completion = await self._call_upstream(request, body)
        except _LocalAnswer as local:
            return local.completion
        choice = completion["choices"][0]
        message = choice.setdefault("message", {})
        self._fold_reasoning(message, body)
        if self.config.return_token_id_information:
            await self._attach_token_ids(request, body, completion, choice, message)
        return completion

    def _prepare(self, request: Request, body: dict[str, Any]) -> dict[str, Any]:
        """The body vLLM gets: NeMo Gym's order of merges and overrides."""
        config = self.config
        for tool in body.get("tools") or []:
            if tool.get("type") == "function":  # OpenAI-hosted only; vLLM templates would print it
                (tool.get("function") or {}).pop("strict", None)
        messages = body.get("messages")
        if not isinstance(messages, list):
            raise Unconvertible("messages must be a list")
        if config.replace_developer_role_with_system:
            for message in messages:
                if message.get("role") == "developer":
                    message["role"] = "system"
        body["model"] = config.model
        metadata = body.get("metadata") or {}
        if any(metadata.get(key) for key in _AUDIO_KEYS):
            raise Unconvertible(f"metadata.{'/'.join(_AUDIO_KEYS)}: audio input is not supported by gym-compose's "
                                "vllm_model")

        kwargs = copy.deepcopy(config.chat_template_kwargs or {})
        from_request = body.pop("chat_template_kwargs", None)
        if from_request:
            if config.forward_request_chat_template_kwargs:
                kwargs.update(from_request)
            elif not self._warned_request_kwargs:
                self._warned_request_kwargs = True
                LOG.warning("%s: dropping the request's chat_template_kwargs (forward_request_chat_template_kwargs "
                            "is false); logged once", config.name)
        kwargs.update(_json_metadata(metadata, "chat_template_kwargs"))
        if kwargs:
            body["chat_template_kwargs"] = kwargs
        extra = copy.deepcopy(config.extra_body or {})
        extra.update(_json_metadata(metadata, "extra_body"))

        if config.continue_final_assistant_message and messages and messages[-1].get("role") == "assistant":
            body["continue_final_message"] = True
            body["add_generation_prompt"] = False
        if config.return_token_id_information:
            body.update(logprobs=True, top_logprobs=0, return_tokens_as_token_ids=True)
            if config.request_prompt_and_generation_token_ids:
                body["return_token_ids"] = True
        if config.uses_reasoning_parser and not config.preserve_reasoning_in_assistant_content:
            for message in messages:
                self._reasoning_out_of_content(message)
        if body.get("top_logprobs") is None:
            body.pop("top_logprobs", None)
        body = {**extra, **body}
        body.update(config.sampling_overrides or {})
        if config.return_token_id_information and body.get("n") not in (None, 1):
            raise Unconvertible(f"{config.name} needs n=1 to return token ids (return_token_id_information)")
        if config.forward_session_id_as_conversation_id:
            session_id = (request.scope.get("session") or {}).get(SESSION_ID_KEY)
            if session_id:
                body["conversation_params"] = {"conversation_id": str(session_id)}
        return body

    def _reasoning_out_of_content(self, message: dict[str, Any]) -> None:
        """An assistant message's <think> text goes to reasoning_content/reasoning, as vLLM reads it."""
        if message.get("role") != "assistant" or "content" not in message:
            return
        content = message["content"]
        found: list[str] = []
        if isinstance(content, str):
            found, message["content"] = parse_think(content)
        elif isinstance(content, list):
            for part in content:
                matches, part["text"] = parse_think(part["text"])
                if matches and found:
                    raise Unconvertible("an assistant message has reasoning in more than one content part")
                found = found or matches
        elif content:
            raise Unconvertible("assistant message content must be a string or a list of parts")
        if found and self.config.uses_interleaved_reasoning:
            if self.config.reasoning_field in ("both", "reasoning_content"):
                message["reasoning_content"] = found[0]
            if self.config.reasoning_field in ("both", "reasoning"):
                message["reasoning"] = found[0]

    def _answer_locally_when_nothing_to_continue(self, body: dict[str, Any]) -> None:
        if self.config.sequential_reasoning_allowed or not body["messages"]:
            return
        last = body["messages"][-1]
        if last.get("role") == "assistant" and not (last.get("content") or last.get("tool_calls")):
            raise _LocalAnswer(self._empty_completion("content_filter"))

    async def _call_upstream(self, request: Request, body: dict[str, Any]) -> dict[str, Any]:
        try:
            completion = await self._client(request).post_json("/chat/completions", body)
        except UpstreamError as error:
            text = error.body.decode("utf-8", "replace")
            if error.upstream_status == 400 and ("context length" in text or "max_tokens" in text):
                if self.config.propagate_context_overflow_errors:
                    error.propagate_body = True
                    raise
                raise _LocalAnswer(self._empty_completion("length")) from None
            raise
        choices = completion.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise UpstreamError(f"upstream model endpoint {self._client(request).url('/chat/completions')} answered "
                                "a chat completion without choices")
        return completion

    def _fold_reasoning(self, message: dict[str, Any], body: dict[str, Any]) -> None:
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        if not self.config.uses_reasoning_parser:
            if reasoning:
                raise UpstreamError(
                    f"{self.config.name} has uses_reasoning_parser: false, but the endpoint returned reasoning: "
                    "run vLLM without a reasoning parser, or set uses_reasoning_parser: true")
            return
        if not reasoning:
            return
        message.pop("reasoning_content", None)
        message.pop("reasoning", None)
        if body.get("continue_final_message"):
            message["content"] = reasoning + (message.get("content") or "")
        else:
            message["content"] = wrap_think([reasoning]) + (message.get("content") or "")

    async def _attach_token_ids(self, request: Request, body: dict[str, Any], completion: dict[str, Any],
                                choice: dict[str, Any], message: dict[str, Any]) -> None:
        """Token ids and log-probs onto the message, from (in this order) a bundle vLLM put on the
        message, inline prompt/generation ids, or the logprobs' token ids plus /tokenize."""
        try:
            bundle = token_metadata(message, "choices[0].message")
        except Unconvertible as error:
            raise UpstreamError(f"upstream answered partial token metadata: {error}") from None
        inline = _inline_token_ids(completion, choice)
        if bundle is not None:
            if inline is not None and (bundle["prompt_token_ids"], bundle["generation_token_ids"]) != inline:
                raise UpstreamError("the message's token ids disagree with the response's token ids")
            message.update(bundle)
        else:
            generated, log_probs = self._logprob_tokens(choice)
            if inline is not None:
                prompt_ids, generation_ids = inline
                if generation_ids != generated:
                    raise UpstreamError("vLLM's generation token ids disagree with its logprob token ids")
            else:
                tokenize_body: dict[str, Any] = {
                    key: body[key] for key in ("model", "messages", "tools", "chat_template_kwargs",
                                               "mm_processor_kwargs", "required_prefix_token_ids") if key in body}
                client = self._client(request)
                tokenized = await client.post_json("", tokenize_body, url=_tokenize_url(client.base_url))
                tokens = tokenized.get("tokens")
                if not isinstance(tokens, list):
                    raise UpstreamError(f"{_tokenize_url(client.base_url)} answered without a `tokens` list")
                prompt_ids = tokens
                generation_ids = generated
            if len(generation_ids) != len(log_probs):
                raise UpstreamError(f"vLLM returned {len(generation_ids)} generation token ids and "
                                    f"{len(log_probs)} log-probs")
            message.update(prompt_token_ids=prompt_ids, generation_token_ids=generation_ids,
                           generation_log_probs=log_probs)
            choice.pop("logprobs", None)
        if message.get(ROUTED_EXPERTS) is None:
            message.pop(ROUTED_EXPERTS, None)
        completion.pop("prompt_token_ids", None)
        choice.pop("token_ids", None)

    def _logprob_tokens(self, choice: dict[str, Any]) -> tuple[list[int], list[float]]:
        block = choice.get("logprobs")
        if not isinstance(block, dict) or not isinstance(block.get("content"), list):
            raise UpstreamError(
                f"{self.config.name} asked vLLM for per-token logprobs (return_token_id_information), but the answer "
                f"has none (choices[0].logprobs={block!r})")
        ids: list[int] = []
        log_probs: list[float] = []
        for index, entry in enumerate(block["content"]):
            token = entry.get("token") if isinstance(entry, dict) else None
            if not isinstance(token, str) or not token.startswith("token_id:"):
                raise UpstreamError(f"choices[0].logprobs.content[{index}].token is not `token_id:<int>` "
                                    "(is return_tokens_as_token_ids supported by this endpoint?)")
            try:
                ids.append(int(token[len("token_id:"):]))
            except ValueError:
                raise UpstreamError(f"choices[0].logprobs.content[{index}].token is not `token_id:<int>`") from None
            log_prob = entry.get("logprob")
            if isinstance(log_prob, bool) or not isinstance(log_prob, (int, float)):
                raise UpstreamError(f"choices[0].logprobs.content[{index}].logprob is not a number")
            log_probs.append(float(log_prob))
        return ids, log_probs

    def _client(self, request: Request) -> UpstreamClient:
        clients = self._clients
        assert clients is not None  # set up with the web server
        if len(clients) == 1:
            return clients[0]
        session_id = (request.scope.get("session") or {}).get(SESSION_ID_KEY) or ""
        digest = hashlib.sha256(session_id.encode()).digest()  # one rollout's turns stay on one endpoint
        return clients[int.from_bytes(digest[:8], "big") % len(clients)]

    def _empty_completion(self, finish_reason: str) -> dict[str, Any]:
        return {"id": "chtcmpl-123", "object": "chat.completion", "created": int(time.time()),
                "model": self.config.model,
                "choices": [{"index": 0, "finish_reason": finish_reason,
                             "message": {"role": "assistant", "content": None, "tool_calls": None}}]}

    async def on_shutdown(self) -> None:
        for client in [*(self._clients or []), *self._retired]:
            await client.aclose()
        await super().on_shutdown()


def _json_metadata(metadata: dict[str, Any], key: str) -> dict[str, Any]:
    """Per-request overrides NeMo Gym reads from a JSON string in metadata (e.g. extra_body)."""
    raw = metadata.get(key)
    if not raw:
        return {}
    try:
        value = orjson.loads(raw) if isinstance(raw, (str, bytes)) else raw
    except orjson.JSONDecodeError as error:
        raise Unconvertible(f"metadata.{key} must be a JSON object string: {error}") from None
    if not isinstance(value, dict):
        raise Unconvertible(f"metadata.{key} must be a JSON object string")
    return value


def _inline_token_ids(completion: dict[str, Any], choice: dict[str, Any]) -> Optional[tuple[list, list]]:
    prompt, generated = completion.get("prompt_token_ids"), choice.get("token_ids")
    if (prompt is None) != (generated is None):
        missing = "choices[0].token_ids" if prompt is not None else "prompt_token_ids"
        raise UpstreamError(f"vLLM returned partial token metadata; missing: {missing}")
    if prompt is None:
        return None
    if not isinstance(prompt, list) or not isinstance(generated, list):
        raise UpstreamError("vLLM's prompt_token_ids and token_ids must be lists")
    return prompt, generated


def _tokenize_url(base_url: str) -> str:
    return (base_url[:-3] if base_url.endswith("/v1") else base_url) + "/tokenize"


__all__ = ["VLLMModel", "VLLMModelConfig", "TOKEN_FIELDS"]
