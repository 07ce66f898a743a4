"""Mid-episode checkpoints: a snapshot of a sandbox (snapshots.py) and the state its agent needs to
go on from there (a transcript, a step count: JSON the broker keeps as it was given), filed under
a key of the agent's choosing (the rollout it works, server/rollout_identity.py).

A checkpoint belongs to the server whose sandbox it was taken of, whoever took it (the owner, or
an agent holding the sandbox's grant): a later sandbox of that server, leased again for the same
rollout after a crash, is restored to it and the agent goes on from the step it saved. A key has
one checkpoint; a new one replaces it (its snapshot removed once the new one is taken). They live
as long as the broker (snapshots do), count against `max_snapshots`, and go with `down`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Optional

from gym_compose.sandbox.broker.broker_errors import NoCapacity, Refused
from gym_compose.sandbox.broker.sandboxes import Sandbox
from gym_compose.sandbox.broker.snapshots import Snapshot, Snapshots

LOG = logging.getLogger("gym_compose.sandbox.broker")
MAX_STATE_BYTES = 16 << 20  # one checkpoint's state (the broker holds it in memory)
MAX_KEY_CHARS = 256


@dataclass
class Checkpoint:
    key: str
    server: str
    snapshot: Snapshot
    state: bytes  # JSON, as the agent sent it
    taken_at: float = field(default_factory=time.time)

    def describe(self) -> dict[str, object]:
        return {"key": self.key, "server": self.server, "snapshot_id": self.snapshot.id,
                "state_bytes": len(self.state), "taken_at": self.taken_at}


def checked_key(key: object) -> str:
    if not isinstance(key, str) or not 0 < len(key) <= MAX_KEY_CHARS or not key.isprintable():
        raise Refused(f"a checkpoint key is a printable string of 1 to {MAX_KEY_CHARS} characters, got {key!r}")
    return key


class Checkpoints:
    def __init__(self, snapshots: Snapshots) -> None:
        self.snapshots = snapshots
        self.by_key: dict[tuple[str, str], Checkpoint] = {}

    async def save(self, sandbox: Sandbox, key: str, state: bytes) -> Checkpoint:
        """Snapshot `sandbox` as checkpoint `key` of its server, replacing the one before."""
        if len(state) > MAX_STATE_BYTES:
            raise Refused(f"a checkpoint's state is at most {MAX_STATE_BYTES >> 20} MiB, got {len(state)} bytes")
        before = self.get(sandbox.server, key)
        try:
            snapshot = await self.snapshots.take(sandbox)
        except NoCapacity:
            if before is None:
                raise
            # at the snapshot cap: the key's own older checkpoint makes the room
            self.by_key.pop((sandbox.server, key), None)
            await self.snapshots.delete(before.snapshot)
            before = None
            snapshot = await self.snapshots.take(sandbox)
        checkpoint = Checkpoint(key=key, server=sandbox.server, snapshot=snapshot, state=state)
        self.by_key[(sandbox.server, key)] = checkpoint
        if before is not None:
            await self.snapshots.delete(before.snapshot)
        LOG.info("checkpoint %r of %s: snapshot %s (%d bytes of state)", key, sandbox.server, snapshot.id, len(state))
        return checkpoint

    def get(self, server: str, key: str) -> Optional[Checkpoint]:
        """The key's checkpoint; None when there is none (or its snapshot was deleted by hand)."""
        checkpoint = self.by_key.get((server, key))
        if checkpoint is not None and checkpoint.snapshot.id not in self.snapshots.by_id:
            self.by_key.pop((server, key), None)
            return None
        return checkpoint

    async def forget(self, server: str, key: str) -> bool:
        checkpoint = self.get(server, key)
        if checkpoint is None:
            return False
        self.by_key.pop((server, key), None)
        await self.snapshots.delete(checkpoint.snapshot)
        return True
