"""Responses API <-> Chat Completions the way NeMo Gym 0.7's vllm_model converts them.

Written to NeMo Gym's observable behaviour (tests/fixtures/vllm_model/ records it):
- Reasoning items become `<think>...</think>` in the assistant content; consecutive reasoning,
  assistant message and function_call items become one assistant message.
- `instructions` and the leading system/developer messages become one system message.
- For RL training (`return_token_id_information`), token metadata on an input item
  (prompt_token_ids, generation_token_ids, generation_log_probs[, routed_experts]) rides on the
  assistant message it belongs to; on output it is put on the last output item of the turn.
- The Response carries every field NeMo Gym's Response model has, nulls included.
A request that has no Chat Completions form raises `Unconvertible` naming what.
"""

from __future__ import annotations

import re
import uuid
from typing import Any, Optional

THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
TOKEN_FIELDS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")
ROUTED_EXPERTS = "routed_experts"
_NO_CHAT_FORM = ("background", "context_management", "conversation", "include", "max_tool_calls",
                 "previous_response_id", "prompt", "truncation")
# Response fields NeMo Gym fills from the request (the rest of its Response model is null).
_ECHOED = ("background", "instructions", "max_output_tokens", "max_tool_calls", "metadata", "previous_response_id",
           "prompt", "reasoning", "service_tier", "temperature", "text", "top_logprobs", "top_p", "truncation", "user")
_ALWAYS_NULL = ("completed_at", "conversation", "error", "moderation", "prompt_cache_key", "prompt_cache_retention",
                "safety_identifier")


class Unconvertible(ValueError):
    """The request has no Chat Completions form (or is malformed); the message says what."""


def parse_think(content: str) -> tuple[list[str], str]:
    """The texts inside <think> tags, and the content without them."""
    return THINK.findall(content), THINK.sub("", content)


def wrap_think(texts: list[str]) -> str:
    return "".join(f"<think>{text}</think>" for text in texts if text)


def token_metadata(item: dict[str, Any], where: str) -> Optional[dict[str, Any]]:
    """The item's token metadata, all three required fields or none of them."""
    present = [name for name in (*TOKEN_FIELDS, ROUTED_EXPERTS) if name in item]
    if not present:
        return None
    missing = [name for name in TOKEN_FIELDS if name not in item]
    if missing:
        raise Unconvertible(f"{where}: token metadata must include all of {', '.join(TOKEN_FIELDS)}; "
                            f"missing: {', '.join(missing)}")
    for name in TOKEN_FIELDS:
        if not isinstance(item[name], list):
            raise Unconvertible(f"{where}.{name} must be a list")
    metadata = {name: item[name] for name in TOKEN_FIELDS}
    if item.get(ROUTED_EXPERTS) is not None:
        metadata[ROUTED_EXPERTS] = item[ROUTED_EXPERTS]
    return metadata


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


class _Messages:
    """Chat messages being built; assistant pieces are buffered until something else comes."""

    def __init__(self, keep_tokens: bool):
        self.keep_tokens = keep_tokens
        self.messages: list[dict[str, Any]] = []
        self.content = ""
        self.refusal = ""
        self.tool_calls: list[dict[str, Any]] = []
        self.buffered = False
        self.tokens: Optional[dict[str, Any]] = None

    def flush(self) -> None:
        if self.buffered or self.content or self.refusal or self.tool_calls:
            message: dict[str, Any] = {"content": self.content or None, "role": "assistant"}
            if self.tool_calls:
                message["tool_calls"] = self.tool_calls
            if self.refusal:
                message["refusal"] = self.refusal
            if self.keep_tokens and self.tokens is not None:
                message.update(self.tokens)
            self.messages.append(message)
        self.content, self.refusal, self.tool_calls, self.buffered, self.tokens = "", "", [], False, None


def _user_side_content(content: Any, where: str) -> Any:
    if not isinstance(content, list):
        return content
    parts = []
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "input_text":
            parts.append({"type": "text", "text": part.get("text", "")})
        elif kind == "input_image":
            url = part.get("image_url")
            if isinstance(url, dict):
                url = url.get("url", "")
            if not url:
                raise Unconvertible(f"{where}.content[{index}]: an input_image needs an image_url "
                                    "(images by file_id have no Chat Completions form)")
            detail = part.get("detail", "auto")
            if detail == "original":
                raise Unconvertible(f"{where}.content[{index}]: image detail 'original' has no Chat Completions form")
            parts.append({"type": "image_url", "image_url": {"url": url, "detail": detail}})
        elif kind == "input_video":
            key = "video_url" if "video_url" in part else "video"
            url = part.get(key)
            if isinstance(url, dict):
                url = url.get("url", "")
            if not url:
                raise Unconvertible(f"{where}.content[{index}]: input_video needs a non-empty {key}")
            parts.append({"type": "video_url", "video_url": {"url": url}})
        else:
            raise Unconvertible(f"{where}.content[{index}]: content part type {kind!r} has no Chat Completions form")
    return parts


