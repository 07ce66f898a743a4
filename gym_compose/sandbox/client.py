"""The provider behind the sandbox API in a gym-compose stack: HTTP calls to the project's broker.

A server that declared sandboxes finds the broker in its environment (`GYM_COMPOSE_SANDBOX_BROKER`,
`GYM_COMPOSE_SANDBOX_TOKEN_FILE`, its instance name in `NEMO_GYM_CONFIG_PATH`); the plan puts them
there. Whatever provider a NeMo Gym config names (`docker`, `opensandbox`, ...), `create_provider`
returns this one and says so once on stderr.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional
from urllib.parse import quote, urlsplit

from gym_compose.contract import CONFIG_PATH_ENV
from gym_compose.contract import SANDBOX_BROKER_ENV as BROKER_ENV
from gym_compose.contract import SANDBOX_TOKEN_FILE_ENV as TOKEN_FILE_ENV
from gym_compose.net.incarnation import caller_headers
from gym_compose.sandbox.tokens import GRANT_HEADER, SERVER_HEADER
from gym_compose.sandbox.types import (
    SandboxCreateError,
    SandboxDeadError,
    SandboxError,
    SandboxExecResult,
    SandboxHandle,
    SandboxResources,
    SandboxSnapshot,
    SandboxSpec,
    SandboxStatus,
)

if TYPE_CHECKING:
    from gym_compose.net.http_client import HttpClient

SERVER_ENV = "GYM_COMPOSE_SANDBOX_SERVER"
INSTANCE_ENV = CONFIG_PATH_ENV
PROVIDER_NAME = "gym_compose"
DEAD_RETURN_CODE = 125  # NeMo Gym's "the sandbox runtime failed, not the command"
REQUEST_MARGIN_S = 30.0
LEASE_MARGIN_S = 60.0
# A release that cannot reach the broker (restarting, a name the engine briefly cannot resolve) is
# asked again for this long: a lease nobody releases holds a max_live slot until the idle timeout.
RELEASE_RETRY_S = 30.0
_noticed: set[str] = set()


def notice_once(provider_name: str) -> None:
    if provider_name in _noticed or provider_name == PROVIDER_NAME:
        return
    _noticed.add(provider_name)
    print(f"gym-compose: sandbox provider {provider_name!r} runs as gym-compose sandboxes (the project's sandbox "
          "broker); its own settings are not used", file=sys.stderr, flush=True)


class BrokerProvider:
    """NeMo Gym's provider protocol (create, exec, upload_file, download_file, status, close, aclose,
    serialize_handle, connect), served by the broker."""

    name = PROVIDER_NAME

    def __init__(self, broker: Optional[str] = None, token: Optional[str] = None, server: Optional[str] = None,
                 **ignored: Any):
        self._broker, self._token, self._server = broker, token, server
        self._http: Optional[HttpClient] = None

    # -- connection ------------------------------------------------------------------------------

    def _settings(self) -> tuple[str, int, dict[str, str]]:
        broker = self._broker or os.environ.get(BROKER_ENV)
        server = self._server or os.environ.get(SERVER_ENV) or os.environ.get(INSTANCE_ENV)
        token = self._token
        if token is None and os.environ.get(TOKEN_FILE_ENV):
            try:
                token = Path(os.environ[TOKEN_FILE_ENV]).read_text().strip()
            except OSError as error:
                raise SandboxCreateError(f"cannot read the sandbox token {os.environ[TOKEN_FILE_ENV]}: "
                                         f"{error.strerror}") from None
        if not broker or not token or not server:
            raise SandboxCreateError(
                "this server has no sandbox broker: declare its sandboxes with a `sandbox_config` (or "
                "`sandbox_provider`) block in its config, and run it with gym-compose (see docs/sandboxes.md)")
        parts = urlsplit(broker if "://" in broker else f"http://{broker}")
        return parts.hostname or "sandbox-broker", parts.port or 8000, {
            "Authorization": f"Bearer {token}", SERVER_HEADER: server, **caller_headers()}

    async def _request(self, method: str, path: str, *, json: Any = None, content: Optional[bytes] = None,
                       timeout: Optional[float] = None, handle: Optional[SandboxHandle] = None):
        from gym_compose.net.http_client import HttpClient

        host, port, headers = self._settings()
        grant = (handle.raw or {}).get("grant") if handle is not None and isinstance(handle.raw, dict) else None
        if grant:  # a sandbox another server leased and handed over (serialize/connect)
            headers = {**headers, GRANT_HEADER: str(grant)}
        if content is not None:
            headers = {**headers, "Content-Type": "application/octet-stream"}
        if self._http is None:
            self._http = HttpClient(timeout=3600.0)
        return await self._http.request(method, host, port, path, json=json, content=content, headers=headers,
                                        timeout=timeout)

    @staticmethod
    def _error(response) -> str:
        try:
            body = response.json()
        except ValueError:
            return response.body[:500].decode("utf-8", "replace")
        if isinstance(body, dict):
            if isinstance(body.get("detail"), list):
                return "; ".join(f"{'.'.join(str(p) for p in d.get('loc', []))}: {d.get('msg')}"
                                 for d in body["detail"])
            return str(body.get("error") or body)
        return str(body)

    # -- the provider protocol -------------------------------------------------------------------

    async def create(self, spec: SandboxSpec) -> SandboxHandle:
        if spec.entrypoint:
            raise SandboxCreateError("gym-compose sandboxes run their own agent as the main process; "
                                     "SandboxSpec.entrypoint is not supported (start services with exec)")
        if spec.ports:
            raise SandboxCreateError("gym-compose sandboxes publish no ports (SandboxSpec.ports); the server that "
                                     "leases a sandbox reaches it over their shared sandbox network")
        resources = spec.resources  # SandboxSpec turned a mapping into SandboxResources
        assert isinstance(resources, SandboxResources)
        options = dict(spec.provider_options)
        phase = options.pop("phase", None)  # gym-compose's own option: the egress phase to start in
        body: dict[str, Any] = {"image": spec.image, "workdir": spec.workdir, "env": dict(spec.env),
                                "metadata": dict(spec.metadata), "ttl_s": spec.ttl_s,
                                "ready_timeout_s": spec.ready_timeout_s, "provider_options": options,
                                "cpu": resources.cpu, "memory_mib": resources.memory_mib, "phase": phase}
        body = {key: value for key, value in body.items() if value not in (None, {}, "")}
        wait = float(spec.ready_timeout_s or 300.0) + LEASE_MARGIN_S
        try:
            response = await self._request("POST", "/v1/sandboxes", json=body, timeout=wait)
        except (OSError, TimeoutError) as error:
            raise SandboxCreateError(f"sandbox broker unreachable: {error or type(error).__name__}") from None
        if response.status != 201:
            raise SandboxCreateError(f"sandbox not started (HTTP {response.status}): {self._error(response)}")
        lease = response.json()
        return SandboxHandle(sandbox_id=lease["sandbox_id"], provider_name=self.name, raw=lease)

    async def exec(self, handle: SandboxHandle, command: str, *, cwd: Optional[str] = None,
                   env: Optional[dict[str, str]] = None, timeout_s: Optional[float] = None,
                   user: Optional[str | int] = None) -> SandboxExecResult:
        body: dict[str, Any] = {"command": command}
        if cwd is not None:
            body["cwd"] = cwd
        if env:
            body["env"] = {str(k): str(v) for k, v in env.items()}
        if timeout_s is not None:
            body["timeout_s"] = float(timeout_s)
        if user is not None:
            body["user"] = str(user)
        declared = (handle.raw or {}).get("timeout_s") or 180.0
        wait = (float(timeout_s) if timeout_s is not None else float(declared)) + REQUEST_MARGIN_S
        try:
            response = await self._request("POST", f"/v1/sandboxes/{quote(handle.sandbox_id)}/exec", json=body,
                                           timeout=wait, handle=handle)
        except (OSError, TimeoutError) as error:
            return _failed(f"sandbox broker unreachable: {error or type(error).__name__}")
        if response.status in (404, 410):
            return _failed(self._error(response), prefix="sandbox is dead: ")
        if response.status != 200:
            return _failed(f"exec refused (HTTP {response.status}): {self._error(response)}")
        result = response.json()
        return SandboxExecResult(stdout=result.get("stdout"), stderr=result.get("stderr"),
                                 return_code=int(result.get("return_code", DEAD_RETURN_CODE)),
                                 error_type=result.get("error_type"), reason=result.get("reason"))

    async def upload_file(self, handle: SandboxHandle, source_path: Path, target_path: str) -> None:
        await self.write_bytes(handle, Path(source_path).read_bytes(), target_path)

    async def write_bytes(self, handle: SandboxHandle, data: bytes, target_path: str,
                          mode: Optional[int] = None) -> None:
        query = f"path={quote(target_path)}" + (f"&mode={mode:o}" if mode is not None else "")
        response = await self._files("PUT", handle, query, content=data)
        if response.status != 200:
            self._raise(response, f"upload to {target_path}")

    async def download_file(self, handle: SandboxHandle, source_path: str, target_path: Path) -> None:
        data = await self.read_bytes(handle, source_path)
        target = Path(target_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)

    async def read_bytes(self, handle: SandboxHandle, source_path: str) -> bytes:
        response = await self._files("GET", handle, f"path={quote(source_path)}")
        if response.status != 200:
            self._raise(response, f"download of {source_path}")
        return response.body

    async def _files(self, method: str, handle: SandboxHandle, query: str, content: Optional[bytes] = None):
        try:
            return await self._request(method, f"/v1/sandboxes/{quote(handle.sandbox_id)}/files?{query}",
                                       content=content, timeout=600.0, handle=handle)
        except (OSError, TimeoutError) as error:
            raise SandboxError(f"sandbox broker unreachable: {error or type(error).__name__}") from None

    def _raise(self, response, what: str) -> None:
        if response.status == 410:
            raise SandboxDeadError(f"{what} failed: sandbox is dead: {self._error(response)}")
        raise SandboxError(f"{what} failed (HTTP {response.status}): {self._error(response)}")

    async def status(self, handle: SandboxHandle) -> SandboxStatus:
        try:
            response = await self._request("GET", f"/v1/sandboxes/{quote(handle.sandbox_id)}", timeout=60.0,
                                           handle=handle)
        except (OSError, TimeoutError):
            return SandboxStatus.UNKNOWN
        if response.status == 200:
            return SandboxStatus.RUNNING
        if response.status in (404, 410):
            return SandboxStatus.STOPPED
        return SandboxStatus.UNKNOWN

    async def close(self, handle: SandboxHandle) -> None:
        deadline, delay = time.monotonic() + RELEASE_RETRY_S, 0.2
        while True:
            try:
                response = await self._request("DELETE", f"/v1/sandboxes/{quote(handle.sandbox_id)}", timeout=120.0)
                break
            except TimeoutError as error:
                raise SandboxError(f"sandbox broker did not answer the release of {handle.sandbox_id}: "
                                   f"{error or 'timed out'}") from None
            except OSError as error:  # releasing twice is harmless: the broker answers 410 with the reason
                if time.monotonic() + delay > deadline:
                    raise SandboxError(f"sandbox broker unreachable while releasing {handle.sandbox_id} (asked "
                                       f"for {RELEASE_RETRY_S:g} s): {error}") from None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        if response.status not in (200, 404, 410):
            raise SandboxError(
                f"release of {handle.sandbox_id} failed (HTTP {response.status}): {self._error(response)}")
        if response.status == 200 and isinstance(handle.raw, dict):
            try:
                cost = response.json().get("cost")
            except (ValueError, AttributeError):
                cost = None
            if isinstance(cost, dict):
                handle.raw["cost"] = cost  # what the sandbox cost (AsyncSandbox.cost)

    # -- gym-compose's extensions: snapshot, fork, restore; NeMo Gym's pause and resume ----------

    async def _call(self, path: str, what: str, body: Optional[dict[str, Any]] = None, timeout: float = 600.0,
                    expect: int = 200, method: str = "POST", handle: Optional[SandboxHandle] = None
                    ) -> dict[str, Any]:
        """The broker's JSON answer (`handle`: its grant goes along)."""
        try:
            response = await self._request(method, path, json=body if body is not None else {}, timeout=timeout,
                                           handle=handle)
        except (OSError, TimeoutError) as error:
            raise SandboxError(f"sandbox broker unreachable ({what}): {error or type(error).__name__}") from None
        if response.status != expect:
            self._raise(response, what)
        return response.json()

    async def checkpoint(self, handle: SandboxHandle, key: str, state: Any) -> dict[str, Any]:
        return await self._call(f"/v1/sandboxes/{quote(handle.sandbox_id)}/checkpoint",
                                f"checkpoint {key!r} of {handle.sandbox_id}", {"key": key, "state": state},
                                expect=201, handle=handle)

    async def restore_checkpoint(self, handle: SandboxHandle, key: str) -> Optional[dict[str, Any]]:
        restored = await self._call(f"/v1/sandboxes/{quote(handle.sandbox_id)}/checkpoint/restore",
                                    f"restore of {handle.sandbox_id} to checkpoint {key!r}", {"key": key},
                                    handle=handle)
        return restored if restored.get("found") else None

    async def forget_checkpoint(self, handle: SandboxHandle, key: str) -> bool:
        forgotten = await self._call(f"/v1/sandboxes/{quote(handle.sandbox_id)}/checkpoint/forget",
                                     f"forgetting checkpoint {key!r}", {"key": key}, handle=handle)
        return bool(forgotten.get("forgotten"))

    async def snapshot(self, handle: SandboxHandle) -> SandboxSnapshot:
        taken = await self._call(f"/v1/sandboxes/{quote(handle.sandbox_id)}/snapshot",
                                 f"snapshot of {handle.sandbox_id}", expect=201)
        return _snapshot(taken)

    async def fork(self, handle: Optional[SandboxHandle], n: int, *, snapshot: Optional[str] = None,
                   env: Optional[dict[str, str]] = None, metadata: Optional[dict[str, str]] = None,
                   ready_timeout_s: Optional[float] = None, phase: Optional[str] = None
                   ) -> tuple[SandboxSnapshot, list[SandboxHandle]]:
        """n sandboxes from a new snapshot of `handle`'s sandbox, or from `snapshot` (then `handle`
        may be None); all or none."""
        body: dict[str, Any] = {"n": n, "env": dict(env or {}), "metadata": dict(metadata or {})}
        if phase is not None:
            body["phase"] = phase
        if ready_timeout_s is not None:
            body["ready_timeout_s"] = ready_timeout_s
        if handle is not None:
            if snapshot:
                body["snapshot"] = snapshot
            path, what = f"/v1/sandboxes/{quote(handle.sandbox_id)}/fork", f"fork of {handle.sandbox_id}"
        elif snapshot:
            path, what = f"/v1/snapshots/{quote(snapshot)}/fork", f"fork of {snapshot}"
        else:
            raise ValueError("fork() needs a sandbox or a snapshot")
        wait = float(ready_timeout_s or 300.0) + LEASE_MARGIN_S
        try:
            answer = await self._call(path, what, body, timeout=wait, expect=201)
        except SandboxError as error:
            raise SandboxCreateError(str(error)) from None
        handles = [SandboxHandle(sandbox_id=lease["sandbox_id"], provider_name=self.name, raw=lease)
                   for lease in answer["forks"]]
        return SandboxSnapshot(snapshot_id=answer["snapshot_id"]), handles

    async def restore(self, handle: SandboxHandle, snapshot: str) -> float:
        restored = await self._call(f"/v1/sandboxes/{quote(handle.sandbox_id)}/restore",
                                    f"restore of {handle.sandbox_id}", {"snapshot": snapshot})
        return float(restored.get("took_s") or 0.0)

    async def delete_snapshot(self, snapshot: str) -> None:
        await self._call(f"/v1/snapshots/{quote(snapshot)}", f"deleting snapshot {snapshot}", method="DELETE")

    async def pause(self, handle: SandboxHandle) -> None:
        await self._call(f"/v1/sandboxes/{quote(handle.sandbox_id)}/pause", f"pause of {handle.sandbox_id}")

    async def resume(self, handle: SandboxHandle) -> None:
        await self._call(f"/v1/sandboxes/{quote(handle.sandbox_id)}/resume", f"resume of {handle.sandbox_id}")

    async def set_phase(self, handle: SandboxHandle, phase: str) -> dict[str, Any]:
        return await self._call(f"/v1/sandboxes/{quote(handle.sandbox_id)}/phase",
                                f"phase {phase!r} for {handle.sandbox_id}", {"phase": phase})

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def serialize_handle(self, handle: SandboxHandle, *, scope: Optional[str] = None) -> dict[str, Any]:
        raw = handle.raw or {}
        descriptor = {"sandbox_id": handle.sandbox_id, "provider": self.name, "workdir": raw.get("workdir")}
        if raw.get("grant"):  # lets the server it is handed to use this one sandbox (tokens.py)
            descriptor["grant"] = raw["grant"]
        return descriptor

    async def connect(self, descriptor: Mapping[str, Any]) -> SandboxHandle:
        sandbox_id = descriptor.get("sandbox_id")
        if not sandbox_id:
            raise SandboxCreateError("connect() needs a descriptor with a sandbox_id (from serialize())")
        handle = SandboxHandle(sandbox_id=str(sandbox_id), provider_name=self.name, raw=dict(descriptor))
        if await self.status(handle) != SandboxStatus.RUNNING:
            raise SandboxCreateError(f"cannot connect to sandbox {sandbox_id}: it is not running")
        return handle


