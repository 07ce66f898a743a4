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


def nemo_gym_masks(key: Any) -> bool:
    """NeMo Gym 0.7's rule for its printed config (`gym env resolve`): a key containing
    `token`, `key` or `header` (as written, any case-sensitive substring: `max_output_tokens` too)."""
    key = str(key)
    return "token" in key or "key" in key or "header" in key


def redact_for_display(data: dict[str, Any]) -> dict[str, Any]:
    """What `resolve` prints: NeMo Gym's masking (every leaf under a key it masks becomes '****',
    a list there a list of '****') on top of `redact` (secret and password keys too)."""
    return _mask_like_nemo_gym(redact(data))


def _mask_like_nemo_gym(node: Any) -> Any:
    if isinstance(node, dict):
        masked = {}
        for key, value in node.items():
            if isinstance(value, dict):
                masked[key] = _mask_like_nemo_gym(value)
            elif isinstance(value, list):
                masked[key] = [MASK] * len(value) if nemo_gym_masks(key) else [
                    _mask_like_nemo_gym(item) if isinstance(item, dict) else item for item in value]
            else:
                masked[key] = MASK if nemo_gym_masks(key) else value
        return masked
    return node
