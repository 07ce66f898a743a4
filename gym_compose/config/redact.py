"""Hiding secret values before a config is shown or written."""

from __future__ import annotations

import re
from typing import Any

MASK = "****"
# api_key, token, secret, password as words of a key name (hf_token, client_secret, API-KEY,
# Authorization), but not counters that merely contain them (max_output_tokens, tokenizer).
_SECRET_KEY = re.compile(
    r"(^|[_\-.])(api[_\-]?keys?|token|secrets?|passwords?|passwd)($|[_\-.])|^authorization$|apikey"
)


def is_secret_key(key: Any) -> bool:
    return bool(_SECRET_KEY.search(str(key).lower()))


def redact(data: dict[str, Any]) -> dict[str, Any]:
    """A copy of `data` with every value under a secret-looking key (`*api_key*`, `*token*`,
    `*secret*`, `*password*`) replaced by '****'. Unset values (None) stay None."""
    return {key: _redact_value(value, is_secret_key(key)) for key, value in data.items()}


def _redact_value(value: Any, secret: bool) -> Any:
    if isinstance(value, dict):
        return {k: _redact_value(v, secret or is_secret_key(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_value(item, secret) for item in value]
    # a flag is no secret (return_token_id_information)
    if secret and value is not None and not isinstance(value, bool):
        return MASK
    return value
