"""A sandbox as the broker tracks it, and the limits on live and starting sandboxes."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from gym_compose.contract import EGRESS_DEFAULT_PHASE as DEFAULT_PHASE
from gym_compose.sandbox.policy import BrokerSettings, SandboxPolicy

MEMORY_SHARE = 0.75  # of the engine's memory that sandbox limits may add up to
SANDBOXES_PER_CORE = 16


@dataclass(frozen=True)
class Limits:
    max_live: int
    max_starting: int


def default_limits(settings: BrokerSettings, cores: int, memory_total: int) -> Limits:
    """Safe for a laptop: 16 sandboxes per core, and no more than the largest declared sandbox
    fits into three quarters of the engine's memory; starts at once: twice the cores (4 or more;
    the engine's own work per start is mostly waiting, measured in bench/bench_sandboxes.py)."""
    largest = max((policy.memory_bytes for policy in settings.servers.values()), default=512 << 20)
    by_memory = int(memory_total * MEMORY_SHARE // largest) if memory_total else SANDBOXES_PER_CORE
    derived_live = max(1, min(SANDBOXES_PER_CORE * max(1, cores), by_memory))
    return Limits(max_live=settings.max_live or derived_live,
                  max_starting=settings.max_starting or max(4, 2 * cores))


@dataclass(eq=False)
class Sandbox:
    id: str
    server: str
    image: str
    policy: SandboxPolicy
    container_id: str = ""
    state: str = "starting"  # starting | warm | leased | removing
    channel: Any = None
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    uid: Optional[int] = None
    created_at: float = field(default_factory=time.time)
    started: float = field(default_factory=time.monotonic)
    last_used: float = field(default_factory=time.monotonic)
    ttl_s: float = 0.0
    start_s: float = 0.0
    busy: int = 0
    dying: Optional[asyncio.Task] = None
    cpus: Optional[float] = None  # the lease's own limits (None: the plan's), kept for forks and restores
    memory_bytes: Optional[int] = None
    forked_from: Optional[str] = None  # the snapshot it started from
    leased_at: float = 0.0  # monotonic, at the lease (ledger.py)
    lease_wait_s: float = 0.0  # from the lease request to the sandbox handed out: queue, pull, start (ledger.py)
    pull_wait_s: float = 0.0  # of that, waiting for its image to be pulled (0 from the warm pool)
    caller: Optional[str] = None  # the start of the server's container that leased it (net/incarnation.py)
    commands: int = 0
    phase: str = DEFAULT_PHASE  # its egress phase (allow-lists with `phases`; SandboxPool.move_to_phase)
    started_phase: str = DEFAULT_PHASE  # the phase its container was created in (whose proxy its env names)
    phase_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    spare_for: Optional[str] = None  # a spare's session, until that session's lease takes it (pool.py)

    def describe(self) -> dict[str, Any]:
        return {"sandbox_id": self.id, "server": self.server, "image": self.image, "state": self.state,
                "created_at": self.created_at, "age_s": round(time.monotonic() - self.started, 3),
                "session": self.metadata.get("session"), "metadata": self.metadata, "workdir": self.workdir,
                "memory": self.policy.memory, "forked_from": self.forked_from, "commands": self.commands,
                "caller": self.caller, "phase": self.phase}


def oom_reason(policy: SandboxPolicy) -> str:
    return f"sandbox OOM-killed (memory {policy.memory})"
