"""NeMo Gym's sandbox provider `gym_compose` for servers on the NeMo Gym runtime: the real
`nemo_gym.sandbox` package (its `AsyncSandbox`, registry and types) drives the project's broker.

Only imported where nemo-gym is installed (the NeMo Gym runtime image, which publishes this class
in the `nemo_gym.sandbox_providers` entry-point group; docs/nemo-gym-runtime.md). The broker
client (`BrokerProvider`) speaks gym-compose's own value types; this adapter hands NeMo Gym its
own types back and raises NeMo Gym's exceptions, so `except SandboxCreateError` in NeMo Gym code
catches what the broker refused.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

from nemo_gym.sandbox.providers.base import (
    SandboxCreateError,
    SandboxCreateVerificationError,
    SandboxExecResult,
    SandboxHandle,
    SandboxSpec,
    SandboxStatus,
)

from gym_compose.sandbox import types as own
from gym_compose.sandbox.client import PROVIDER_NAME, BrokerProvider


class GymComposeSandboxProvider:
    """NeMo Gym's `SandboxProvider` and `ConnectableProvider` protocols on gym-compose's broker.

    Construction takes the `gym_compose:` provider block's settings; the broker's own settings
    there (`max_live`, ...) are read by the plan, not here. The broker's address, token and this
    server's name come from the environment the plan sets."""

    name = PROVIDER_NAME

    def __init__(self, **settings: Any) -> None:
        connection = {key: settings[key] for key in ("broker", "token", "server") if key in settings}
        self._broker = BrokerProvider(**connection)
        self._noticed: set[str] = set()

    async def create(self, spec: SandboxSpec) -> SandboxHandle:
        try:
            handle = await self._broker.create(self._own_spec(spec))
        except own.SandboxCreateVerificationError as error:
            raise SandboxCreateVerificationError(str(error)) from None
        except own.SandboxCreateError as error:
            raise SandboxCreateError(str(error)) from None
        return SandboxHandle(sandbox_id=handle.sandbox_id, provider_name=self.name, raw=handle.raw)

    def _own_spec(self, spec: SandboxSpec) -> own.SandboxSpec:
        """NeMo Gym's spec as the broker's request. `files` is not part of it: NeMo Gym's
        `AsyncSandbox.start` uploads them itself once the sandbox runs."""
        resources = spec.resources
        gpu, gpu_type, disk_gib = (getattr(resources, key, None) for key in ("gpu", "gpu_type", "disk_gib"))
        if gpu or gpu_type:
            raise SandboxCreateError("gym-compose sandboxes have no GPUs: SandboxSpec.resources.gpu/gpu_type cannot "
                                     "be granted (run GPU work in a server, not in a sandbox)")
        if disk_gib:
            self._notice("disk_gib", f"SandboxSpec.resources.disk_gib={disk_gib} is not enforced by gym-compose "
                                     "sandboxes (their writable layer has the engine's disk)")
        return own.SandboxSpec(
            image=spec.image, ttl_s=spec.ttl_s, ready_timeout_s=spec.ready_timeout_s, workdir=spec.workdir,
            env=dict(spec.env), metadata={str(k): str(v) for k, v in spec.metadata.items()},
            resources=own.SandboxResources(cpu=getattr(resources, "cpu", None),
                                           memory_mib=getattr(resources, "memory_mib", None)),
            entrypoint=list(spec.entrypoint) if spec.entrypoint else None,
            provider_options=dict(spec.provider_options), ports=tuple(spec.ports))

    def _notice(self, key: str, message: str) -> None:
        if key not in self._noticed:
            self._noticed.add(key)
            print(f"gym-compose: {message}", file=sys.stderr, flush=True)

    async def exec(self, handle: SandboxHandle, command: str, *, cwd: Optional[str] = None,
                   env: Optional[dict[str, str]] = None, timeout_s: Optional[float] = None,
                   user: Optional[str | int] = None) -> SandboxExecResult:
        """Never raises for the command: a dead sandbox or an unreachable broker is return code 125
        with `error_type` "sandbox", another user than the sandbox's own "user" (the broker's
        reason in stderr), a command killed at its time limit "timeout", by the memory limit "oom"."""
        result = await self._broker.exec(handle, command, cwd=cwd, env=env, timeout_s=timeout_s, user=user)
        return SandboxExecResult(stdout=result.stdout, stderr=result.stderr, return_code=result.return_code,
                                 error_type=result.error_type)

    async def upload_file(self, handle: SandboxHandle, source_path: Path, target_path: str) -> None:
        await self._broker.upload_file(handle, source_path, target_path)

    async def download_file(self, handle: SandboxHandle, source_path: str, target_path: Path) -> None:
        await self._broker.download_file(handle, source_path, target_path)

    async def status(self, handle: SandboxHandle) -> SandboxStatus:
        return SandboxStatus((await self._broker.status(handle)).value)

    async def close(self, handle: SandboxHandle) -> None:
        await self._broker.close(handle)

    async def aclose(self) -> None:
        await self._broker.aclose()

    # NeMo Gym's SupportsSandboxPauseResume: docker pause / unpause (processes and memory survive)

    async def pause(self, handle: SandboxHandle) -> None:
        await self._broker.pause(handle)

    async def resume(self, handle: SandboxHandle) -> None:
        await self._broker.resume(handle)

    # gym-compose's snapshots, for servers that reach for them (`provider.snapshot(handle)`, ...)

    async def snapshot(self, handle: SandboxHandle) -> own.SandboxSnapshot:
        return await self._broker.snapshot(handle)

    async def restore(self, handle: SandboxHandle, snapshot: str) -> float:
        return await self._broker.restore(handle, snapshot)

    async def fork(self, handle: Optional[SandboxHandle], n: int, **options: Any) -> tuple[own.SandboxSnapshot,
                                                                                             list[SandboxHandle]]:
        try:
            snapshot, handles = await self._broker.fork(handle, n, **options)
        except own.SandboxCreateError as error:
            raise SandboxCreateError(str(error)) from None
        return snapshot, [SandboxHandle(sandbox_id=h.sandbox_id, provider_name=self.name, raw=h.raw) for h in handles]

    async def delete_snapshot(self, snapshot: str) -> None:
        await self._broker.delete_snapshot(snapshot)

    async def serialize_handle(self, handle: SandboxHandle, *, scope: Optional[str] = None) -> dict[str, Any]:
        return await self._broker.serialize_handle(handle, scope=scope)

    async def connect(self, descriptor: Mapping[str, Any]) -> SandboxHandle:
        try:
            handle = await self._broker.connect(descriptor)
        except own.SandboxCreateError as error:
            raise SandboxCreateError(str(error)) from None
        return SandboxHandle(sandbox_id=handle.sandbox_id, provider_name=self.name, raw=handle.raw)
