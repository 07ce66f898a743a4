"""Snapshot, fork, restore, pause and resume of leased sandboxes, on top of the pool.

- `fork`: n new leases of the snapshot's server, each started from the snapshot's image (the cold
  path of a lease: slots, throttle, agent; no build, no pull), with the source's env and work
  folder. They share nothing after the start: each has its own writable layer.
- `restore`: the sandbox's container is replaced by one of the snapshot's image under the same
  id and lease (`SandboxPool.relaunch`); its processes end.
- `pause` / `resume`: the engine's cgroup freezer (`docker pause`); processes keep their memory
  and stop using the CPU. A paused sandbox takes no commands or files (409) and still counts
  against `max_live`, its time-to-live and the idle timeout.
- `move_to_phase`: an allow-listed sandbox to another of its egress phases (`SandboxPool.move_to_phase`).
- `checkpoint` / `restore_checkpoint`: a snapshot with its agent's state, under a key (checkpoints.py).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Optional

import orjson

from gym_compose.sandbox.broker.broker_errors import BrokerError, Conflict, Refused
from gym_compose.sandbox.broker.pool import SandboxPool
from gym_compose.sandbox.broker.sandboxes import Sandbox
from gym_compose.sandbox.broker.snapshots import Snapshot
from gym_compose.sandbox.policy import ForkRequest, LeaseRequest


async def snapshot(pool: SandboxPool, sandbox: Sandbox) -> Snapshot:
    if sandbox.state != "leased":
        raise Conflict(f"sandbox {sandbox.id} is {sandbox.state}; snapshot a running, leased sandbox")
    return await pool.snapshots.take(sandbox)


async def fork(pool: SandboxPool, source: Snapshot, request: ForkRequest) -> list[tuple[Sandbox, float]]:
    """`request.n` sandboxes of `source`, started at once (the pool's throttle orders them), with
    how long each lease took. All or none: when one fails the others are released."""

    async def one(index: int) -> tuple[Sandbox, float]:
        began = time.monotonic()
        metadata = {**request.metadata, "forked_from": source.id, "fork": str(index)}
        sandbox, _ = await pool.lease(source.server, LeaseRequest(snapshot=source.id, env=request.env,
                                                                  metadata=metadata, phase=request.phase,
                                                                  ready_timeout_s=request.ready_timeout_s))
        return sandbox, time.monotonic() - began

    results = await asyncio.gather(*(one(index) for index in range(request.n)), return_exceptions=True)
    forks = [result for result in results if not isinstance(result, BaseException)]
    failures = [result for result in results if isinstance(result, BaseException)]
    if failures:
        await asyncio.gather(*(pool.release(sandbox) for sandbox, _ in forks), return_exceptions=True)
        first = failures[0]
        if isinstance(first, BrokerError):
            raise type(first)(f"fork of {source.id}: {len(failures)} of {request.n} sandboxes did not start, so "
                              f"none were kept: {first}") from None
        raise first
    return forks


async def restore(pool: SandboxPool, sandbox: Sandbox, source: Snapshot) -> float:
    """Seconds the restore took."""
    if sandbox.state != "leased":
        raise Conflict(f"sandbox {sandbox.id} is {sandbox.state}; resume it before restoring it")
    if sandbox.busy:
        raise Conflict(f"sandbox {sandbox.id} is running a command; restore it between commands")
    began = time.monotonic()
    await pool.relaunch(sandbox, source.image)
    sandbox.forked_from = source.id
    return time.monotonic() - began


async def pause(pool: SandboxPool, sandbox: Sandbox) -> dict[str, Any]:
    if sandbox.state == "paused":
        return {"state": "paused", "changed": False}
    if sandbox.busy:
        raise Conflict(f"sandbox {sandbox.id} is running a command; pause it between commands (a frozen "
                       "command would outlive its timeout)")
    sandbox.state, sandbox.last_used = "paused", time.monotonic()  # before the await: no command slips in
    try:
        await pool.backend.pause(sandbox.container_id)
    except BaseException:
        sandbox.state = "leased"
        raise
    return {"state": "paused", "changed": True}


async def resume(pool: SandboxPool, sandbox: Sandbox) -> dict[str, Any]:
    if sandbox.state != "paused":
        return {"state": sandbox.state, "changed": False}
    await pool.backend.unpause(sandbox.container_id)
    sandbox.state, sandbox.last_used = "leased", time.monotonic()
    return {"state": "leased", "changed": True}


async def move_to_phase(pool: SandboxPool, sandbox: Sandbox, phase: str) -> dict[str, Any]:
    """Another egress phase for a leased sandbox (its processes run on, under the new phase's reach)."""
    reason = sandbox.policy.phase_refusal(phase)
    if reason:
        raise Refused(reason)
    if sandbox.state != "leased":
        raise Conflict(f"sandbox {sandbox.id} is {sandbox.state}; resume it before moving it to another phase")
    before = sandbox.phase
    took = await pool.move_to_phase(sandbox, phase)
    return {"sandbox_id": sandbox.id, "phase": sandbox.phase, "previous": before, "changed": before != sandbox.phase,
            "took_s": round(took, 4)}


async def checkpoint(pool: SandboxPool, sandbox: Sandbox, key: str, state: bytes) -> dict[str, Any]:
    """Checkpoint `key` of the sandbox's server: its filesystem now and the caller's state."""
    if sandbox.state != "leased":
        raise Conflict(f"sandbox {sandbox.id} is {sandbox.state}; checkpoint a running, leased sandbox")
    if sandbox.busy:
        raise Conflict(f"sandbox {sandbox.id} is running a command; checkpoint it between commands")
    began = time.monotonic()
    taken = await pool.checkpoints.save(sandbox, key, state)
    return {**taken.describe(), "took_s": round(time.monotonic() - began, 4)}


async def restore_checkpoint(pool: SandboxPool, sandbox: Sandbox, key: str) -> dict[str, Any]:
    """The sandbox's filesystem back to checkpoint `key` of its server, and the state saved with it."""
    found = pool.checkpoints.get(sandbox.server, key)
    if found is None:  # none taken, forgotten, or the broker restarted since: the sandbox is unchanged
        return {"key": key, "found": False}
    took = await restore(pool, sandbox, found.snapshot)
    return {**found.describe(), "found": True, "state": orjson.loads(found.state), "took_s": round(took, 4)}


def lease_answer(sandbox: Sandbox, grant: str, warm: bool, took_s: Optional[float] = None) -> dict[str, Any]:
    """What the broker answers for a lease (POST /v1/sandboxes) and for each fork."""
    answer = {"sandbox_id": sandbox.id, "image": sandbox.image, "workdir": sandbox.workdir, "warm": warm,
              "start_s": round(sandbox.start_s, 4), "uid": sandbox.uid, "timeout_s": sandbox.policy.timeout_s,
              "grant": grant, "forked_from": sandbox.forked_from, "phase": sandbox.phase}
    if took_s is not None:
        answer["lease_s"] = round(took_s, 4)
    return answer