def _snapshot(answer: Mapping[str, Any]) -> SandboxSnapshot:
    return SandboxSnapshot(snapshot_id=str(answer["snapshot_id"]), image=str(answer.get("image") or ""),
                           source=str(answer.get("source") or ""), took_s=float(answer.get("took_s") or 0.0))


def _failed(reason: str, prefix: str = "") -> SandboxExecResult:
    return SandboxExecResult(stdout="", stderr=prefix + reason, return_code=DEAD_RETURN_CODE, error_type="sandbox",
                             reason=reason)


_registered: dict[str, type] = {}


def register_provider(name: str, provider_class: type) -> None:
    """An explicitly registered provider class is used as it is (no broker)."""
    _registered[name] = provider_class


def get_provider_class(name: str) -> type:
    return _registered.get(name, BrokerProvider)


def list_providers() -> list[str]:
    return sorted({PROVIDER_NAME, *_registered})


def create_provider(config: Mapping[str, Any] | Any | None = None) -> Any:
    """A provider from NeMo Gym's single-key config `{name: {...}}` (or a provider object, or None)."""
    if config is None:
        return BrokerProvider()
    if not isinstance(config, Mapping):
        return config
    keys = [key for key in config if key != "default_metadata"]
    if len(keys) != 1:
        raise ValueError(f"a sandbox provider config has exactly one provider key {{name: config}}, got {keys!r}")
    name = str(keys[0])
    if name in _registered:
        settings = config[name] or {}
        return _registered[name](**settings) if isinstance(settings, Mapping) else _registered[name](settings)
    notice_once(name)
    settings = config[name] if name == PROVIDER_NAME and isinstance(config[name], Mapping) else {}
    return BrokerProvider(**{k: v for k, v in settings.items() if k in ("broker", "token", "server")})