def _add_message(item: dict[str, Any], state: _Messages, where: str) -> None:
    role = item.get("role")
    if item.get("phase") is not None:
        raise Unconvertible(f"{where}: message phase has no Chat Completions form")
    content = item.get("content")
    if role == "assistant":
        state.buffered = True
        if isinstance(content, list):
            for index, part in enumerate(content):
                text = part.get("text") if isinstance(part, dict) else None
                refusal = part.get("refusal") if isinstance(part, dict) else None
                if not isinstance(text, str) and not isinstance(refusal, str):
                    raise Unconvertible(f"{where}.content[{index}]: an assistant content part needs text or refusal")
                state.content += text if isinstance(text, str) else ""
                state.refusal += refusal if isinstance(refusal, str) else ""
        elif isinstance(content, str):
            state.content += content
        elif content is not None:
            raise Unconvertible(f"{where}.content must be a string or a list of parts")
        for call in item.get("tool_calls") or []:  # chat-shaped assistant turns
            state.tool_calls.append({"id": call["id"], "function": {"arguments": call["function"]["arguments"],
                                                                    "name": call["function"]["name"]},
                                     "type": "function"})
        return
    state.flush()
    if role == "tool":
        state.messages.append({"content": content, "role": "tool", "tool_call_id": item.get("tool_call_id")})
    elif role in ("user", "system", "developer"):
        state.messages.append({"content": _user_side_content(content, where), "role": role})
    else:
        raise Unconvertible(f"{where}: message role {role!r} is not one of user, system, developer, assistant, tool")


def _add_function_call_output(item: dict[str, Any], state: _Messages, where: str) -> None:
    state.flush()
    if "call_id" not in item:
        raise Unconvertible(f"{where}: a function_call_output needs call_id")
    output = item.get("output")
    if isinstance(output, list):
        kinds = sorted({part.get("type", "<missing>") for part in output if part.get("type") != "input_text"})
        if kinds:
            raise Unconvertible(f"{where}: a tool message cannot hold content part type(s) {', '.join(kinds)}")
        output = [{"type": "text", "text": part["text"]} for part in output]
    elif not isinstance(output, str):
        raise Unconvertible(f"{where}.output must be a string or a list of input_text parts")
    state.messages.append({"content": output, "role": "tool", "tool_call_id": item["call_id"]})


def _chat_tool_choice(choice: Any) -> Any:
    if choice is None or isinstance(choice, str):
        return choice

    def reference(tool: dict[str, Any]) -> dict[str, Any]:
        kind = tool.get("type")
        if kind not in ("function", "custom"):
            raise Unconvertible(f"tool_choice type {kind!r} has no Chat Completions form")
        return {"type": kind, kind: {key: value for key, value in tool.items() if key != "type"}}

    kind = choice.get("type")
    if kind in ("function", "custom"):
        return reference(choice)
    if kind == "allowed_tools":
        return {"type": "allowed_tools",
                "allowed_tools": {"mode": choice["mode"], "tools": [reference(tool) for tool in choice["tools"]]}}
    raise Unconvertible(f"tool_choice type {kind!r} has no Chat Completions form")


def _chat_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    converted = []
    for index, tool in enumerate(tools):
        kind = tool.get("type")
        if kind not in ("function", "custom"):
            raise Unconvertible(f"tools[{index}]: tool type {kind!r} has no Chat Completions form")
        if tool.get("defer_loading"):
            raise Unconvertible(f"tools[{index}]: defer_loading has no Chat Completions form")
        fields = {key: value for key, value in tool.items() if key not in ("type", "defer_loading")}
        if kind == "function":
            converted.append({"type": "function",
                              "function": {key: value for key, value in fields.items() if value is not None}})
        else:
            tool_format = fields.get("format")
            if isinstance(tool_format, dict) and tool_format.get("type") == "grammar":
                fields["format"] = {"type": "grammar",
                                    "grammar": {k: v for k, v in tool_format.items() if k != "type"}}
            converted.append({"type": "custom", "custom": fields})
    return converted


