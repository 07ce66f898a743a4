"""What a leased sandbox cost, reported when it is released (the rollout's `cost` block, docs/sandboxes.md):

- `leased_s`: from the lease to the release (wall time);
- `commands`: exec calls run in it;
- `lease_wait_s`: from the lease request to the sandbox handed out (the queue for a slot, the
  image pull, the start; near 0 from the warm pool);
- `image_pull_s`: of that, the wait for its image's pull (0 when the image was there);
- `cpu_s`: CPU time of all its processes, from the engine's own stats (one one-shot reading at
  release: `cpu_stats.cpu_usage.total_usage`);
- `peak_memory_bytes`: the cgroup's high-water mark (`memory_stats.max_usage`; cgroup v1 engines
  report it, cgroup v2 ones do not, and then it is left out).

A backend with no stats (Kubernetes without a metrics API) leaves the last two out.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from gym_compose.sandbox.broker.backend import SandboxBackend
from gym_compose.sandbox.broker.sandboxes import Sandbox

LOG = logging.getLogger("gym_compose.sandbox.broker")


def usage_of(stats: dict[str, Any]) -> dict[str, Any]:
    """cpu_s and peak_memory_bytes from one Engine API stats reading (what it has of them)."""
    found: dict[str, Any] = {}
    total = ((stats.get("cpu_stats") or {}).get("cpu_usage") or {}).get("total_usage")
    if isinstance(total, (int, float)) and total > 0:
        found["cpu_s"] = round(total / 1e9, 4)
    peak = (stats.get("memory_stats") or {}).get("max_usage")
    if isinstance(peak, int) and peak > 0:
        found["peak_memory_bytes"] = peak
    return found


async def sandbox_cost(backend: SandboxBackend, sandbox: Sandbox) -> dict[str, Any]:
    cost: dict[str, Any] = {"leased_s": round(time.monotonic() - sandbox.leased_at, 4) if sandbox.leased_at else 0.0,
                            "commands": sandbox.commands, "lease_wait_s": round(sandbox.lease_wait_s, 4),
                            "image_pull_s": round(sandbox.pull_wait_s, 4)}
    if sandbox.container_id:
        try:
            cost.update(usage_of(await backend.stats(sandbox.container_id)))
        except Exception as error:  # noqa: BLE001 - the ledger must not stop a release
            LOG.warning("no stats for sandbox %s: %s", sandbox.id, error)
    return cost
