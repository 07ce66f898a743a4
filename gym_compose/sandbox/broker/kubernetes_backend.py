"""The broker's Kubernetes backend: sandboxes as pods of the broker's own namespace, through the
Kubernetes API with the broker's service account (the Role render/kubernetes.py grants it: pods,
and their attach and exec, in this namespace only).

A `SandboxBackend` (backend.py), like docker_backend.DockerBackend, so the pool does not know which
it has: REST calls with httpx;
a sandbox's agent stream through the pod's `attach` subresource, and exec through `exec`, both
WebSocket streams of the `v4.channel.k8s.io` protocol (each message: one byte naming the stream,
0 stdin, 1 stdout, 2 stderr, 3 the exit status, then the data). The attach stream is handed to the
pool as Docker's multiplexed stream (8-byte headers), which is what its channel reads.

Images are the kubelet's to pull (`imagePullPolicy: IfNotPresent`), and a sandbox network is a
NetworkPolicy the manifests hold, so the pool's image and network checks pass through.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
from pathlib import Path
from typing import Any, Callable, Optional
from urllib.parse import urlencode

import httpx

from gym_compose.contract import SANDBOX_OWNERS_ENV
from gym_compose.sandbox.broker.broker_errors import BackendError, NotFound, Unsupported
from gym_compose.sandbox.broker.pod import (
    CONTAINER,
    PART_OF,
    ROLE_LABEL,
    SANDBOX_ROLE,
    label_value,
    pod_manifest,
    pod_name,
)
from gym_compose.sandbox.policy import PROJECT_LABEL, SERVER_LABEL

LOG = logging.getLogger("gym_compose.sandbox.broker")
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
API_ENV = "GYM_COMPOSE_KUBERNETES_API"  # the API server's URL; default: the in-cluster service
NAMESPACE_ENV = "GYM_COMPOSE_KUBERNETES_NAMESPACE"  # default: the service account's namespace
NODE_CPUS_ENV = "GYM_COMPOSE_SANDBOX_NODE_CPUS"  # what a sandbox's cpus are capped by (default: the node's)
CHANNEL_PROTOCOL = "v4.channel.k8s.io"
STDIN, STDOUT, STDERR, STATUS = 0, 1, 2, 3
API_TIMEOUT_S = 120
RUNNING_POLL_S = 0.5
DOCKER_HEADER_STREAM = {STDOUT: 1, STDERR: 2}


class KubernetesBackend:
    moves_phases = False  # a pod's phase is its label at creation (move_to_phase)

    def __init__(self, api_url: Optional[str] = None, namespace: Optional[str] = None, token: Optional[str] = None,
                 ca_file: Optional[str] = None, owners: Optional[dict[str, str]] = None):
        in_cluster = os.environ.get("KUBERNETES_SERVICE_HOST")
        default_url = (f"https://{in_cluster}:{os.environ.get('KUBERNETES_SERVICE_PORT', '443')}"
                       if in_cluster else None)
        self.api_url = (api_url or os.environ.get(API_ENV) or default_url or "").rstrip("/")
        if not self.api_url:
            raise BackendError(f"no Kubernetes API: not in a pod (no KUBERNETES_SERVICE_HOST) and no {API_ENV}")
        self.namespace = namespace or os.environ.get(NAMESPACE_ENV) or _read(SERVICE_ACCOUNT_DIR / "namespace")
        if not self.namespace:
            raise BackendError(f"no namespace: the service account's namespace file is missing and {NAMESPACE_ENV} "
                              "is not set")
        self.token = token if token is not None else _read(SERVICE_ACCOUNT_DIR / "token")
        ca = ca_file or (str(SERVICE_ACCOUNT_DIR / "ca.crt") if (SERVICE_ACCOUNT_DIR / "ca.crt").exists() else None)
        self.ssl: Optional[ssl.SSLContext] = None
        if self.api_url.startswith("https://"):
            self.ssl = ssl.create_default_context(cafile=ca)
        self.owners = owners if owners is not None else json.loads(os.environ.get(SANDBOX_OWNERS_ENV) or "{}")
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self.http = httpx.AsyncClient(base_url=self.api_url, headers=headers, timeout=API_TIMEOUT_S,
                                      verify=self.ssl if self.ssl is not None else True)
        self._attaching: dict[str, StdinWriter] = {}  # attached before start(), as with Docker

    # -- REST ------------------------------------------------------------------------------------

    def _pods(self, name: str = "") -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods" + (f"/{name}" if name else "")

    async def _request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = await self.http.request(method, path, **kwargs)
        except httpx.HTTPError as error:
            raise BackendError(f"Kubernetes API {self.api_url}: {error}") from None
        if response.status_code == 404:
            raise NotFound(_status_message(response))
        if response.status_code >= 400:
            raise BackendError(f"Kubernetes API {method} {path}: {response.status_code} {_status_message(response)}")
        return response.json() if response.content else {}

    async def info(self) -> dict[str, Any]:
        """Checks the service account can list pods here. The size is the broker's node's (a sandbox
        cannot be larger than one node; the pool's default caps follow it, as for one engine), or
        GYM_COMPOSE_SANDBOX_NODE_CPUS; set the broker's max_live for a larger cluster."""
        await self._request("GET", self._pods(), params={"limit": "1"})
        return {"NCPU": int(os.environ.get(NODE_CPUS_ENV) or os.cpu_count() or 1), "MemTotal": _node_memory()}

    async def image_exists(self, image: str) -> bool:
        return True  # the kubelet pulls what its node lacks

    async def pull(self, image: str, progress: Callable[[str], None]) -> None:
        return None

    async def network_exists(self, name: str) -> bool:
        return True  # a NetworkPolicy of the manifests, not an object the broker can look up

    async def create(self, config: dict[str, Any], name: str) -> str:
        server = config["Labels"][SERVER_LABEL]
        pod = pod_manifest(config, pod_name(name), self.owners.get(server, server))
        created = await self._request("POST", self._pods(), json=pod)
        return str(created["metadata"]["name"])

    async def start(self, container_id: str) -> None:
        """A pod starts when it is created; this waits until its container runs and the agent may go."""
        while True:
            pod = await self._request("GET", self._pods(container_id))
            state = _container_state(pod)
            if "running" in state:
                writer = self._attaching.pop(container_id, None)
                if writer is not None:
                    writer.started.set()
                return
            if "terminated" in state or pod.get("status", {}).get("phase") in ("Failed", "Succeeded"):
                self._attaching.pop(container_id, None)
                raise BackendError(f"sandbox pod {container_id} ended before it ran: {json.dumps(state)}")
            waiting = state.get("waiting", {})
            if waiting.get("reason") in ("ErrImagePull", "ImagePullBackOff", "InvalidImageName",
                                         "CreateContainerConfigError", "CreateContainerError"):
                raise BackendError(f"sandbox pod {container_id}: {waiting['reason']}: {waiting.get('message', '')}")
            await asyncio.sleep(RUNNING_POLL_S)

    async def inspect(self, container_id: str) -> dict[str, Any]:
        """The pod as Docker's `State`: Running, ExitCode, OOMKilled."""
        pod = await self._request("GET", self._pods(container_id))
        state = _container_state(pod)
        terminated = state.get("terminated") or {}
        return {"Id": container_id, "State": {
            "Running": "running" in state, "Status": pod.get("status", {}).get("phase", ""),
            "ExitCode": terminated.get("exitCode"), "OOMKilled": terminated.get("reason") == "OOMKilled"}}

    async def run_to_end(self, config: dict[str, Any], name: str) -> tuple[int, str]:
        raise BackendError("helper containers in a sandbox's namespace are Docker's; NetworkPolicies do their job here")

    async def commit(self, container_id: str, repository: str, tag: str, labels: dict[str, str]) -> str:
        raise Unsupported("sandbox snapshots (snapshot, fork, restore) need the Docker backend (compose, swarm): "
                          "the Kubernetes API cannot commit a pod's filesystem to an image")

    async def remove_image(self, image: str) -> None:
        return None

    async def image_workdir(self, image: str) -> Optional[str]:
        return None  # images live on the nodes, out of the broker's sight: leases keep the policy's workdir

    async def image_size(self, image: str) -> int:
        return 0  # the kubelet pulls and evicts images (its own image garbage collection)

    async def remove_unused_image(self, image: str) -> bool:
        return False

    async def images(self, labels: list[str]) -> list[str]:
        return []

    async def pause(self, container_id: str) -> None:
        raise Unsupported("pausing a sandbox needs the Docker backend (compose, swarm): the Kubernetes API has no "
                          "pause for a pod's containers; leave it running, or snapshot on compose/swarm instead")

    async def unpause(self, container_id: str) -> None:
        await self.pause(container_id)

    async def detach(self, container_id: str, network: str) -> None:
        return None  # its phase label's NetworkPolicy admits no connection out (render/kubernetes.py)

    async def move_to_phase(self, container_id: str, leave: Optional[str], join: Optional[str], phase: str) -> None:
        raise Unsupported("moving a sandbox to another egress phase needs the Docker backend (compose, swarm): a "
                          "pod finds its phase's proxy by service links, which Kubernetes fills in at the pod's start "
                          "only; lease a sandbox in its phase instead (SandboxSpec provider_options {phase: NAME})")

    async def stats(self, container_id: str) -> dict[str, Any]:
        return {}  # the metrics API is optional in a cluster; the ledger leaves CPU and memory out

    async def remove(self, container_id: str) -> None:
        try:
            await self._request("DELETE", self._pods(container_id), json={"gracePeriodSeconds": 0})
        except NotFound:
            pass

    async def containers(self, labels: list[str]) -> list[dict[str, Any]]:
        """The sandbox pods of the project the Docker label filter names (PROJECT_LABEL=NAME)."""
        selector = {ROLE_LABEL: SANDBOX_ROLE}
        for label in labels:
            key, _, value = label.partition("=")
            if key == PROJECT_LABEL:
                selector[PART_OF] = label_value(value)
        listed = await self._request("GET", self._pods(), params={
            "labelSelector": ",".join(f"{k}={v}" for k, v in selector.items())})
        return [{"Id": item["metadata"]["name"], "Labels": item["metadata"].get("labels", {})}
                for item in listed.get("items", [])]

    # -- streams ---------------------------------------------------------------------------------

    def _stream_url(self, container_id: str, subresource: str, query: list[tuple[str, str]]) -> str:
        base = self.api_url.replace("https://", "wss://", 1).replace("http://", "ws://", 1)
        return f"{base}{self._pods(container_id)}/{subresource}?{urlencode(query)}"

    async def _connect(self, url: str) -> Any:
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidStatus, WebSocketException

        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            return await connect(url, subprotocols=[CHANNEL_PROTOCOL], additional_headers=headers,  # type: ignore[list-item]
                                 ssl=self.ssl, max_size=None, open_timeout=API_TIMEOUT_S, ping_interval=None)
        except InvalidStatus as error:
            status = error.response.status_code
            raise (NotFound if status == 404 else BackendError)(f"{url.split('?')[0]}: HTTP {status}") from None
        except (OSError, WebSocketException) as error:
            raise BackendError(f"{url.split('?')[0]}: {error}") from None

    async def attach(self, container_id: str) -> tuple[asyncio.StreamReader, "StdinWriter"]:
        """The container's stdin and its stdout/stderr in Docker's multiplexed format. The stream
        opens when the pod runs (`start`), and sends the line the launcher waits for."""
        reader = asyncio.StreamReader(limit=1 << 26)
        writer = StdinWriter()
        url = self._stream_url(container_id, "attach", [("container", CONTAINER), ("stdin", "true"),
                                                         ("stdout", "true"), ("stderr", "true")])
        writer.pump = asyncio.get_running_loop().create_task(self._pump_attach(container_id, url, reader, writer))
        self._attaching[container_id] = writer
        return reader, writer

    async def _pump_attach(self, container_id: str, url: str, reader: asyncio.StreamReader,
                           writer: "StdinWriter") -> None:
        try:
            await writer.started.wait()  # set by start(): the pod runs
            socket = await self._connect(url)
        except Exception as error:  # noqa: BLE001 - the channel sees the stream end and reports the death
            LOG.error("sandbox %s: its attach stream did not open: %s", container_id, error)
            reader.feed_eof()
            return
        try:
            await writer.opened(socket)
            async for message in socket:
                if isinstance(message, str):
                    message = message.encode()
                if message and message[0] in DOCKER_HEADER_STREAM and len(message) > 1:
                    data = message[1:]
                    reader.feed_data(bytes([DOCKER_HEADER_STREAM[message[0]], 0, 0, 0]) + len(data).to_bytes(4, "big")
                                     + data)
        except Exception:  # noqa: BLE001 - a dropped stream is the end of the stream
            pass
        finally:
            reader.feed_eof()

    async def exec_run(self, container_id: str, argv: list[str], workdir: Optional[str],
                       environment: dict[str, str]) -> tuple[int, bytes, bytes]:
        """One exec (the fallback for images without python3): exit code, stdout, stderr. Kubernetes
        exec has no working folder or environment of its own: `env` and `cd` in front of argv do it."""
        command = list(argv)
        if environment:
            command = ["env", *(f"{key}={value}" for key, value in environment.items()), *command]
        if workdir:
            command = ["sh", "-c", 'cd "$0" && exec "$@"', workdir, *command]
        query = [("container", CONTAINER), ("stdout", "true"), ("stderr", "true")]
        query += [("command", part) for part in command]
        socket = await self._connect(self._stream_url(container_id, "exec", query))
        out, err, status = bytearray(), bytearray(), b""
        try:
            async for message in socket:
                if isinstance(message, str):
                    message = message.encode()
                if not message:
                    continue
                if message[0] == STDOUT:
                    out += message[1:]
                elif message[0] == STDERR:
                    err += message[1:]
                elif message[0] == STATUS:
                    status += message[1:]
        finally:
            await socket.close()
        return _exit_code(status), bytes(out), bytes(err)

    def close(self) -> None:
        try:
            asyncio.get_running_loop().create_task(self.http.aclose())
        except RuntimeError:
            pass


class StdinWriter:
    """The attach stream's stdin, as the StreamWriter calls the pool's channel makes."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.socket: Any = None
        self.pump: Optional[asyncio.Task] = None
        self._pending: list[bytes] = []
        self._closed = False
        self._lock = asyncio.Lock()

    def write(self, data: bytes) -> None:
        if self._closed:
            raise ConnectionResetError("the sandbox's stdin is closed")
        self._pending.append(bytes(data))
        if self.socket is not None:  # a write without drain (the channel's kill) goes out too
            asyncio.get_running_loop().create_task(self.drain())

    async def drain(self) -> None:
        if self.socket is None:
            return  # the stream is not open yet: sent once it is
        async with self._lock:
            while self._pending:
                await self.send(self._pending.pop(0))

    async def opened(self, socket: Any) -> None:
        self.socket = socket
        await self.send(b"\n")  # the line the launcher waits for
        await self.drain()

    async def send(self, data: bytes) -> None:
        await self.socket.send(bytes([STDIN]) + data)

    def close(self) -> None:
        """Closing the stream closes the pod's stdin (`stdinOnce`): the agent, and the sandbox, end."""
        self._closed = True
        if self.socket is not None:
            asyncio.get_running_loop().create_task(self.socket.close())
        elif self.pump is not None:
            self.pump.cancel()

    def is_closing(self) -> bool:
        return self._closed

    async def wait_closed(self) -> None:
        if self.socket is not None:
            await self.socket.wait_closed()


def _container_state(pod: dict[str, Any]) -> dict[str, Any]:
    for status in pod.get("status", {}).get("containerStatuses") or []:
        if status.get("name") == CONTAINER:
            return status.get("state") or {}
    return {}


def _exit_code(status: bytes) -> int:
    """The exec's exit code from its status message (`Success`, or `NonZeroExitCode` with an ExitCode cause)."""
    if not status:
        return 125
    try:
        message = json.loads(status)
    except ValueError:
        return 125
    if message.get("status") == "Success":
        return 0
    for cause in (message.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode" and str(cause.get("message", "")).isdigit():
            return int(cause["message"])
    return 126


def _status_message(response: httpx.Response) -> str:
    try:
        return str(response.json().get("message") or response.text)
    except ValueError:
        return response.text[:500]


def _node_memory() -> int:
    for line in _read(Path("/proc/meminfo")).splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return 0


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""
