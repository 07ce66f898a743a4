"""Hiding secret values before a config is shown or written."""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

MASK = "****"
# What a config writes for "no key" (vLLM's `--api-key EMPTY` convention, the mock's policy_api_key):
# no secret, so kept as it is and not asked for again by `eval rerun`.
PLACEHOLDER_SECRETS = frozenset({"EMPTY", "dummy"})
# api_key, token, secret, password as words of a key name (hf_token, client_secret, API-KEY,
# Authorization), but not counters that merely contain them (max_output_tokens, tokenizer).
_SECRET_KEY = re.compile(
    r"(^|[_\-.])(api[_\-]?keys?|token|secrets?|passwords?|passwd)($|[_\-.])|^authorization$|apikey"
)


def is_secret_key(key: Any) -> bool:
    return bool(_SECRET_KEY.search(str(key).lower()))


def redact(data: dict[str, Any], masked: Collection[tuple[str, ...]] = ()) -> dict[str, Any]:
    """A copy of `data` with every value under a secret-looking key (`*api_key*`, `*token*`,
    `*secret*`, `*password*`) replaced by '****', and every value at or under a path of `masked`
    (values the host's environment gave: `config.host_environment`). Unset values (None) stay None."""
    return _Redactor(set(masked)).value(data, (), False, False)


def mask_paths(data: dict[str, Any], masked: Collection[tuple[str, ...]]) -> dict[str, Any]:
    """A copy of `data` with only the values at or under `masked` as '****' (secret keys as they are)."""
    return _Redactor(set(masked), by_key=False).value(data, (), False, False)


class _Redactor:
    def __init__(self, masked: set[tuple[str, ...]], by_key: bool = True):
        self.masked = masked
        self.by_key = by_key

    def value(self, value: Any, path: tuple[str, ...], secret: bool, from_host: bool) -> Any:
        from_host = from_host or path in self.masked
        if isinstance(value, dict):
            return {key: self.value(item, (*path, str(key)), secret or (self.by_key and is_secret_key(key)), from_host)
                    for key, item in value.items()}
        if isinstance(value, list):
            return [self.value(item, (*path, str(index)), secret, from_host) for index, item in enumerate(value)]
        if value is None:
            return None
        # a flag is no secret (return_token_id_information), but one the host's environment set is its value
        if from_host or (secret and not isinstance(value, bool) and value not in PLACEHOLDER_SECRETS):
            return MASK
        return value


def nemo_gym_masks(key: Any) -> bool:
    """NeMo Gym 0.7's rule for its printed config (`gym env resolve`): a key containing
    `token`, `key` or `header` (as written, any case-sensitive substring: `max_output_tokens` too)."""
    key = str(key)
    return "token" in key or "key" in key or "header" in key


def redact_for_display(data: dict[str, Any], masked: Collection[tuple[str, ...]] = ()) -> dict[str, Any]:
    """What `resolve` prints: NeMo Gym's masking (every leaf under a key it masks becomes '****',
    a list there a list of '****') on top of `redact` (secret and password keys, and `masked`)."""
    return _mask_like_nemo_gym(redact(data, masked))


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
