"""Responses API <-> Chat Completions, for upstream servers that only offer chat completions.

Covers what agents exchange: messages (text parts), function tools, tool calls and their
outputs, and reasoning text (`reasoning_content`/`reasoning` on assistant messages, as vLLM and
SGLang return it).
"""

from __future__ import annotations

from typing import Any

# Responses params with a direct chat-completions equivalent (name there when it differs).
_PASSTHROUGH_PARAMS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "max_output_tokens": "max_tokens",
    "parallel_tool_calls": "parallel_tool_calls",
    "user": "user",
    "top_logprobs": "top_logprobs",
}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for part in content or []:
        if isinstance(part, dict) and part.get("type") in ("input_text", "output_text", "text", "summary_text"):
            parts.append(part.get("text") or "")
    return "".join(parts)


def _chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    function = {"name": tool["name"], "parameters": tool.get("parameters") or {"type": "object", "properties": {}}}
    if tool.get("description"):
        function["description"] = tool["description"]
    if tool.get("strict") is not None:
        function["strict"] = tool["strict"]
    return {"type": "function", "function": function}


def _chat_tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    return choice


def responses_to_chat(params: dict[str, Any], model: str) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    if params.get("instructions"):
        messages.append({"role": "system", "content": params["instructions"]})
    items = params.get("input") or []
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    pending_reasoning: list[str] = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "reasoning":
            pending_reasoning.append(_text_of(item.get("summary")) or _text_of(item.get("content")))
            continue
        if kind == "function_call":
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item.get("arguments") or "{}"}}
            last = messages[-1] if messages else None
            if last and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append({"role": "tool", "tool_call_id": item["call_id"],
                             "content": output if isinstance(output, str) else _text_of(output)})
        elif kind == "message":
            role = item.get("role", "user")
            messages.append({"role": role, "content": _text_of(item.get("content"))})
        else:
            raise ValueError(f"input item type {kind!r} cannot be sent to a chat-completions endpoint")
        if pending_reasoning and messages[-1]["role"] == "assistant":
            messages[-1]["reasoning_content"] = "\n".join(pending_reasoning)
            pending_reasoning = []
    chat: dict[str, Any] = {"model": model, "messages": messages}
    for source, target in _PASSTHROUGH_PARAMS.items():
        if params.get(source) is not None:
            chat[target] = params[source]
    tools = [_chat_tool(tool) for tool in params.get("tools") or [] if tool.get("type", "function") == "function"]
    if tools:
        chat["tools"] = tools
        chat["tool_choice"] = _chat_tool_choice(params.get("tool_choice", "auto"))
    if params.get("metadata"):
        chat["metadata"] = params["metadata"]
    return chat


def _detail(usage: dict[str, Any], group: str, key: str) -> int:
    """A token count from usage's `<group>: {<key>: N}` (absent or null: 0)."""
    return int((usage.get(group) or {}).get(key) or 0)


def chat_to_response(completion: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    choices = completion.get("choices") or []
    if not choices:
        raise ValueError("chat completion has no choices")
    choice = choices[0]
    message = choice.get("message") or {}
    base_id = completion.get("id") or "chatcmpl"
    output: list[dict[str, Any]] = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if reasoning:
        output.append({"type": "reasoning", "id": f"rs_{base_id}",
                       "summary": [{"type": "summary_text", "text": reasoning}]})
    if message.get("content"):
        output.append({"type": "message", "id": f"msg_{base_id}", "role": "assistant", "status": "completed",
                       "content": [{"type": "output_text", "text": message["content"], "annotations": []}]})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        output.append({"type": "function_call", "id": f"fc_{call.get('id')}", "call_id": call.get("id"),
                       "name": function.get("name"), "arguments": function.get("arguments") or "{}",
                       "status": "completed"})
    usage = completion.get("usage") or {}
    prompt, generated = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    incomplete = {"reason": "max_output_tokens"} if choice.get("finish_reason") == "length" else None
    return {
        "id": f"resp_{base_id}", "object": "response", "created_at": float(completion.get("created") or 0),
        "model": completion.get("model") or "", "status": "incomplete" if incomplete else "completed",
        "output": output, "error": None, "incomplete_details": incomplete,
        "parallel_tool_calls": params.get("parallel_tool_calls", True),
        "tool_choice": params.get("tool_choice", "auto"), "tools": params.get("tools") or [],
        "metadata": params.get("metadata") or {},
        "usage": {"input_tokens": prompt, "output_tokens": generated,
                  "total_tokens": int(usage.get("total_tokens") or prompt + generated),
                  "input_tokens_details": {"cached_tokens": _detail(usage, "prompt_tokens_details", "cached_tokens")},
                  "output_tokens_details": {
                      "reasoning_tokens": _detail(usage, "completion_tokens_details", "reasoning_tokens")}},
    }