def responses_to_chat(params: dict[str, Any], keep_tokens: bool) -> dict[str, Any]:
    """Chat completion create params for a Responses request (params is not modified)."""
    params = {key: value for key, value in params.items() if value is not None}
    unsupported = sorted(set(_NO_CHAT_FORM) & params.keys())
    if unsupported:
        raise Unconvertible(f"request field(s) {unsupported} have no Chat Completions form; use a model server "
                            "that passes the Responses API through")
    state = _Messages(keep_tokens)
    items = params.pop("input", [])
    if isinstance(items, str):
        items = [{"content": [{"text": items, "type": "input_text"}], "role": "user", "type": "message"}]
    if not isinstance(items, list):
        raise Unconvertible("input must be a string or a list of items")
    for index, item in enumerate(items):
        where = f"input[{index}]"
        if not isinstance(item, dict):
            raise Unconvertible(f"{where} must be an object")
        kind = item.get("type") or ("message" if item.get("role") else None)
        if kind == "message":
            _add_message(item, state, where)
        elif kind == "reasoning":
            state.buffered = True
            if item.get("summary"):
                state.content += wrap_think([part.get("text", "") for part in item["summary"]])
        elif kind == "function_call":
            state.buffered = True
            if "call_id" not in item:
                raise Unconvertible(f"{where}: a function_call needs call_id")
            if item.get("namespace") is not None:
                raise Unconvertible(f"{where}: function call namespace has no Chat Completions form")
            state.tool_calls.append({"id": item["call_id"], "function": {"arguments": item.get("arguments"),
                                                                         "name": item.get("name")},
                                     "type": "function"})
        elif kind == "function_call_output":
            _add_function_call_output(item, state, where)
        else:
            raise Unconvertible(f"{where}: item type {kind!r} has no Chat Completions form; use a model server that "
                                "passes the Responses API through")
        if keep_tokens:
            tokens = token_metadata(item, where)
            if tokens is not None:
                state.tokens = tokens
    state.flush()
    messages = state.messages

    chat: dict[str, Any] = {}
    instructions = params.pop("instructions", None)
    if instructions:
        leading = [instructions]
        while messages and messages[0]["role"] in ("system", "developer"):
            leading.append(_text(messages.pop(0)["content"]))
        messages.insert(0, {"content": "\n\n".join(leading), "role": "system"})
    if "max_output_tokens" in params:
        params["max_tokens"] = params.pop("max_output_tokens")
    reasoning = params.pop("reasoning", None)
    if reasoning is not None:
        other = sorted(key for key, value in reasoning.items() if key != "effort" and value is not None)
        if other:
            raise Unconvertible(f"reasoning field(s) {other} have no Chat Completions form")
        if reasoning.get("effort") is not None:
            params["reasoning_effort"] = reasoning["effort"]
    text = params.pop("text", None)
    if text is not None:
        text_format = text.get("format")
        if text_format is not None:
            kind = text_format.get("type")
            if kind == "json_schema":
                schema = {"name": text_format["name"], "schema": text_format["schema"]}
                schema.update({key: text_format[key] for key in ("strict", "description")
                               if text_format.get(key) is not None})
                params["response_format"] = {"type": "json_schema", "json_schema": schema}
            elif kind == "json_object":
                params["response_format"] = {"type": "json_object"}
            elif kind != "text":
                raise Unconvertible(f"text.format type {kind!r} has no Chat Completions form")
        if text.get("verbosity") is not None:
            params["verbosity"] = text["verbosity"]
    tool_choice = _chat_tool_choice(params.pop("tool_choice", None))
    tools = params.pop("tools", None)
    if tools:
        params["tools"] = _chat_tools(tools)
        if tool_choice is not None:
            params["tool_choice"] = tool_choice
    else:
        if tool_choice not in (None, "auto", "none"):
            raise Unconvertible(f"tool_choice={tool_choice!r} needs at least one tool")
        params.pop("parallel_tool_calls", None)
    chat["messages"] = messages
    chat.update(params)
    return chat


# ---- Chat Completion -> Response ----

def _function_tool_fields(tool: dict[str, Any]) -> dict[str, Any]:
    if tool.get("type", "function") != "function":
        return dict(tool)
    return {"defer_loading": tool.get("defer_loading"), "description": tool.get("description"),
            "name": tool.get("name"), "parameters": tool.get("parameters"), "strict": tool.get("strict"),
            "type": "function"}


def _count(value: Any) -> Optional[int]:
    return value if type(value) is int and value >= 0 else None


def _usage_detail(usage: dict[str, Any], group: str, name: str, *aliases: str) -> Optional[int]:
    details = usage.get(group)
    value = _count(details.get(name)) if isinstance(details, dict) else None
    for alias in aliases:
        if value is not None:
            break
        value = _count(usage.get(alias))
    return value


