"""A rollout as a conversation the page can draw: messages, tool calls, tool outputs, the verdict.

The input is a rollouts.jsonl line (a `/run` answer: the row, `response`, `reward`, ...) or a
failed attempt from rollouts_failures.jsonl with the rollout as it was sent. Every item becomes a
block `{kind, ...}`; an item of a type this module does not know is kept as `{kind: "other"}` with
its JSON, so nothing the agent produced is hidden.
"""

from __future__ import annotations

import json
from typing import Any

INPUT_KEYS = ("responses_create_params", "response")
IDENTITY_PREFIX = "_ng_"
FAILURE_KEYS = (
    "_ng_attempt_index", "_ng_environment_server", "_ng_failure_class", "_ng_failure_type",
    "_ng_failure_message", "_ng_failure_http_status", "_ng_failure_response_body",
)


def pretty(value: Any) -> str:
    """JSON text indented for reading; a string that holds JSON is unpacked first."""
    if isinstance(value, str):
        stripped = value.strip()
        if stripped[:1] in ("{", "[") and stripped[-1:] in ("}", "]"):
            try:
                return json.dumps(json.loads(stripped), indent=2, ensure_ascii=False)
            except ValueError:
                return value
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                if isinstance(part.get("text"), str):
                    parts.append(part["text"])
                elif isinstance(part.get("refusal"), str):
                    parts.append(f"[refusal] {part['refusal']}")
                else:
                    parts.append(pretty(part))
            else:
                parts.append(str(part))
        return "\n".join(parts)
    return pretty(content) if content is not None else ""


def item_block(item: Any, call_names: dict[str, str]) -> dict[str, Any]:
    if not isinstance(item, dict):
        return {"kind": "other", "type": type(item).__name__, "text": pretty(item)}
    kind = item.get("type") or ("message" if "role" in item else None)
    if kind == "message":
        return {"kind": "message", "role": str(item.get("role") or "assistant"),
                "text": _content_text(item.get("content"))}
    if kind == "function_call":
        name = str(item.get("name") or "?")
        if item.get("call_id"):
            call_names[str(item["call_id"])] = name
        return {"kind": "tool_call", "name": name, "call_id": item.get("call_id"),
                "arguments": pretty(item.get("arguments", ""))}
    if kind == "function_call_output":
        call_id = item.get("call_id")
        return {"kind": "tool_output", "name": call_names.get(str(call_id)), "call_id": call_id,
                "text": pretty(item.get("output", ""))}
    if kind == "reasoning":
        summary = item.get("summary") or item.get("content") or []
        return {"kind": "reasoning", "text": _content_text(summary) or pretty(item)}
    return {"kind": "other", "type": str(kind), "text": pretty(item)}


def input_blocks(params: Any, call_names: dict[str, str]) -> list[dict[str, Any]]:
    if not isinstance(params, dict):
        return []
    blocks: list[dict[str, Any]] = []
    if isinstance(params.get("instructions"), str) and params["instructions"]:
        blocks.append({"kind": "message", "role": "instructions", "text": params["instructions"]})
    items = params.get("input")
    if isinstance(items, str):
        blocks.append({"kind": "message", "role": "user", "text": items})
    elif isinstance(items, list):
        blocks.extend(item_block(item, call_names) for item in items)
    elif items is not None:
        blocks.append({"kind": "other", "type": "input", "text": pretty(items)})
    return blocks


def tools_offered(params: Any) -> list[dict[str, Any]]:
    if not isinstance(params, dict) or not isinstance(params.get("tools"), list):
        return []
    return [
        {"name": str(tool.get("name") or tool.get("type") or "?"), "description": tool.get("description"),
         "spec": pretty(tool)}
        for tool in params["tools"] if isinstance(tool, dict)
    ]


def verdict_fields(record: dict[str, Any]) -> dict[str, Any]:
    """What the verifier and the row say beside the conversation: reward, answers, task fields."""
    return {
        key: value for key, value in record.items()
        if key not in INPUT_KEYS and not key.startswith(IDENTITY_PREFIX) and key != "agent_ref"
    }


def conversation(record: dict[str, Any]) -> dict[str, Any]:
    """The drawable form of one rollouts.jsonl line."""
    call_names: dict[str, str] = {}
    params = record.get("responses_create_params")
    raw_response = record.get("response")
    response: dict[str, Any] = raw_response if isinstance(raw_response, dict) else {}
    raw_output = response.get("output")
    output: list[Any] = raw_output if isinstance(raw_output, list) else []
    blocks = input_blocks(params, call_names)
    prompt_length = len(blocks)
    blocks.extend(item_block(item, call_names) for item in output)
    if response.get("error"):
        blocks.append({"kind": "error", "text": pretty(response["error"])})
    return {
        "identity": {key: value for key, value in record.items() if key.startswith(IDENTITY_PREFIX)},
        "agent": (record.get("agent_ref") or {}).get("name") if isinstance(record.get("agent_ref"), dict) else None,
        "model": response.get("model"),
        "usage": response.get("usage"),
        "status": response.get("status"),
        "tools": tools_offered(params),
        "blocks": blocks,
        "prompt_length": prompt_length,
        "reward": record.get("reward"),
        "verdict": verdict_fields(record),
    }


def failed_rollout(attempts: list[dict[str, Any]], sent: dict[str, Any] | None) -> dict[str, Any]:
    """A rollout that never got an answer: its failed attempts (latest last) and what was sent."""
    view = (conversation(sent) if sent
            else {"blocks": [], "tools": [], "prompt_length": 0, "verdict": {}, "identity": {}})
    view["reward"] = None
    view["verdict"] = {}
    view["identity"] = {key: value for key, value in (attempts[-1] if attempts else {}).items()
                        if key.startswith(IDENTITY_PREFIX) and key not in FAILURE_KEYS}
    view["failures"] = [failure_block(attempt) for attempt in attempts]
    return view


def failure_block(attempt: dict[str, Any]) -> dict[str, Any]:
    body = attempt.get("_ng_failure_response_body")
    return {
        "attempt": attempt.get("_ng_attempt_index"),
        "class": attempt.get("_ng_failure_class"),
        "type": attempt.get("_ng_failure_type"),
        "message": attempt.get("_ng_failure_message"),
        "http_status": attempt.get("_ng_failure_http_status"),
        "server": attempt.get("_ng_environment_server"),
        "body": pretty(body) if body else None,
    }
