"""Point a NeMo Gym-runtime server's `sandbox_provider` at gym-compose's broker.

NeMo Gym servers build their provider from config: `create_provider(resolve_provider_config(
self.config.sandbox_provider, global_config))`, where `sandbox_provider: sandbox` names a top-level
block such as `sandbox: {docker: {...}}` (or is that block inline). In a gym-compose stack the plan
already runs every such block as gym-compose sandboxes (one broker, each server's
`sandbox_config`), so the launcher rewrites the block the server refers to into the `gym_compose`
provider (published to NeMo Gym's registry by the runtime image) before NeMo Gym reads it. The
block's `default_metadata` is kept: NeMo Gym merges it into every spec itself.
"""

from __future__ import annotations

from typing import Any, Optional

from gym_compose.sandbox.client import PROVIDER_NAME
from gym_compose.sandbox.provider_config import DEFAULT_METADATA_KEY


def route_to_broker(config: dict[str, Any], spec: dict[str, Any]) -> Optional[str]:
    """Rewrite (in place) the provider block `spec["sandbox_provider"]` refers to; a notice when a
    block of another provider was replaced, else None. A missing block is left for NeMo Gym to
    report (the plan refuses it before a container starts)."""
    reference = spec.get("sandbox_provider")
    if isinstance(reference, str) and reference:
        block = config.get(reference)
        label = f"top-level `{reference}:`"
    elif isinstance(reference, dict):
        block, label = reference, "inline sandbox_provider"
    else:
        return None
    if not isinstance(block, dict):
        return None
    providers = [key for key in block if key != DEFAULT_METADATA_KEY]
    if providers == [PROVIDER_NAME]:
        return None
    routed: dict[str, Any] = {PROVIDER_NAME: {}}
    if DEFAULT_METADATA_KEY in block:
        routed[DEFAULT_METADATA_KEY] = block[DEFAULT_METADATA_KEY]
    if isinstance(reference, str):
        config[reference] = routed
    else:
        spec["sandbox_provider"] = routed
    named = ", ".join(repr(name) for name in providers) or "none"
    return (f"gym-compose: sandbox provider {named} ({label}) runs as gym-compose sandboxes (NeMo Gym provider "
            f"{PROVIDER_NAME!r}, the project's sandbox broker); its own settings are not used")
