"""Token ids the mock model reports for RL training (`return_token_id_information`), in the fields
NeMo Gym's vllm_model puts on the last output item of a turn: `prompt_token_ids`,
`generation_token_ids`, `generation_log_probs` (docs/models.md#token-ids-from-the-mock).

The tokenizer is bytes (ids 0-255) plus role and end markers (256-261). A prompt is its items
rendered in order, each `ROLE <utf-8 bytes of its text> END`, then `ASSISTANT`; a turn's generation
is its output rendered the same way without that first `ASSISTANT`. So when an agent appends a
turn's output and the tool results to its history, the turn's prompt plus its generation is exactly
the start of the next turn's prompt: the check trainers make ("Non-contiguous messages found").
"""

from __future__ import annotations

from typing import Any

import orjson

ROLE_IDS = {"system": 256, "developer": 256, "user": 257, "assistant": 258, "tool": 259}
ASSISTANT = ROLE_IDS["assistant"]
END = 260
OTHER = 261  # an item of a kind the renderer does not know (its JSON is the text)
LOG_PROB = -0.5  # every generated token's log-probability: fixed, so a trainer's copy can be checked
TOKEN_FIELDS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content)
    return "" if content is None else orjson.dumps(content).decode()


def _encode(role: int, text: str) -> list[int]:
    return [role, *text.encode(), END]


def _response_item(item: Any) -> list[int]:
    """One Responses API input or output item."""
    if not isinstance(item, dict):
        return _encode(ROLE_IDS["user"], str(item))
    kind = item.get("type", "message")
    if kind == "message":
        return _encode(ROLE_IDS.get(str(item.get("role")), OTHER), _text(item.get("content")))
    if kind == "function_call":
        return _encode(ASSISTANT, f"{item.get('name', '')} {item.get('arguments', '')}")
    if kind == "function_call_output":
        return _encode(ROLE_IDS["tool"], _text(item.get("output")))
    if kind == "reasoning":
        return _encode(ASSISTANT, _text(item.get("summary")))
    semantic = {key: value for key, value in item.items() if key not in TOKEN_FIELDS}
    return _encode(OTHER, orjson.dumps(semantic, option=orjson.OPT_SORT_KEYS).decode())


def _chat_message(message: Any) -> list[int]:
    """One Chat Completions message; an assistant's tool calls follow its text."""
    if not isinstance(message, dict):
        return _encode(OTHER, str(message))
    role = str(message.get("role"))
    text = _text(message.get("content"))
    for call in message.get("tool_calls") or []:
        function = (call.get("function") or {}) if isinstance(call, dict) else {}
        text += f"\n{function.get('name', '')} {function.get('arguments', '')}"
    return _encode(ROLE_IDS.get(role, OTHER), text)


def responses_prompt(body: dict[str, Any]) -> list[int]:
    """The prompt's tokens: instructions, then the input items, then the assistant's turn."""
    items = body.get("input") or []
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    tokens = _encode(ROLE_IDS["system"], body["instructions"]) if body.get("instructions") else []
    for item in items:
        tokens += _response_item(item)
    return [*tokens, ASSISTANT]


def chat_prompt(body: dict[str, Any]) -> list[int]:
    tokens: list[int] = []
    for message in body.get("messages") or []:
        tokens += _chat_message(message)
    return [*tokens, ASSISTANT]


def responses_generation(output: list[dict[str, Any]]) -> list[int]:
    tokens: list[int] = []
    for item in output:
        tokens += _response_item(item)
    return tokens[1:]  # the prompt ends with the first item's ASSISTANT


def chat_generation(message: dict[str, Any]) -> list[int]:
    return _chat_message(message)[1:]


def token_fields(prompt: list[int], generation: list[int]) -> dict[str, list]:
    return {"prompt_token_ids": prompt, "generation_token_ids": generation,
            "generation_log_probs": [LOG_PROB] * len(generation)}