def assistant_output_items(message: dict[str, Any], parse_reasoning: bool, keep_tokens: bool) -> list[dict[str, Any]]:
    """Output items of one assistant chat message; token metadata goes on the last one."""
    items: list[dict[str, Any]] = []
    content = message.get("content") or ""
    refusal = message.get("refusal") or ""
    reasoning: list[str] = []
    if parse_reasoning:
        reasoning, content = parse_think(content)
    if reasoning:
        items.append({"content": None, "encrypted_content": None, "id": f"rs_{uuid.uuid4().hex}",
                      "summary": [{"text": text, "type": "summary_text"} for text in reasoning], "type": "reasoning"})
    tool_calls = message.get("tool_calls") or []
    nothing_else = not (items or tool_calls or refusal)
    if content or refusal or nothing_else:
        parts: list[dict[str, Any]] = []
        if content or nothing_else:
            parts.append({"annotations": [], "logprobs": None, "text": content, "type": "output_text"})
        if refusal:
            parts.append({"refusal": str(refusal), "type": "refusal"})
        items.append({"content": parts, "id": f"msg_{uuid.uuid4().hex}", "phase": None,
                      "role": message.get("role") or "assistant", "status": "completed", "type": "message"})
    for call in tool_calls:
        if "id" not in call:
            raise Unconvertible("a tool call in the chat completion has no id")
        function = call.get("function") or {}
        items.append({"arguments": function.get("arguments"), "call_id": call["id"], "id": call["id"],
                      "name": function.get("name"), "namespace": None, "status": "completed",
                      "type": "function_call"})
    tokens = token_metadata(message, "choices[0].message") if keep_tokens else None
    if tokens is not None:
        items[-1].update(tokens)
        items[-1].setdefault(ROUTED_EXPERTS, None)
    return items


def chat_to_response(completion: dict[str, Any], params: dict[str, Any], model: str,
                     parse_reasoning: bool, keep_tokens: bool) -> dict[str, Any]:
    choices = completion.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise Unconvertible("the chat completion has no choices")
    choice = choices[0]
    output = assistant_output_items(choice.get("message") or {}, parse_reasoning, keep_tokens)
    usage = completion.get("usage")
    response_usage = None
    if isinstance(usage, dict):
        response_usage = {
            "input_tokens": usage.get("prompt_tokens"),
            "input_tokens_details": {"cached_tokens": _usage_detail(
                usage, "prompt_tokens_details", "cached_tokens", "cached_input_tokens", "cache_read_input_tokens")},
            "output_tokens": usage.get("completion_tokens"),
            "output_tokens_details": {"reasoning_tokens": _usage_detail(
                usage, "completion_tokens_details", "reasoning_tokens", "reasoning_output_tokens")},
            "total_tokens": usage.get("total_tokens"),
        }
    incomplete = {"length": {"reason": "max_output_tokens"},
                  "content_filter": {"reason": "content_filter"}}.get(str(choice.get("finish_reason")))
    response: dict[str, Any] = {key: None for key in _ALWAYS_NULL}
    response.update({key: params.get(key) for key in _ECHOED})
    response.update({
        "created_at": float(completion.get("created") or 0),
        "id": f"resp_{uuid.uuid4().hex}",
        "incomplete_details": incomplete,
        "model": model,
        "object": "response",
        "output": output,
        "parallel_tool_calls": params["parallel_tool_calls"] if params.get("parallel_tool_calls") is not None else True,
        "status": "incomplete" if incomplete else "completed",
        "tool_choice": params.get("tool_choice") if params.get("tool_choice") is not None else "auto",
        "tools": [_function_tool_fields(tool) for tool in params.get("tools") or []],
        "usage": response_usage,
    })
    if choice.get("native_finish_reason") is not None:
        response["native_finish_reason"] = str(choice["native_finish_reason"])
    return response


# ---- Chat Completion as NeMo Gym's model serializes it ----

_COMPLETION_DEFAULTS = {"service_tier": None, "system_fingerprint": None, "moderation": None}
_CHOICE_DEFAULTS = {"logprobs": None}
_MESSAGE_DEFAULTS = {"annotations": None, "audio": None, "function_call": None, "refusal": None, "tool_calls": None}
_USAGE_DEFAULTS = {"completion_tokens_details": None, "prompt_tokens_details": None}


def with_chat_defaults(completion: dict[str, Any]) -> dict[str, Any]:
    """The chat completion with the null fields NeMo Gym's chat completion model adds when it
    serializes one (extra upstream fields are kept)."""
    result = {**_COMPLETION_DEFAULTS, **completion}
    choices = []
    for choice in result.get("choices") or []:
        choice = {**_CHOICE_DEFAULTS, **choice}
        choice["message"] = {**_MESSAGE_DEFAULTS, **(choice.get("message") or {})}
        if any(field in choice["message"] for field in TOKEN_FIELDS):
            choice["message"].setdefault(ROUTED_EXPERTS, None)
        choices.append(choice)
    result["choices"] = choices
    if isinstance(result.get("usage"), dict):
        result["usage"] = {**_USAGE_DEFAULTS, **result["usage"]}
    return result
