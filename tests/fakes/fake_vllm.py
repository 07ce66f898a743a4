"""A fake vLLM OpenAI-compatible server: deterministic answers with token ids and log-probs.

Standard library only, so the same file serves gym-compose's tests (Python 3.11) and NeMo Gym's
own vllm_model (Python 3.13 venv) in the side-by-side comparison.

    python tests/fakes/fake_vllm.py PORT

What it does as vLLM does:
- `POST /v1/chat/completions`: `logprobs: true` adds `choices[0].logprobs.content` (one entry per
  generated token; `token` is `token_id:<id>` when `return_tokens_as_token_ids` is set);
  `return_token_ids: true` adds top-level `prompt_token_ids` and `choices[0].token_ids`;
  reasoning comes back in `message.reasoning_content` (when `chat_template_kwargs.enable_thinking`
  is true); a prompt containing OVERFLOW gets vLLM's 400 for a too-long context.
- `POST /tokenize` (beside /v1, as vLLM has it): the prompt's token ids.
- `GET /v1/models`.
Its own: `GET /_fake/requests` lists what it received (path, a few headers, body);
`POST /_fake/reset` forgets them.

The reply: after a tool message, a text answer quoting it; else, when tools are offered, a call of
the first tool with its required arguments; else a greeting.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CREATED = 1700000000
MAX_MODEL_LEN = 4096
_PIECES = re.compile(r"\w+|[^\w\s]")
_RECORDED_HEADERS = ("authorization", "x-team", "x-trace")


def token_ids(text: str) -> list[int]:
    return [zlib.crc32(piece.encode()) % 50000 for piece in _PIECES.findall(text)]


def pieces(text: str) -> list[str]:
    return _PIECES.findall(text)


def render_prompt(body: dict[str, Any], call_marker: str = "<call>") -> str:
    """A stand-in chat template: what the prompt token ids are computed from. With `call_marker`
    "" an assistant turn renders exactly as it was generated, so each turn's prompt starts with the
    previous prompt and generation (the contiguity trainers assert)."""
    parts = []
    if body.get("tools"):
        parts.append("<tools>" + json.dumps(body["tools"], sort_keys=True) + "</tools>")
    kwargs = body.get("chat_template_kwargs") or {}
    if kwargs:
        parts.append("<kwargs>" + json.dumps(kwargs, sort_keys=True) + "</kwargs>")
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        text = f"<{message.get('role')}>{content or ''}"
        for call in message.get("tool_calls") or []:
            text += call_marker + json.dumps(call.get("function"), sort_keys=True)
        parts.append(text)
    if body.get("add_generation_prompt", True):
        parts.append("<assistant>")
    return "".join(parts)


def _required_arguments(tool: dict[str, Any]) -> dict[str, Any]:
    parameters = (tool.get("function") or {}).get("parameters") or {}
    return {name: f"value-of-{name}" for name in parameters.get("required") or []}


def reply(body: dict[str, Any]) -> dict[str, Any]:
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    thinking = bool((body.get("chat_template_kwargs") or {}).get("enable_thinking"))
    message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": []}
    finish = "stop"
    if last.get("role") == "tool":
        content = last.get("content")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content)
        message["content"] = f"The tool said: {str(content)[:60]}"
    elif body.get("tools") and body.get("tool_choice") != "none":
        tool = body["tools"][0]
        message["tool_calls"] = [{"id": "chatcmpl-tool-fake0001", "type": "function", "function": {
            "name": tool["function"]["name"], "arguments": json.dumps(_required_arguments(tool))}}]
        finish = "tool_calls"
    else:
        message["content"] = "Hello from the fake vLLM."
    if thinking:
        message["reasoning_content"] = "I should answer briefly."
    generated = "".join([
        f"<think>{message['reasoning_content']}</think>" if thinking else "",
        message["content"] or "",
        *(json.dumps(call["function"], sort_keys=True) for call in message["tool_calls"]),
    ])
    return {"message": message, "finish_reason": finish, "generated": generated}


def chat_completion(body: dict[str, Any], sequence: int, call_marker: str = "<call>") -> tuple[int, dict[str, Any]]:
    prompt = render_prompt(body, call_marker)
    if "OVERFLOW" in prompt:
        return 400, {"object": "error", "message": f"This model's maximum context length is {MAX_MODEL_LEN} tokens. "
                     "However, you requested 5000 tokens in the messages, Please reduce the length of the messages.",
                     "type": "BadRequestError", "param": None, "code": 400}
    prompt_ids = token_ids(prompt)
    answer = reply(body)
    generated_ids = token_ids(answer["generated"])
    choice: dict[str, Any] = {"index": 0, "message": answer["message"], "logprobs": None,
                              "finish_reason": answer["finish_reason"], "stop_reason": None}
    if body.get("logprobs"):
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        choice["logprobs"] = {"content": [
            {"token": f"token_id:{token}" if as_ids else piece, "logprob": -((token % 97) + 1) / 100.0,
             "bytes": list(piece.encode()), "top_logprobs": []}
            for token, piece in zip(generated_ids, pieces(answer["generated"]), strict=False)
        ]}
    completion: dict[str, Any] = {
        "id": f"chatcmpl-fake{sequence:04d}", "object": "chat.completion", "created": CREATED,
        "model": body.get("model") or "fake-model", "choices": [choice],
        "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": len(generated_ids),
                  "total_tokens": len(prompt_ids) + len(generated_ids), "prompt_tokens_details": None},
        "prompt_logprobs": None, "kv_transfer_params": None,
    }
    if body.get("return_token_ids"):
        completion["prompt_token_ids"] = prompt_ids
        choice["token_ids"] = generated_ids
    return 200, completion


class FakeVLLM:
    def __init__(self, call_marker: str = "<call>") -> None:
        self.call_marker = call_marker
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def handle(self, method: str, path: str, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
        if method == "GET" and path == "/_fake/requests":
            with self.lock:
                return 200, list(self.requests)
        if method == "POST" and path == "/_fake/reset":
            with self.lock:
                self.requests.clear()
            return 200, {}
        if method == "GET" and path.rstrip("/") == "/v1/models":
            return 200, {"object": "list", "data": [{"id": "fake-model", "object": "model", "max_model_len": MAX_MODEL_LEN}]}
        if method != "POST":
            return 404, {"detail": "Not Found"}
        with self.lock:
            sequence = len(self.requests)
            self.requests.append({"path": path, "headers": {k: v for k, v in headers.items() if k in _RECORDED_HEADERS},
                                  "body": body})
        if path == "/v1/chat/completions":
            return chat_completion(body, sequence, self.call_marker)
        if path == "/tokenize":
            ids = token_ids(render_prompt(body, self.call_marker))
            return 200, {"count": len(ids), "max_model_len": MAX_MODEL_LEN, "tokens": ids, "token_strs": None}
        return 404, {"detail": "Not Found"}


def make_server(port: int = 0, host: str = "127.0.0.1", call_marker: str = "<call>") -> ThreadingHTTPServer:
    """`host` 0.0.0.0 lets containers reach it (as host.docker.internal); `call_marker` as in render_prompt."""
    fake = FakeVLLM(call_marker)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self, method: str) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else {}
            except json.JSONDecodeError:
                status, answer = 400, {"detail": "body is not JSON"}
            else:
                headers = {name.lower(): value for name, value in self.headers.items()}
                status, answer = fake.handle(method, self.path.split("?")[0], headers, body)
            payload = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            self._serve("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._serve("POST")

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


def serve_in_thread() -> tuple[ThreadingHTTPServer, str]:
    """Start on a free port; returns the server (call .shutdown()) and its base URL (with /v1)."""
    server = make_server(0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


if __name__ == "__main__":
    make_server(int(sys.argv[1])).serve_forever()
