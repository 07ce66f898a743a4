"""The broker's door to the Docker Engine: the `docker` SDK's low-level client (run in threads)
for container and image calls, and an asyncio attach stream per sandbox for its agent."""

from __future__ import annotations

import asyncio
import os
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Callable, Iterator, Optional, TypeVar

from gym_compose.sandbox.broker.broker_errors import BackendError, NotFound
from gym_compose.sandbox.broker.registry_auth import auth_for, pull_failure

T = TypeVar("T")
SOCKET_ENV = "GYM_COMPOSE_DOCKER_SOCKET"
DEFAULT_SOCKET = "/var/run/docker.sock"
API_TIMEOUT_S = 120
ATTACH_READ_LIMIT = 1 << 26
PULL_PROGRESS_S = 15.0
PULL_STALL_S = 120.0  # BrokerSettings.pull_stall_s
FREEZE_ATTEMPTS = 4  # a pause that runc could not settle, asked again (seen once at load 15)
FREEZE_RETRY_S = 0.5  # times the attempt's number


class DockerBackend:
    """The `SandboxBackend` of the compose and swarm targets (backend.py)."""

    moves_phases = True

    def __init__(self, socket_path: Optional[str] = None, workers: int = 8,
                 registry_auth: Optional[dict[str, dict[str, str]]] = None, pull_stall_s: float = PULL_STALL_S):
        import requests  # the SDK's transport
        import urllib3

        import docker  # only the broker image has the SDK

        self.registry_auth = registry_auth or {}
        self.pull_stall_s = pull_stall_s
        self._stream_errors = (requests.exceptions.RequestException, urllib3.exceptions.HTTPError)

        self.socket_path = socket_path or os.environ.get(SOCKET_ENV, DEFAULT_SOCKET)
        self._docker = docker
        self.api = docker.APIClient(base_url=f"unix://{self.socket_path}", version="auto", timeout=API_TIMEOUT_S)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="engine")

    async def call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, partial(function, *args, **kwargs))
        except self._docker.errors.NotFound as error:
            raise NotFound(_explain(error)) from None
        except self._docker.errors.APIError as error:
            raise BackendError(_explain(error)) from None

    async def info(self) -> dict[str, Any]:
        return await self.call(self.api.info)

    async def image_exists(self, image: str) -> bool:
        try:
            await self.call(self.api.inspect_image, image)
        except NotFound:
            return False
        return True

    async def image_workdir(self, image: str) -> Optional[str]:
        try:
            attributes = await self.call(self.api.inspect_image, image)
        except NotFound:
            return None
        return (attributes.get("Config") or {}).get("WorkingDir") or None

    async def pull(self, image: str, progress: Callable[[str], None]) -> None:
        """Pull `image` from its registry, calling `progress` with a line now and then. A pull that
        makes no progress for `pull_stall_s` (no event from the engine: no bytes, no step) is given
        up; closing its stream makes the engine cancel it, and the next lease pulls it afresh."""

        credentials = auth_for(self.registry_auth, image)

        def run() -> None:
            layers: dict[str, tuple[int, int]] = {}
            last = time.monotonic()
            try:
                for event in self._pull_events(image, credentials):
                    if event.get("error"):
                        raise BackendError(pull_failure(image, str(event["error"]), credentials is not None))
                    detail = event.get("progressDetail") or {}
                    if event.get("id") and detail.get("total"):
                        layers[event["id"]] = (int(detail.get("current") or 0), int(detail["total"]))
                    if time.monotonic() - last >= PULL_PROGRESS_S:
                        last = time.monotonic()
                        done = sum(current for current, _ in layers.values())
                        total = sum(size for _, size in layers.values())
                        progress(f"pulling {image}: {done / 1e9:.2f} of {total / 1e9:.2f} GB")
            except self._docker.errors.APIError as error:
                raise BackendError(pull_failure(image, _explain(error), credentials is not None)) from None
            except self._stream_errors as error:  # the SDK reads the stream through urllib3 itself
                if "timed out" not in str(error).lower():
                    raise BackendError(f"the engine's pull of {image} broke off: {error}") from None
                done = sum(current for current, _ in layers.values())
                raise BackendError(
                    f"the pull of {image} made no progress for {self.pull_stall_s:g} s ({done / 1e6:.1f} MB "
                    "received); the registry or the network to it hangs. Gave it up: the next lease pulls it again "
                    "(the sandbox setting pull_stall_s sets how long a pull may stand still)") from None

        await self.call(run)

    def _pull_events(self, image: str, credentials: Optional[dict[str, str]]) -> Iterator[dict[str, Any]]:
        """The engine's pull events, as `APIClient.pull(stream=True, decode=True)` gives them but
        with a read timeout: the SDK's own pull waits forever on a stream that stopped."""
        auth = self._docker.auth
        repository, tag = self._docker.utils.parse_repository_tag(image)
        registry, _ = auth.resolve_repository_name(repository)
        header = (auth.encode_header(credentials) if credentials is not None
                  else auth.get_config_header(self.api, registry))
        response = self.api._post(self.api._url("/images/create"),
                                  params={"fromImage": repository, "tag": tag or "latest"},
                                  headers={"X-Registry-Auth": header} if header else {},
                                  stream=True, timeout=(API_TIMEOUT_S, self.pull_stall_s))
        try:
            self.api._raise_for_status(response)
            yield from self.api._stream_helper(response, decode=True)
        finally:
            response.close()

    async def network_exists(self, name: str) -> bool:
        try:
            await self.call(self.api.inspect_network, name)
        except NotFound:
            return False
        return True

    async def create(self, config: dict[str, Any], name: str) -> str:
        created = await self.call(self.api.create_container_from_config, config, name)
        return created["Id"]

    async def start(self, container_id: str) -> None:
        await self.call(self.api.start, container_id)

    async def inspect(self, container_id: str) -> dict[str, Any]:
        return await self.call(self.api.inspect_container, container_id)

    async def remove(self, container_id: str) -> None:
        try:
            await self.call(self.api.remove_container, container_id, force=True, v=True)
        except NotFound:
            pass
        except BackendError as error:
            if "already in progress" not in str(error):
                raise

    async def containers(self, labels: list[str]) -> list[dict[str, Any]]:
        return await self.call(self.api.containers, all=True, filters={"label": labels})

    async def commit(self, container_id: str, repository: str, tag: str, labels: dict[str, str]) -> str:
        """`docker commit` (the container paused while its layer is copied); the image's config is
        the container's with `labels` in place of its labels."""
        committed = await self._freezing(self.api.commit, container_id, repository=repository, tag=tag,
                                         conf={"Labels": labels}, pause=True)
        return str(committed["Id"])

    async def _freezing(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A call that freezes the container's processes (pause, a paused commit). Under load runc
        gives up on a freeze that does not settle in time ("unable to freeze"), thawing the
        container again: asked again, a few times, before the error is the caller's."""
        for attempt in range(1, FREEZE_ATTEMPTS):
            try:
                return await self.call(function, *args, **kwargs)
            except BackendError as error:
                if "unable to freeze" not in str(error):
                    raise
            await asyncio.sleep(FREEZE_RETRY_S * attempt)
        return await self.call(function, *args, **kwargs)

    async def remove_image(self, image: str) -> None:
        try:
            await self.call(self.api.remove_image, image, force=True)
        except NotFound:
            pass

    async def image_size(self, image: str) -> int:
        return int((await self.call(self.api.inspect_image, image)).get("Size") or 0)

    async def remove_unused_image(self, image: str) -> bool:
        try:
            await self.call(self.api.remove_image, image, force=False)
        except NotFound:
            return True
        except BackendError:  # a container (a sandbox starting, another project's) uses it: 409
            return False
        return True

    async def images(self, labels: list[str]) -> list[str]:
        return await self.call(self.api.images, quiet=True, filters={"label": labels})

    async def pause(self, container_id: str) -> None:
        await self._freezing(self.api.pause, container_id)

    async def unpause(self, container_id: str) -> None:
        await self.call(self.api.unpause, container_id)

    async def move_to_phase(self, container_id: str, leave: Optional[str], join: Optional[str], phase: str) -> None:
        # off the old network first: never on both, so the sandbox never reaches both phases' hosts
        if leave:
            await self.call(self.api.disconnect_container_from_network, container_id, leave, force=True)
        if join:
            await self.call(self.api.connect_container_to_network, container_id, join)

    async def detach(self, container_id: str, network: str) -> None:
        await self.call(self.api.disconnect_container_from_network, container_id, network, force=True)

    async def stats(self, container_id: str) -> dict[str, Any]:
        return await self.call(self.api.stats, container_id, stream=False, one_shot=True)

    async def exec_run(self, container_id: str, argv: list[str], workdir: Optional[str],
                       environment: dict[str, str]) -> tuple[int, bytes, bytes]:
        """One Engine API exec (the fallback for sandboxes without Python): exit code, stdout, stderr."""

        def run() -> tuple[int, bytes, bytes]:
            created = self.api.exec_create(container_id, argv, workdir=workdir or None, environment=environment)
            out, err = self.api.exec_start(created["Id"], demux=True)
            code = self.api.exec_inspect(created["Id"]).get("ExitCode")
            return (code if code is not None else 125), out or b"", err or b""

        return await self.call(run)

    async def run_to_end(self, config: dict[str, Any], name: str) -> tuple[int, str]:
        """Create, start and wait for a one-shot container, then remove it: (exit code, its output)."""

        def run() -> tuple[int, str]:
            container = self.api.create_container_from_config(config, name)["Id"]
            try:
                self.api.start(container)
                code = self.api.wait(container, timeout=API_TIMEOUT_S).get("StatusCode", 125)
                output = self.api.logs(container, stdout=True, stderr=True).decode("utf-8", "replace")
                return code, output
            finally:
                self.api.remove_container(container, force=True, v=True)

        return await self.call(run)

    async def attach(self, container_id: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Open the container's stdin/stdout/stderr (multiplexed, no TTY) as one raw stream."""
        reader, writer = await asyncio.open_unix_connection(self.socket_path, limit=ATTACH_READ_LIMIT)
        version = self.api.api_version
        writer.write(
            f"POST /v{version}/containers/{container_id}/attach?stream=1&stdin=1&stdout=1&stderr=1 HTTP/1.1\r\n"
            "Host: docker\r\nConnection: Upgrade\r\nUpgrade: tcp\r\nContent-Length: 0\r\n\r\n".encode()
        )
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), API_TIMEOUT_S)
        status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        if " 101 " not in status_line and " 200 " not in status_line:
            writer.close()
            raise BackendError(f"attach to {container_id[:12]} failed: {status_line}")
        return reader, writer

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.api.close()


def _explain(error: Exception) -> str:
    explanation = getattr(error, "explanation", None)
    if isinstance(explanation, bytes):
        explanation = explanation.decode("utf-8", "replace")
    return str(explanation or error)
