"""From the merged OmegaConf tree to a plain dict: unset `???` values and interpolations."""

from __future__ import annotations

from typing import Any, cast

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationKeyError, InterpolationResolutionError, OmegaConfBaseException

from gym_compose.config.constants import MISSING_VALUE
from gym_compose.errors import UserError


def missing_paths(config: DictConfig) -> list[str]:
    plain = OmegaConf.to_container(config, resolve=False, throw_on_missing=False)
    found: list[str] = []

    def walk(node: Any, prefix: str) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
        for key, value in items:
            path = f"{prefix}[{key}]" if isinstance(node, list) else (f"{prefix}.{key}" if prefix else str(key))
            if value == MISSING_VALUE:
                found.append(path)
            else:
                walk(value, path)

    walk(plain, "")
    return found


def raise_on_missing(config: DictConfig, origins: dict[str, str]) -> None:
    paths = missing_paths(config)
    if not paths:
        return
    lines = []
    for path in paths:
        origin = origins.get(path.split(".")[0].split("[")[0])
        lines.append(f"  ++{path}=<value>" + (f"    (set to ??? in {origin})" if origin else ""))
    raise UserError(
        f"{len(paths)} required value(s) are unset ('???') after merging; give each one, e.g. on the "
        "command line:\n" + "\n".join(lines),
        hint="or set them in env.yaml in the working directory, or in a config file",
    )


def to_plain(config: DictConfig) -> dict[str, Any]:
    """Resolve every interpolation; an interpolation with no target is an error naming it."""
    try:
        plain = OmegaConf.to_container(config, resolve=True, throw_on_missing=True)
        assert isinstance(plain, dict)  # a DictConfig becomes a dict
        return cast(dict[str, Any], plain)
    except InterpolationKeyError as error:
        where = f" in {error.full_key}" if getattr(error, "full_key", None) else ""
        missing_key = str(error).split("'")[1] if "'" in str(error) else str(error)
        raise UserError(
            f"interpolation ${{{missing_key}}}{where} has no target: no key {missing_key!r} is set",
            hint=f"set it, e.g. ++{missing_key}=<value> (policy_* also via -m/--model, --model-url, --model-api-key)",
        ) from None
    except InterpolationResolutionError as error:
        where = f" in {error.full_key}" if getattr(error, "full_key", None) else ""
        raise UserError(f"cannot resolve an interpolation{where}: {str(error).splitlines()[0]}") from None
    except OmegaConfBaseException as error:
        raise UserError(f"invalid config: {str(error).splitlines()[0]}") from None
