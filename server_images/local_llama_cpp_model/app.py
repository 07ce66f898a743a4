"""local_llama_cpp_model: a GGUF model served on the CPU by llama.cpp, as a service of the stack.

llama.cpp comes from xllamacpp, a prebuilt wheel with llama.cpp's own server inside (its chat
templates, sampling, `response_format` grammars and OpenAI-style answers), so the image builds in
seconds and compiles nothing. The model loads in the background when the server starts; the
readiness route (the compose healthcheck) answers 503 "loading model ..." until it has loaded, so
`gym-compose up` waits for exactly that. A model that cannot load stops the server with the reason
(exit 1).

Routes: `/v1/responses` (converted to a chat completion and back), `/v1/chat/completions`,
`/v1/models`. One generation runs at a time (one llama.cpp slot); up to `max_queued_requests`
more wait, beyond that the answer is 503 with Retry-After.

Tool calls: chat templates of small models (Gemma 3) know no tools, so with `tool_prompt: true`
the offered tools are described in the system message and an answer that is only a JSON object
`{"name": ..., "arguments": {...}}` (or a `name(key="value")` call) naming an offered tool becomes
a function call. Tool results go back as user turns, since such templates know no tool role.
"""


import asyncio
import json
import logging
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional

from pydantic import Field
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gym_compose.net.web import json_response, read_json_object
from gym_compose.server.base import BaseServer, BaseServerConfig
from gym_compose.server.models.chat_conversion import chat_to_response, responses_to_chat

LOG = logging.getLogger("gym_compose.server.local_llama_cpp_model")
# the sampling arguments of a chat request that go on to llama.cpp
_SAMPLING_KEYS = ("temperature", "top_p", "max_tokens", "stop", "seed", "presence_penalty", "frequency_penalty",
                  "logprobs", "top_logprobs", "response_format")
