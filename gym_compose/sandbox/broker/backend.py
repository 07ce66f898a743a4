"""What the sandbox pool asks of the platform its sandboxes run on: `SandboxBackend`.

Two backends implement it: `docker_backend.DockerBackend` (the Engine API through the node's
socket: the compose and swarm targets) and `kubernetes_backend.KubernetesBackend` (pods of the
broker's namespace through the Kubernetes API). A sandbox's body is the Engine API's
(`launch.container_config`), which the Kubernetes backend maps to a pod; the pool, the channels
and the death report see only this protocol. The broker's main picks one by
`contract.SANDBOX_BACKEND_ENV`. What a backend raises is `broker_errors.BackendError` (`NotFound`).
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Optional, Protocol


class AgentStdin(Protocol):
    """The write side of a sandbox's attach stream (asyncio's StreamWriter, or the Kubernetes
    backend's WebSocket stand-in)."""

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...

    def close(self) -> None: ...

    def is_closing(self) -> bool: ...

    async def wait_closed(self) -> None: ...


class SandboxBackend(Protocol):
    moves_phases: bool  # whether move_to_phase can move a running sandbox (Docker) or not (Kubernetes)

    async def info(self) -> dict[str, Any]:
        """`NCPU` and `MemTotal` of what the sandboxes share (the engine's host, the node)."""
        ...

    async def image_exists(self, image: str) -> bool: ...

    async def pull(self, image: str, progress: Callable[[str], None]) -> None: ...

    async def network_exists(self, name: str) -> bool: ...

    async def create(self, config: dict[str, Any], name: str) -> str:
        """A sandbox from an Engine API container body, not started yet; returns its id."""
        ...

    async def attach(self, container_id: str) -> tuple[asyncio.StreamReader, AgentStdin]:
        """The sandbox's stdin and its stdout/stderr as Docker multiplexes them (8-byte headers)."""
        ...

    async def start(self, container_id: str) -> None: ...

    async def inspect(self, container_id: str) -> dict[str, Any]:
        """Engine API shape: `State` with `Running`, `OOMKilled`, `ExitCode`."""
        ...

    async def exec_run(self, container_id: str, argv: list[str], workdir: Optional[str],
                       environment: dict[str, str]) -> tuple[int, bytes, bytes]:
        """One command, for a sandbox whose image has no python3: exit code, stdout, stderr."""
        ...

    async def run_to_end(self, config: dict[str, Any], name: str) -> tuple[int, str]:
        """A one-shot helper container (an Engine API body, e.g. `launch.closed_ports_helper` in a
        sandbox's network namespace) run to its end and removed: its exit code and output. Only
        the Docker backend has helpers; the Kubernetes backend raises `BackendError`."""
        ...

    async def remove(self, container_id: str) -> None:
        """Remove it, running or not; a sandbox already gone is not an error."""
        ...

    async def commit(self, container_id: str, repository: str, tag: str, labels: dict[str, str]) -> str:
        """The container's filesystem as a new image `repository:tag` carrying `labels` (a
        snapshot; processes and memory are not in it); returns the image's id. The Kubernetes
        backend raises `BackendError`."""
        ...

    async def remove_image(self, image: str) -> None:
        """Remove an image (a snapshot); one already gone is not an error."""
        ...

    async def image_size(self, image: str) -> int:
        """Bytes the image takes on the engine (0 where the backend does not hold images itself)."""
        ...

    async def image_workdir(self, image: str) -> Optional[str]:
        """The image's WORKDIR (None where it names none, or the backend cannot read it)."""
        ...

    async def remove_unused_image(self, image: str) -> bool:
        """Remove an image no container uses (a pulled task image, for the image budget); False when one
        does, or when the backend leaves images to its nodes (Kubernetes)."""
        ...

    async def images(self, labels: list[str]) -> list[str]:
        """The ids of the images carrying every label (`KEY=VALUE` or `KEY`)."""
        ...

    async def pause(self, container_id: str) -> None:
        """Freeze every process of the sandbox (cgroup freezer); the Kubernetes backend raises `BackendError`."""
        ...

    async def unpause(self, container_id: str) -> None: ...

    async def move_to_phase(self, container_id: str, leave: Optional[str], join: Optional[str], phase: str) -> None:
        """Put an allow-listed sandbox in another egress phase: the Docker backend takes it off the
        network `leave` and onto `join` (None: no network on that side). The Kubernetes backend
        raises `Unsupported`: a pod stays in the phase it was created in (its pod label, which the
        rendered NetworkPolicies select)."""
        ...

    async def detach(self, container_id: str, network: str) -> None:
        """Take a sandbox created on `network` off it before its start (an egress phase that names no
        host: loopback alone). Kubernetes: nothing to do, the policy of its pod's phase label admits
        no connection out."""
        ...

    async def stats(self, container_id: str) -> dict[str, Any]:
        """One reading of the Engine API's container stats (`cpu_stats`, `memory_stats`)."""
        ...

    async def containers(self, labels: list[str]) -> list[dict[str, Any]]:
        """The sandboxes carrying every label (`KEY=VALUE` or `KEY`), as `{"Id": ...}` rows."""
        ...

    def close(self) -> None: ...
