"""Commands and files in a live sandbox, through its agent channel.

A channel that closes, or an agent that stops answering, makes the sandbox dead: `mark_dead`
(the pool's) buries it and gives the reason the caller gets.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Awaitable, Callable
from typing import Any, Optional

from gym_compose.sandbox.broker.broker_errors import Refused, SandboxGone, UnknownSandbox
from gym_compose.sandbox.broker.channel import ChannelClosed
from gym_compose.sandbox.broker.commands import agent_exec_request, command_timeout, exec_result, user_refusal
from gym_compose.sandbox.broker.sandboxes import Sandbox
from gym_compose.sandbox.policy import ExecRequest

AGENT_GRACE_S = 15.0  # beyond a command's own timeout, before the broker stops waiting for the agent
FILE_CALL_TIMEOUT_S = 120.0

MarkDead = Callable[[Sandbox, Optional[str]], Awaitable[str]]


class SandboxIO:
    def __init__(self, mark_dead: MarkDead):
        self._mark_dead = mark_dead

    async def exec(self, sandbox: Sandbox, request: ExecRequest) -> dict[str, Any]:
        refused = user_refusal(sandbox, request)
        if refused is not None:
            return refused
        timeout = command_timeout(sandbox, request)
        answer = await self._call(sandbox, "exec", timeout + AGENT_GRACE_S if timeout else None,
                                  **agent_exec_request(sandbox, request))
        return exec_result(sandbox, request, answer)

    async def write_file(self, sandbox: Sandbox, path: str, data: bytes, mode: Optional[int], chunk: int) -> int:
        size = 0
        for offset in range(0, max(len(data), 1), chunk):
            answer = await self._call(sandbox, "write", FILE_CALL_TIMEOUT_S, path=absolute(sandbox, path),
                                      data=base64.b64encode(data[offset:offset + chunk]).decode(),
                                      append=offset > 0, mode=mode)
            if not answer.get("ok"):
                raise Refused(f"cannot write {path}: {answer.get('error')}")
            size = answer.get("size", 0)
        return size

    async def read_file(self, sandbox: Sandbox, path: str, chunk: int, limit: int) -> bytes:
        parts, offset = [], 0
        while True:
            answer = await self._call(sandbox, "read", FILE_CALL_TIMEOUT_S, path=absolute(sandbox, path),
                                      offset=offset, length=chunk)
            if not answer.get("ok"):
                raise UnknownSandbox(f"cannot read {path}: {answer.get('error')}")
            data = base64.b64decode(answer.get("data") or "")
            parts.append(data)
            offset += len(data)
            if offset > limit:
                raise Refused(f"{path} is larger than the download limit ({limit} bytes)")
            if answer.get("eof") or not data:
                return b"".join(parts)

    async def _call(self, sandbox: Sandbox, op: str, timeout: Optional[float], **fields: Any) -> dict[str, Any]:
        sandbox.busy += 1
        sandbox.last_used = time.monotonic()
        try:
            return await sandbox.channel.request(op, timeout, **fields)
        except ChannelClosed:
            raise SandboxGone(await self._mark_dead(sandbox, None)) from None
        except asyncio.TimeoutError:
            raise SandboxGone(await self._mark_dead(sandbox, "sandbox agent stopped answering")) from None
        finally:
            sandbox.busy -= 1
            sandbox.last_used = time.monotonic()


def absolute(sandbox: Sandbox, path: str) -> str:
    return path if path.startswith("/") else f"{sandbox.workdir.rstrip('/')}/{path}"
