"""Why a sandbox died, in words: what callers get instead of a bare "not found"."""

from __future__ import annotations

import asyncio
import time

from gym_compose.sandbox.broker.backend import SandboxBackend
from gym_compose.sandbox.broker.broker_errors import BackendError, NotFound
from gym_compose.sandbox.broker.sandboxes import Sandbox, oom_reason

EXIT_SETTLE_POLLS, EXIT_SETTLE_POLL_S = 20, 0.1


async def death_reason(backend: SandboxBackend, sandbox: Sandbox) -> str:
    if sandbox.ttl_s and time.monotonic() - sandbox.started >= sandbox.ttl_s:
        return f"sandbox reached its time-to-live ({sandbox.ttl_s:g} s)"
    violation = getattr(sandbox.channel, "violation", None)
    if violation:
        return f"sandbox garbled its agent's stream ({violation}) and was closed"
    try:
        state = (await backend.inspect(sandbox.container_id))["State"]
        # The agent's stream can end a moment before the engine records the container's exit.
        for _ in range(EXIT_SETTLE_POLLS):
            if not state.get("Running"):
                break
            await asyncio.sleep(EXIT_SETTLE_POLL_S)
            state = (await backend.inspect(sandbox.container_id))["State"]
    except NotFound:
        return "sandbox container was removed from outside the broker"
    except BackendError as error:
        return f"sandbox is unreachable ({error})"
    if state.get("OOMKilled"):
        return oom_reason(sandbox.policy)
    if state.get("Running"):
        return "sandbox agent stopped answering"
    code = state.get("ExitCode")
    if code == 3:
        return f"sandbox reached its time-to-live ({sandbox.policy.ttl_s:g} s)"
    tail = [line for line in sandbox.channel.stderr_tail if line.strip()] if sandbox.channel else []
    return f"sandbox exited (exit code {code})" + (f": {tail[-1]}" if tail else "")
