"""NeMo Gym's `sandbox_provider` references: a name of a top-level block (`sandbox_provider: sandbox`
-> `sandbox: {docker: {...}}`) or an inline single-key mapping `{provider_name: {...}}`. A block
may carry `default_metadata`, merged under each sandbox's own metadata."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DEFAULT_METADATA_KEY = "default_metadata"


def _plain(value: Any) -> Any:
    try:  # a server may hold an OmegaConf node
        from omegaconf import DictConfig, OmegaConf

        if isinstance(value, DictConfig):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:
        pass
    return dict(value) if isinstance(value, Mapping) else value


def provider_blocks(config: Mapping[str, Any] | None) -> list[str]:
    """Top-level keys that look like provider blocks (one key besides default_metadata)."""
    names = []
    for key, value in (config or {}).items():
        value = _plain(value)
        if isinstance(value, Mapping) and len([k for k in value if k != DEFAULT_METADATA_KEY]) == 1:
            names.append(str(key))
    return sorted(names)


def provider_block(reference: str | Mapping[str, Any], config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The block a reference names (or the inline block itself), as a plain dict."""
    if isinstance(reference, str):
        if not reference:
            raise ValueError("a sandbox provider reference must be a non-empty name")
        block = (config or {}).get(reference)
        if block is None:
            available = ", ".join(repr(name) for name in provider_blocks(config)) or "(none)"
            raise ValueError(f"sandbox provider reference {reference!r} is not defined in the config: add a top-level "
                             f"`{reference}:` block such as `{reference}: {{gym_compose: {{}}}}` "
                             f"(blocks found: {available})")
        source = f"reference {reference!r}"
    elif isinstance(reference, Mapping):
        block, source = reference, "inline sandbox_provider"
    else:
        raise TypeError(f"sandbox_provider must be a name or a single-key mapping, got {type(reference).__name__}")
    block = _plain(block)
    if not isinstance(block, Mapping):
        raise ValueError(f"sandbox provider config from {source} must be a mapping, got {block!r}")
    return dict(block)


def resolve_provider_config(reference: str | Mapping[str, Any],
                            config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """`{provider_name: settings}` for `create_provider`, without the reserved keys."""
    block = provider_block(reference, config)
    keys = [key for key in block if key != DEFAULT_METADATA_KEY]
    if len(keys) != 1:
        raise ValueError(f"a sandbox provider block has exactly one provider key {{name: config}}, got {keys!r}")
    return {keys[0]: block[keys[0]]}


def resolve_provider_metadata(reference: str | Mapping[str, Any],
                              config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    metadata = provider_block(reference, config).get(DEFAULT_METADATA_KEY) or {}
    if not isinstance(metadata, Mapping):
        raise ValueError(f"`{DEFAULT_METADATA_KEY}` of a sandbox provider block must be a mapping, got {metadata!r}")
    return dict(metadata)
