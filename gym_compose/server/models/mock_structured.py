"""The mock model's answer to a request for structured output: a JSON value its schema accepts.

A judge server asks its judge for JSON (chat `response_format: {type: json_schema, json_schema:
{schema}}` or `{type: json_object}`; Responses `text: {format: {type: json_schema, schema}}`).
When the mock serves such a judge (docs/models.md#every-model-a-config-names), it answers an
example of that schema (enums: their first value; local `$ref`s and `anyOf` resolved), so the
judge server parses a verdict instead of failing on the mock's plain text.
"""

from __future__ import annotations

from typing import Any, Optional

import orjson

MAX_DEPTH = 12


def requested_schema(body: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The JSON schema the request asks the answer to follow ({} for any JSON object), or None."""
    chat = body.get("response_format")
    responses = (body.get("text") or {}).get("format") if isinstance(body.get("text"), dict) else None
    for fmt, nested in ((chat, "json_schema"), (responses, None)):
        if not isinstance(fmt, dict):
            continue
        if fmt.get("type") == "json_object":
            return {}
        if fmt.get("type") == "json_schema":
            holder = fmt.get(nested) if nested else fmt
            schema = holder.get("schema") if isinstance(holder, dict) else None
            return schema if isinstance(schema, dict) else {}
    return None


def structured_answer(body: dict[str, Any]) -> Optional[str]:
    """The answer text for a structured-output request; None when the request asks for none."""
    schema = requested_schema(body)
    if schema is None:
        return None
    if not schema:
        return "{}"
    from gym_compose.server.models.mock_model import example_value  # it imports this module

    value = example_value(_inlined(schema, schema, 0), "", {})
    return orjson.dumps(value).decode()


def _inlined(node: Any, root: dict[str, Any], depth: int) -> Any:
    """`node` with local `$ref`s replaced by what they name and each `anyOf`/`oneOf` by its first non-null member."""
    if depth > MAX_DEPTH:
        return {}
    if isinstance(node, list):
        return [_inlined(item, root, depth + 1) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        merged = {**(target if isinstance(target, dict) else {}), **{k: v for k, v in node.items() if k != "$ref"}}
        return _inlined(merged, root, depth + 1)
    for key in ("anyOf", "oneOf"):
        options = node.get(key)
        if isinstance(options, list) and options:
            chosen = next((o for o in options if not (isinstance(o, dict) and o.get("type") == "null")), options[0])
            rest = {k: v for k, v in node.items() if k != key}
            return _inlined({**rest, **(chosen if isinstance(chosen, dict) else {})}, root, depth + 1)
    return {key: _inlined(value, root, depth + 1) for key, value in node.items()}