_FENCE = re.compile(r"^```[a-z_]*\s*(.*?)\s*```$", re.DOTALL)
_CALL = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\((.*)\)$", re.DOTALL)
_KWARG = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*=\s*("(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|[^,]+)')


class LocalLlamaCppModelConfig(BaseServerConfig):
    model_path: str
    model: str = ""
    n_ctx: int = Field(4096, ge=256)
    n_threads: int = Field(0, ge=0)  # 0: the CPUs this process may run on
    n_batch: int = Field(256, ge=1)
    chat_format: Optional[str] = None  # a llama.cpp built-in template name; None: the GGUF's own template
    system_role: bool = True  # false: the system text opens the first user turn (Gemma has no system role)
    max_output_tokens: int = Field(256, ge=1)  # when a request sets none
    seed: int = -1  # -1: a random seed per process
    max_queued_requests: int = Field(64, ge=0)
    tool_prompt: bool = True


class LocalLlamaCppModel(BaseServer):
    config: LocalLlamaCppModelConfig

    _llama: Any = None
    _load_error: Optional[str] = None
    _loaded_in: Optional[float] = None
    _executor: Optional[ThreadPoolExecutor] = None
    _waiting: int = 0
    _calls: int = 0

    def setup_webserver(self) -> Starlette:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama")
        return Starlette(routes=[
            Route("/v1/responses", self._responses, methods=["POST"]),
            Route("/v1/chat/completions", self._chat_completions, methods=["POST"]),
            Route("/v1/models", self._models, methods=["GET"]),
        ])

    @property
    def model_name(self) -> str:
        return self.config.model or Path(self.config.model_path).name.removesuffix(".gguf")

    # ---- loading ----

    async def on_startup(self) -> None:
        await super().on_startup()
        threading.Thread(target=self._load, name="llama-load", daemon=True).start()

    def _load(self) -> None:
        path = Path(self.config.model_path)
        started = time.monotonic()
        try:
            if not path.is_file():
                raise FileNotFoundError(f"model_path {path} does not exist in the container")
            threads = self.config.n_threads or len(os.sched_getaffinity(0))
            self._llama = start_llama_server(self.config, path, threads)
        except Exception as error:  # noqa: BLE001 - any load failure ends the server with its reason
            self._load_error = f"{type(error).__name__}: {error}"
            print(f"gym-compose: {self.config.name}: cannot load {path}: {self._load_error}", flush=True)
            os._exit(1)
        self._loaded_in = time.monotonic() - started
        LOG.warning("model %s loaded in %.1f s (n_ctx %d, %d threads)", path, self._loaded_in, self.config.n_ctx,
                    threads)

    def not_ready_reason(self) -> Optional[str]:
        if self._llama is None:
            return f"loading model {self.config.model_path}"
        return None

    # ---- routes ----

    async def _models(self, request: Request) -> Response:
        return json_response({"object": "list", "data": [{
            "id": self.model_name, "object": "model", "owned_by": "local",
            "meta": {"loaded": self._llama is not None, "load_seconds": self._loaded_in, "n_ctx": self.config.n_ctx,
                     "model_path": self.config.model_path}}]})

    async def _responses(self, request: Request) -> Response:
        params = await read_json_object(request)
        try:
            chat = responses_to_chat(params, self.model_name)
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            return json_response({"error": f"the request cannot be turned into a chat: {error}",
                                  "type": "unconvertible_request"}, 422)
        completion = await self._complete(chat)
        if isinstance(completion, Response):
            return completion
        return json_response(chat_to_response(completion, params))

    async def _chat_completions(self, request: Request) -> Response:
        completion = await self._complete(await read_json_object(request))
        return completion if isinstance(completion, Response) else json_response(completion)

    async def _complete(self, chat: dict[str, Any]) -> dict[str, Any] | Response:
        if self._llama is None:
            return json_response({"error": f"model {self.config.model_path} is still loading", "type": "not_ready"},
                                 503)
        if self._waiting > self.config.max_queued_requests:
            return Response(json.dumps({"error": f"{self._waiting} requests are waiting for the model "
                                                 "(max_queued_requests)", "type": "overloaded"}),
                            status_code=503, media_type="application/json", headers={"Retry-After": "1"})
        tools = [tool for tool in chat.get("tools") or [] if tool.get("type") == "function"]
        arguments = {key: chat[key] for key in _SAMPLING_KEYS if chat.get(key) is not None}
        arguments.setdefault("max_tokens", self.config.max_output_tokens)
        messages = plain_messages(chat.get("messages") or [], tools if self.config.tool_prompt else [],
                                  self.config.system_role)
        self._waiting += 1
        try:
            loop = asyncio.get_running_loop()
            completion = await loop.run_in_executor(self._executor, self._generate, messages, arguments)
        finally:
            self._waiting -= 1
        error = completion.get("error")
        if isinstance(error, dict) and error.get("type") == "exceed_context_size_error":
            LOG.warning("prompt does not fit the context (n_ctx %d): %s", self.config.n_ctx, error.get("message"))
            return {"id": "chatcmpl-local-overflow", "object": "chat.completion", "created": int(time.time()),
                    "model": self.model_name, "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
                    "choices": [{"index": 0, "finish_reason": "length",
                                 "message": {"role": "assistant", "content": ""}}]}
        if error is not None:  # a request llama.cpp refuses (e.g. a response_format it cannot turn into a grammar)
            status = error.get("code") if isinstance(error, dict) and isinstance(error.get("code"), int) else 400
            reason = error.get("message") if isinstance(error, dict) else str(error)
            return json_response({"error": reason, "type": "model_error"}, status if 400 <= status < 600 else 500)
        completion["model"] = self.model_name
        if tools and self.config.tool_prompt:
            message = completion["choices"][0]["message"]
            self._calls += 1
            call = parse_tool_call(message.get("content") or "", {tool["function"]["name"] for tool in tools})
            if call is not None:
                name, call_arguments = call
                message["content"] = None
                message["tool_calls"] = [{"id": f"call_{os.getpid()}_{self._calls}", "type": "function",
                                          "function": {"name": name, "arguments": json.dumps(call_arguments)}}]
                completion["choices"][0]["finish_reason"] = "tool_calls"
        return completion

    def _generate(self, messages: list[dict[str, Any]], arguments: dict[str, Any]) -> dict[str, Any]:
        try:
            return self._llama.handle_chat_completions({"messages": messages, **arguments})
        except RuntimeError as error:  # what llama.cpp's server raises instead of answering
            return {"error": {"code": 500, "message": str(error)}}

    async def on_shutdown(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        await super().on_shutdown()


def start_llama_server(config: LocalLlamaCppModelConfig, path: Path, threads: int) -> Any:
    """llama.cpp's server in this process (xllamacpp), the model loaded, one slot, quiet; the chat
    template checked with a one-token answer, since llama.cpp reads it only on a request."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(path)
    params.n_ctx = config.n_ctx
    params.n_batch = config.n_batch
    params.n_parallel = 1
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.verbosity = -1  # no per-request lines in `docker compose logs`; failures still raise
    if config.seed >= 0:
        params.sampling.seed = config.seed
    if config.chat_format:  # a built-in template by name: llama.cpp's non-Jinja path
        params.use_jinja = False
        params.chat_template = config.chat_format
    server = xllamacpp.Server(params)
    try:
        probe = server.handle_chat_completions({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
    except RuntimeError as error:
        probe = {"error": {"message": str(error)}}
    if "error" in probe:
        error = probe["error"]
        template = f"chat_format {config.chat_format!r}" if config.chat_format else "the GGUF's chat template"
        raise ValueError(f"{template}: {error.get('message') if isinstance(error, dict) else error}")
    return server


def plain_messages(messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                   system_role: bool = True) -> list[dict[str, Any]]:
    """Messages for a chat template that knows only system/user/assistant turns, alternating.

    Tool calls become the assistant's JSON, tool results user turns, consecutive turns of one role
    one turn; with tools offered, the system message describes them and how to call one. Without a
    system role, the system text opens the first user turn."""
    system_parts: list[str] = []
    turns: list[dict[str, str]] = []

    def add(role: str, text: str) -> None:
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += "\n\n" + text
        else:
            turns.append({"role": role, "content": text})

    for message in messages:
        role, content = message.get("role"), _text(message.get("content"))
        if role in ("system", "developer"):
            system_parts.append(content)
        elif role == "assistant":
            calls = [json.dumps({"name": call["function"]["name"],
                                 "arguments": json.loads(call["function"].get("arguments") or "{}")})
                     for call in message.get("tool_calls") or []]
            add("assistant", "\n".join(part for part in [content, *calls] if part))
        elif role == "tool":
            add("user", f"Tool result: {content}")
        else:
            add("user", content)
    if tools:
        described = "\n".join(
            f"- {tool['function']['name']}: {tool['function'].get('description', '')} "
            f"Parameters (JSON schema): {json.dumps(tool['function'].get('parameters') or {})}" for tool in tools)
        system_parts.append(
            "You can call these tools:\n" + described + "\nTo call one, answer with only a JSON object such as "
            '{"name": "TOOL_NAME", "arguments": {...}}. After a tool result, answer the user.')
    if turns and turns[0]["role"] == "assistant":
        turns.insert(0, {"role": "user", "content": ""})
    system = "\n\n".join(part for part in system_parts if part)
    if system and not system_role:
        if not turns or turns[0]["role"] != "user":
            turns.insert(0, {"role": "user", "content": ""})
        turns[0]["content"] = system + ("\n\n" + turns[0]["content"] if turns[0]["content"] else "")
        return turns
    return ([{"role": "system", "content": system}] if system else []) + turns


def parse_tool_call(text: str, names: set[str]) -> Optional[tuple[str, dict[str, Any]]]:
    """(tool name, arguments) when the whole answer is a call of an offered tool, else None."""
    text = text.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if isinstance(value, dict) and value.get("name") in names:
        arguments = value.get("arguments", value.get("parameters", {}))
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                return None
        return (value["name"], arguments) if isinstance(arguments, dict) else None
    call = _CALL.match(text)
    if call and call.group(1) in names:
        arguments = {}
        for key, raw in _KWARG.findall(call.group(2)):
            raw = raw.strip()
            try:
                arguments[key] = json.loads(raw) if not raw.startswith("'") else raw[1:-1]
            except ValueError:
                arguments[key] = raw
        return call.group(1), arguments
    return None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


if __name__ == "__main__":
    LocalLlamaCppModel.run_webserver()
