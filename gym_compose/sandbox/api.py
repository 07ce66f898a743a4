"""`AsyncSandbox` and its blocking twin `Sandbox`: NeMo Gym 0.7's sandbox API over any provider
(in a gym-compose stack: the project's broker, see gym_compose/sandbox/client.py).

    sandbox = await AsyncSandbox().start(SandboxSpec(env={"A": "1"}))   # the server's declared image
    result = await sandbox.exec("python3 -c 'print(6 * 7)'", timeout_s=30)
    result.return_code, result.stdout, result.stderr, result.error_type  # 0, "42\n", "", None
    await sandbox.upload("local.txt", "/work/in.txt"); await sandbox.download("/work/out.txt", "out.txt")
    await sandbox.stop()                                                 # destroyed, never reused
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Optional, TypeVar

from gym_compose.sandbox.client import BrokerProvider, create_provider
from gym_compose.sandbox.types import SandboxExecResult, SandboxHandle, SandboxSnapshot, SandboxSpec, SandboxStatus

T = TypeVar("T")
_DECLARED = object()  # exec's default timeout: the one the server declared (180 s unless it says otherwise)
SYNC_TIMEOUT_S = 3600.0


class SandboxPty:
    """PTY sessions are not offered by gym-compose sandboxes; every method says so."""

    async def create(self, *args: Any, **kwargs: Any):
        raise NotImplementedError("gym-compose sandboxes have no PTY sessions; use exec()")

    attach = exec = create


class AsyncSandbox:
    def __init__(self, provider: Mapping[str, Any] | Any | None = None, spec: Optional[SandboxSpec] = None, *,
                 owns_provider: bool = True):
        self._provider = create_provider(provider) if provider is None or isinstance(provider, Mapping) else provider
        self._owns_provider = owns_provider
        self._spec = spec
        self._handle: Optional[SandboxHandle] = None
        self._stopped = True
        self._closed = False
        self._connected = False
        self.pty = SandboxPty()
        # after stop(): what the sandbox cost, from the broker (gym-compose): leased_s, commands,
        # cpu_s, peak_memory_bytes (docs/sandboxes.md#what-a-rollout-cost); None before or elsewhere
        self.cost: Optional[dict[str, Any]] = None

    @property
    def sandbox_id(self) -> Optional[str]:
        return self._handle.sandbox_id if self._handle is not None else None

    @property
    def handle(self) -> Optional[SandboxHandle]:
        return self._handle

    def _require_handle(self) -> SandboxHandle:
        if self._handle is None or self._stopped:
            raise RuntimeError("Sandbox has not been started")
        return self._handle

    async def start(self, spec: Optional[SandboxSpec] = None) -> "AsyncSandbox":
        if self._closed:
            raise RuntimeError("Sandbox has been stopped")
        if self._handle is not None and not self._stopped:
            raise RuntimeError("Sandbox is already started")
        spec = spec if spec is not None else self._spec if self._spec is not None else SandboxSpec()
        self._handle = await self._provider.create(spec)
        self._spec, self._stopped = spec, False
        try:
            for index, (target, text) in enumerate(spec.files.items()):
                if hasattr(self._provider, "write_bytes"):
                    await self._provider.write_bytes(self._handle, text.encode("utf-8"), target)
                else:  # a provider registered from outside takes files from disk
                    import tempfile

                    with tempfile.TemporaryDirectory() as folder:
                        source = Path(folder) / f"file-{index}"
                        source.write_text(text, encoding="utf-8")
                        await self._provider.upload_file(self._handle, source, target)
        except BaseException:
            await self.stop()
            raise
        return self

    async def start_with_setup(self, spec: Optional[SandboxSpec],
                               setup: Callable[["AsyncSandbox"], Awaitable[None]]) -> "AsyncSandbox":
        await self.start(spec)
        try:
            await setup(self)
        except BaseException:
            await self.stop()
            raise
        return self

    async def exec(self, command: str, *, cwd: Optional[str] = None, env: Optional[dict[str, str]] = None,
                   timeout_s: Any = _DECLARED, user: Optional[str | int] = None,
                   preserve_background_services: bool = False) -> SandboxExecResult:
        """Run `command` with the sandbox's shell. Never raises for the command: a non-zero
        return_code is the command's; `error_type` "timeout", "oom" or "sandbox" says the sandbox
        stopped it or is dead (stderr gives the reason). Background processes survive the command."""
        if cwd is None and self._spec is not None:
            cwd = self._spec.workdir
        timeout = None if timeout_s is _DECLARED else timeout_s
        return await self._provider.exec(self._require_handle(), command, cwd=cwd, env=env, timeout_s=timeout,
                                         user=user)

    async def upload(self, local_path: Path | str, remote_path: str) -> None:
        await self._provider.upload_file(self._require_handle(), Path(local_path), remote_path)

    async def download(self, remote_path: str, local_path: Path | str) -> None:
        await self._provider.download_file(self._require_handle(), remote_path, Path(local_path))

    async def write_file(self, remote_path: str, data: bytes | str, mode: Optional[int] = None) -> None:
        """Write bytes (or text) to a file in the sandbox (gym-compose; no local file needed)."""
        payload = data.encode("utf-8") if isinstance(data, str) else data
        await self._provider.write_bytes(self._require_handle(), payload, remote_path, mode)

    async def read_file(self, remote_path: str) -> bytes:
        """A file's bytes from the sandbox (gym-compose; no local file needed)."""
        return await self._provider.read_bytes(self._require_handle(), remote_path)

    async def status(self) -> SandboxStatus:
        if self._handle is None:
            return SandboxStatus.UNKNOWN
        if self._stopped:
            return SandboxStatus.STOPPED
        return await self._provider.status(self._handle)

    async def endpoint(self, port: int):
        raise NotImplementedError("gym-compose sandboxes publish no ports: the server that leases a sandbox "
                                  "reaches it over their shared sandbox network")

    async def pause(self) -> None:
        """Freeze the sandbox's processes (NeMo Gym 0.7's pause): they keep their memory and files
        and use no CPU until resume(); commands and files are refused meanwhile. Docker only."""
        await self._provider_with("pause").pause(self._require_handle())

    async def resume(self) -> None:
        await self._provider_with("resume").resume(self._require_handle())

    # -- gym-compose's extensions of NeMo Gym's API ----------------------------------------------

    async def snapshot(self) -> SandboxSnapshot:
        """The sandbox's filesystem now, kept by the broker until deleted or `down` (not its
        processes or memory, not /tmp): fork sandboxes from it, or restore() one to it."""
        return await self._provider_with("snapshot").snapshot(self._require_handle())

    async def fork(self, n: int, *, snapshot: Optional[SandboxSnapshot | str] = None,
                   env: Optional[dict[str, str]] = None, metadata: Optional[dict[str, str]] = None,
                   ready_timeout_s: Optional[float] = None, phase: Optional[str] = None) -> list["AsyncSandbox"]:
        """n new sandboxes, each with this one's files now (a snapshot taken for the purpose) or
        those of `snapshot`; each changes its own copy, and starts in egress `phase` (default: the
        default one). Stop each when done."""
        provider = self._provider_with("fork")
        _, handles = await provider.fork(self._require_handle(), n, snapshot=_snapshot_id(snapshot), env=env,
                                         metadata=metadata, ready_timeout_s=ready_timeout_s, phase=phase)
        return [self._adopt(handle) for handle in handles]

    async def set_phase(self, phase: str) -> bool:
        """Move the sandbox to another phase of its server's egress allow-list (`network.egress.phases`;
        "default" is `allow`'s): from now on it reaches that phase's hosts alone, running processes
        included. Whether it moved (False: it was in that phase). A phase the server did not declare
        raises SandboxError. Start a sandbox in a phase with SandboxSpec(provider_options={"phase": ...})."""
        moved = await self._provider_with("set_phase").set_phase(self._require_handle(), phase)
        return bool(moved.get("changed"))

    async def checkpoint(self, key: str, state: Any = None) -> None:
        """Save the sandbox's files now, with `state` (JSON: what the caller needs to go on from
        here, e.g. its transcript), as checkpoint `key` of the sandbox's server, replacing an
        earlier one of that key. Works on a sandbox handed over (connect), too."""
        await self._provider_with("checkpoint").checkpoint(self._require_handle(), key, state)

    async def restore_checkpoint(self, key: str) -> Optional[Any]:
        """Put checkpoint `key`'s files back into this sandbox (its processes end) and return the
        state saved with it; None when there is no such checkpoint (this sandbox is unchanged)."""
        restored = await self._provider_with("restore_checkpoint").restore_checkpoint(self._require_handle(), key)
        return None if restored is None else restored.get("state")

    async def forget_checkpoint(self, key: str) -> bool:
        """Remove checkpoint `key` (whether there was one)."""
        return await self._provider_with("forget_checkpoint").forget_checkpoint(self._require_handle(), key)

    @classmethod
    async def from_snapshot(cls, snapshot: SandboxSnapshot | str, n: int = 1, *, provider: Any = None,
                            env: Optional[dict[str, str]] = None, metadata: Optional[dict[str, str]] = None,
                            ready_timeout_s: Optional[float] = None) -> list["AsyncSandbox"]:
        """n sandboxes forked from a snapshot of one of this server's sandboxes (the sandbox
        itself may be gone)."""
        provider = BrokerProvider() if provider is None else create_provider(provider) \
            if isinstance(provider, Mapping) else provider
        _, handles = await provider.fork(None, n, snapshot=_snapshot_id(snapshot), env=env, metadata=metadata,
                                         ready_timeout_s=ready_timeout_s)
        sandboxes = []
        for handle in handles:
            sandbox = cls(provider, SandboxSpec(workdir=(handle.raw or {}).get("workdir")), owns_provider=False)
            sandbox._handle, sandbox._stopped = handle, False
            sandboxes.append(sandbox)
        return sandboxes

    async def restore(self, snapshot: SandboxSnapshot | str) -> None:
        """Put the sandbox's files back as they were in `snapshot` (one of this server's). The
        sandbox keeps its id and lease; its running processes end."""
        await self._provider_with("restore").restore(self._require_handle(), _snapshot_id(snapshot))

    async def delete_snapshot(self, snapshot: SandboxSnapshot | str) -> None:
        """Remove a snapshot now rather than at `down` (sandboxes forked from it run on)."""
        await self._provider_with("delete_snapshot").delete_snapshot(_snapshot_id(snapshot))

    def _provider_with(self, method: str) -> Any:
        if not hasattr(self._provider, method):
            name = getattr(self._provider, "name", type(self._provider).__name__)
            raise NotImplementedError(f"sandbox provider {name!r} does not support {method}()")
        return self._provider

    def _adopt(self, handle: SandboxHandle) -> "AsyncSandbox":
        spec = SandboxSpec(workdir=(handle.raw or {}).get("workdir") or (self._spec.workdir if self._spec else None))
        sandbox = type(self)(self._provider, spec, owns_provider=False)
        sandbox._handle, sandbox._stopped = handle, False
        return sandbox

    async def stop(self) -> None:
        """Release the sandbox: it is destroyed (idempotent)."""
        if self._closed:
            return
        if self._handle is not None and not self._stopped:
            await self._provider.close(self._handle)
            self._stopped = True
            raw = self._handle.raw if isinstance(self._handle.raw, dict) else {}
            self.cost = raw.get("cost") if isinstance(raw.get("cost"), dict) else None
        if self._owns_provider:
            await self._provider.aclose()
        self._closed = True

    async def disconnect(self) -> None:
        """Drop this client of a sandbox rebuilt with connect(), leaving the sandbox to its owner."""
        if self._closed:
            return
        if not self._connected:
            raise RuntimeError("disconnect() is valid only for a sandbox rebuilt with connect()")
        if self._owns_provider:
            await self._provider.aclose()
        self._handle, self._stopped, self._closed = None, True, True

    async def serialize(self, *, scope: Optional[str] = None) -> dict[str, Any]:
        descriptor = await self._provider.serialize_handle(self._require_handle(), scope=scope)
        if descriptor.get("workdir") is None and self._spec is not None:
            descriptor = {**descriptor, "workdir": self._spec.workdir}
        return descriptor

    @classmethod
    async def connect(cls, descriptor: Mapping[str, Any], *, provider: Any = None,
                      owns_provider: bool = True) -> "AsyncSandbox":
        provider = BrokerProvider() if provider is None else provider
        if isinstance(provider, Mapping):
            provider = create_provider(provider)
        handle = await provider.connect(descriptor)
        sandbox = cls(provider, SandboxSpec(workdir=descriptor.get("workdir")), owns_provider=owns_provider)
        sandbox._handle, sandbox._stopped, sandbox._connected = handle, False, True
        return sandbox

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.stop()


