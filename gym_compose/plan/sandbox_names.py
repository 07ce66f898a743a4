"""The light part of the sandbox plan: the broker's service name and port, and whether a server
declares sandboxes. What every stack's plan and the run supervision ask without importing the
plan itself (its policy models are pydantic's: docs/performance.md)."""

from __future__ import annotations

from typing import Any

from gym_compose.contract import SANDBOX_BROKER_PORT as BROKER_PORT

__all__ = ["BROKER_PORT"]  # and below
BROKER_SERVICE = "sandbox-broker"


def declares_sandboxes(spec: dict[str, Any]) -> bool:
    return isinstance(spec.get("sandbox_config"), dict) or bool(spec.get("sandbox_provider"))
