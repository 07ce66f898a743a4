"""Command-line overrides in Hydra's grammar, applied to the merged config with OmegaConf.

`key=value` changes a key that exists, `+key=value` adds one, `++key=value` adds or changes,
`~key` deletes. NeMo Gym merges its command line over the files, so `+key=value` on a key a file
already sets changes it rather than failing; that is kept here so NeMo Gym commands work as-is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from gym_compose.config.suggest import did_you_mean
from gym_compose.errors import UserError


@dataclass(frozen=True)
class Override:
    text: str
    key: str
    value: Any
    kind: str  # "change" | "add" | "force_add" | "delete"


def parse_overrides(texts: list[str]) -> list[Override]:
    if not texts:  # Hydra's parser is costly to import (docs/performance.md)
        return []
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    parsed: list[Override] = []
    for text in texts:
        try:
            (override,) = parser.parse_overrides([text])
        except HydraException as error:
            raise UserError(
                f"cannot parse override {text!r}: {str(error).splitlines()[0]}",
                hint="overrides look like key=value, +key=value, ++key=value or ~key; quote values with "
                "spaces or special characters, e.g. '++key=\"a b\"'",
            ) from None
        if not override.key_or_group or any(not part for part in override.key_or_group.split(".")):
            raise UserError(
                f"override {text!r} has no key (or an empty part in it)",
                hint="write key=value, +key=value or ++key=value with a key such as policy_model_name or a.b.c",
            )
        if override.package is not None or "@" in override.key_or_group:
            raise UserError(f"override {text!r}: Hydra packages (@) are not supported here")
        if override.is_delete():
            kind = "delete"
        elif override.is_force_add():
            kind = "force_add"
        elif override.is_add():
            kind = "add"
        else:
            kind = "change"
        value = None if kind == "delete" else _plain(override.value())
        if override.is_sweep_override():
            raise UserError(f"override {text!r}: sweeps (a,b / range / choice) are not supported")
        parsed.append(Override(text=text, key=override.key_or_group, value=value, kind=kind))
    return parsed


def _plain(value: Any) -> Any:
    """Hydra hands back its own list/dict subclasses and quoted strings; make them plain."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _key_exists(config: DictConfig, key: str) -> bool:
    node: Any = config
    for part in key.split("."):
        # `in` on a DictConfig is False for a '???' value; keys() still lists it
        if not isinstance(node, DictConfig) or part not in node.keys():
            return False
        node = node._get_node(part)
    return True


def _siblings(config: DictConfig, key: str) -> list[str]:
    """The keys next to `key`'s last part, for a did-you-mean."""
    parent_parts = key.split(".")[:-1]
    node: Any = config
    for part in parent_parts:
        if not isinstance(node, DictConfig) or part not in node.keys():
            return []
        node = node._get_node(part)
    if not isinstance(node, DictConfig):
        return []
    prefix = ".".join(parent_parts)
    return [f"{prefix}.{k!s}" if prefix else str(k) for k in node.keys()]


def apply_overrides(config: DictConfig, overrides: list[Override]) -> None:
    """Apply in order, in place. Mappings given as values deep-merge into what is there."""
    for override in overrides:
        exists = _key_exists(config, override.key)
        if override.kind == "change" and not exists:
            raise UserError(
                f"override {override.text!r}: no key {override.key!r} in the config"
                f"{did_you_mean(override.key, _siblings(config, override.key))}",
                hint=f"to add a new key, write ++{override.text}",
            )
        if override.kind == "delete":
            if not exists:
                raise UserError(
                    f"override {override.text!r}: cannot delete {override.key!r}, it is not in the config"
                    f"{did_you_mean(override.key, _siblings(config, override.key))}"
                )
            parent_key, _, last = override.key.rpartition(".")
            parent = OmegaConf.select(config, parent_key) if parent_key else config
            with open_dict(parent):
                del parent[last]
            continue
        try:
            with open_dict(config):
                OmegaConf.update(config, override.key, override.value, merge=True, force_add=True)
        except Exception as error:  # e.g. a key path through a scalar
            raise UserError(f"override {override.text!r} cannot be applied: {error}") from None