def _snapshot_id(snapshot: Optional[SandboxSnapshot | str]) -> Optional[str]:
    return snapshot.snapshot_id if isinstance(snapshot, SandboxSnapshot) else snapshot


class _LoopThread:
    """An event loop in a daemon thread, for blocking callers."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="gym-compose-sandbox", daemon=True)
        self._thread.start()

    def run(self, operation: str, factory: Callable[[], Awaitable[T]]) -> T:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError(f"Sandbox.{operation}() blocks; use AsyncSandbox in async code")
        future: Future = asyncio.run_coroutine_threadsafe(_awaited(factory), self.loop)
        return future.result(timeout=SYNC_TIMEOUT_S)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)


async def _awaited(factory: Callable[[], Awaitable[T]]) -> T:
    return await factory()


class Sandbox:
    """The blocking twin of AsyncSandbox (same methods, no await)."""

    def __init__(self, provider: Mapping[str, Any] | Any | None = None, spec: Optional[SandboxSpec] = None):
        self._runner = _LoopThread()
        self._async = AsyncSandbox(provider, spec)
        self._closed = False

    def start(self, spec: Optional[SandboxSpec] = None) -> "Sandbox":
        self._runner.run("start", lambda: self._async.start(spec))
        return self

    def exec(self, command: str, *, cwd: Optional[str] = None, env: Optional[dict[str, str]] = None,
             timeout_s: Any = _DECLARED, user: Optional[str | int] = None,
             preserve_background_services: bool = False) -> SandboxExecResult:
        return self._runner.run("exec", lambda: self._async.exec(command, cwd=cwd, env=env, timeout_s=timeout_s,
                                                                 user=user))

    def upload(self, local_path: Path | str, remote_path: str) -> None:
        self._runner.run("upload", lambda: self._async.upload(local_path, remote_path))

    def download(self, remote_path: str, local_path: Path | str) -> None:
        self._runner.run("download", lambda: self._async.download(remote_path, local_path))

    def status(self) -> SandboxStatus:
        if self._closed:
            return SandboxStatus.STOPPED
        return self._runner.run("status", self._async.status)

    def stop(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._runner.run("stop", self._async.stop)
        finally:
            self._runner.close()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()
