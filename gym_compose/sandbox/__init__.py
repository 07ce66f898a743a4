"""Sandboxes: per-session containers that run model-written code, leased from the project's broker.

The API has NeMo Gym 0.7's names (`nemo_gym.sandbox` maps here through the compatibility layer):

    from gym_compose.sandbox import AsyncSandbox, SandboxSpec
    sandbox = await AsyncSandbox().start(SandboxSpec())
    result = await sandbox.exec("echo hi")        # SandboxExecResult(stdout, stderr, return_code, error_type)
    await sandbox.stop()

Declaring sandboxes in a server's config, the broker, limits and isolation: docs/sandboxes.md.
"""

from gym_compose.sandbox.api import AsyncSandbox, Sandbox, SandboxPty
from gym_compose.sandbox.client import (
    BrokerProvider,
    create_provider,
    get_provider_class,
    list_providers,
    register_provider,
)
from gym_compose.sandbox.provider_config import resolve_provider_config, resolve_provider_metadata
from gym_compose.sandbox.types import (
    ExecResult,
    SandboxCreateError,
    SandboxCreateVerificationError,
    SandboxDeadError,
    SandboxError,
    SandboxExecResult,
    SandboxHandle,
    SandboxPtyError,
    SandboxResources,
    SandboxSnapshot,
    SandboxSpec,
    SandboxStatus,
)
from gym_compose.sandbox.utils import cpu_cap_env, rewrite_image

__all__ = [
    "AsyncSandbox", "BrokerProvider", "ExecResult", "Sandbox", "SandboxCreateError", "SandboxCreateVerificationError",
    "SandboxDeadError", "SandboxError", "SandboxExecResult", "SandboxHandle", "SandboxPty", "SandboxPtyError",
    "SandboxResources", "SandboxSnapshot", "SandboxSpec", "SandboxStatus", "cpu_cap_env", "create_provider",
    "get_provider_class", "list_providers", "register_provider", "resolve_provider_config", "resolve_provider_metadata",
    "rewrite_image",
]
