"""Sandbox snapshots: a leased sandbox's filesystem committed to an image of the project.

A snapshot holds the files of the sandbox's container (its image plus what the sandbox wrote),
not its processes, memory, open connections, `/tmp` (a tmpfs) or a read-only sandbox's work
folder (a tmpfs too, so those are refused). It belongs to the server whose sandbox it was; that
server forks sandboxes from it (leases with `snapshot`) or restores one of its sandboxes to it.
Each snapshot image carries the project label and `SNAPSHOT_LABEL`; the broker removes its own
when it stops (and an earlier broker's when it starts), `gym-compose down` whatever is left.
At most `BrokerSettings.max_snapshots` exist at once (they take the engine's disk).
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from gym_compose.contract import SNAPSHOT_LABEL
from gym_compose.sandbox.broker.backend import SandboxBackend
from gym_compose.sandbox.broker.broker_errors import NoCapacity, Refused, UnknownSandbox
from gym_compose.sandbox.broker.sandboxes import Sandbox
from gym_compose.sandbox.policy import PROJECT_LABEL, SERVER_LABEL

LOG = logging.getLogger("gym_compose.sandbox.broker")


def snapshot_repository(project: str) -> str:
    """The image repository of a project's snapshots (lower case, as Docker wants it)."""
    return re.sub(r"[^a-z0-9._-]+", "-", project.lower()).strip("-._") + "-snapshot"


@dataclass
class Snapshot:
    id: str
    server: str
    image: str  # repository:tag on the engine
    source: str  # the sandbox it was taken of
    base_image: str  # the image that sandbox started from (what the plan allowed)
    workdir: str
    env: dict[str, str] = field(default_factory=dict)
    cpus: Optional[float] = None
    memory_bytes: Optional[int] = None
    created_at: float = field(default_factory=time.time)
    took_s: float = 0.0
    image_id: str = ""  # the engine's id of `image`

    def describe(self) -> dict[str, Any]:
        return {"snapshot_id": self.id, "server": self.server, "image": self.image, "source": self.source,
                "base_image": self.base_image, "workdir": self.workdir, "created_at": self.created_at,
                "took_s": round(self.took_s, 4)}


class Snapshots:
    def __init__(self, backend: SandboxBackend, project: str, max_snapshots: int):
        self.backend, self.project, self.max_snapshots = backend, project, max_snapshots
        self.by_id: dict[str, Snapshot] = {}
        self._taking = 0
        # deleted snapshots' images a sandbox still ran from (or a newer snapshot of it was based
        # on): untagged, removed by `prune` once nothing uses them
        self.retired: set[str] = set()

    async def take(self, sandbox: Sandbox) -> Snapshot:
        if sandbox.policy.read_only:
            raise Refused(f"sandbox {sandbox.id} has a read-only root: its work folder is a tmpfs, which a "
                          "snapshot cannot hold; set sandbox_config read_only: false to snapshot it")
        if len(self.by_id) + self._taking >= self.max_snapshots:
            raise NoCapacity(f"{len(self.by_id)} snapshots exist (max_snapshots {self.max_snapshots}); delete some "
                             "(DELETE /v1/snapshots/ID, Snapshot.delete()) or raise the gym_compose provider "
                             "block's max_snapshots")
        snapshot_id = f"snap-{secrets.token_hex(6)}"
        labels = {PROJECT_LABEL: self.project, SNAPSHOT_LABEL: snapshot_id, SERVER_LABEL: sandbox.server,
                  f"{SNAPSHOT_LABEL}.source": sandbox.id}
        image = f"{snapshot_repository(self.project)}:{snapshot_id}"
        began = time.monotonic()
        self._taking += 1
        try:
            image_id = await self.backend.commit(sandbox.container_id, snapshot_repository(self.project),
                                                 snapshot_id, labels)
        finally:
            self._taking -= 1
        snapshot = Snapshot(id=snapshot_id, server=sandbox.server, image=image, source=sandbox.id,
                            base_image=sandbox.image if sandbox.forked_from is None else
                            self._base_of(sandbox.forked_from, sandbox.image),
                            workdir=sandbox.workdir, env=dict(sandbox.env), cpus=sandbox.cpus,
                            memory_bytes=sandbox.memory_bytes, took_s=time.monotonic() - began,
                            image_id=image_id)
        self.by_id[snapshot_id] = snapshot
        LOG.info("snapshot %s of sandbox %s (%s) in %.2f s", snapshot_id, sandbox.id, sandbox.server, snapshot.took_s)
        return snapshot

    def _base_of(self, snapshot_id: str, fallback: str) -> str:
        parent = self.by_id.get(snapshot_id)
        return parent.base_image if parent is not None else fallback

    def get(self, server: Optional[str], snapshot_id: str) -> Snapshot:
        snapshot = self.by_id.get(snapshot_id)
        if snapshot is None:
            raise UnknownSandbox(f"no snapshot {snapshot_id!r} (deleted, or never taken by this broker)")
        if server is not None and snapshot.server != server:
            raise Refused(f"snapshot {snapshot_id} belongs to {snapshot.server}, not {server}")
        return snapshot

    def list(self, server: Optional[str]) -> list[dict[str, Any]]:
        return [s.describe() for s in self.by_id.values() if server is None or s.server == server]

    async def delete(self, snapshot: Snapshot) -> None:
        """Forget it and remove its image (forks already started keep running: the engine keeps the
        layers a container uses)."""
        self.by_id.pop(snapshot.id, None)
        try:
            await self.backend.remove_image(snapshot.image)
        except Exception as error:  # noqa: BLE001 - `down` removes what is left by label
            LOG.warning("removing snapshot image %s failed: %s", snapshot.image, error)
        if snapshot.image_id:  # the tag is gone; the image itself stays while a sandbox runs from it
            self.retired.add(snapshot.image_id)
        await self.prune()

    async def prune(self) -> None:
        """Remove the deleted snapshots' images that nothing uses any more (a sandbox ended, or the
        newer snapshot based on one went)."""
        for image_id in sorted(self.retired):
            try:
                removed = await self.backend.remove_unused_image(image_id)
            except Exception as error:  # noqa: BLE001 - `down` removes what is left by label
                LOG.warning("removing deleted snapshot image %s failed: %s", image_id, error)
                removed = False
            if removed:
                self.retired.discard(image_id)

    async def remove_all(self) -> int:
        """Every snapshot image of the project, this broker's and any an earlier one left."""
        self.by_id.clear()
        self.retired.clear()
        found = await self.backend.images([f"{PROJECT_LABEL}={self.project}", SNAPSHOT_LABEL])
        for image in found:
            try:
                await self.backend.remove_image(image)
            except Exception as error:  # noqa: BLE001 - `down` removes what is left by label
                LOG.warning("removing snapshot image %s failed: %s", image, error)
        return len(found)
