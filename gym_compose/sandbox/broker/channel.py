"""The broker's side of a sandbox's agent: requests written to the container's stdin, answers
read back from its multiplexed stdout (Docker's 8-byte stream headers, then the agent's frames).

`FallbackChannel` answers the same requests with one Engine API exec each, for images where the
agent cannot run (no python3): slower, but the same results.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import shlex
import struct
from collections import deque
from typing import TYPE_CHECKING, Any, Optional

from gym_compose.sandbox.channel_constants import NO_PYTHON_MARKER

if TYPE_CHECKING:
    from gym_compose.sandbox.broker.backend import AgentStdin, SandboxBackend

LOG = logging.getLogger("gym_compose.sandbox.broker")
DOCKER_HEADER = struct.Struct(">BxxxI")
FRAME_HEADER = struct.Struct(">I")
STDOUT, STDERR = 1, 2
STDERR_TAIL_LINES = 20
# What sandboxed code could send the broker by writing to the agent's stdout or stderr itself (it
# runs as the same user): frames and unterminated stderr lines are bounded, beyond that the
# channel is closed and the sandbox counts as dead.
MAX_FRAME_BYTES = 256 << 20
MAX_STDERR_LINE = 64 << 10


class ChannelClosed(ConnectionError):
    """The agent's stream ended: the sandbox died or was removed."""


class NoAgent(RuntimeError):
    """The image has no python3, so the agent could not start."""


def encode_frame(message: dict[str, Any]) -> bytes:
    data = json.dumps(message, separators=(",", ":")).encode()
    return FRAME_HEADER.pack(len(data)) + data


class AgentChannel:
    def __init__(self, reader: asyncio.StreamReader, writer: AgentStdin, name: str):
        self.name = name
        self._reader, self._writer = reader, writer
        self._pending: dict[int, asyncio.Future] = {}
        self._next_id = 0
        self._buffer = bytearray()
        self._stderr = bytearray()
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        loop = asyncio.get_running_loop()
        self.hello: asyncio.Future = loop.create_future()
        self.closed = asyncio.Event()
        self.violation: Optional[str] = None  # what the stream did wrong, when it was not the agent's
        self._task = loop.create_task(self._read_forever())

    async def wait_ready(self, timeout: float) -> dict[str, Any]:
        """The agent's hello; NoAgent when the image has no python3, ChannelClosed when it died."""
        return await asyncio.wait_for(asyncio.shield(self.hello), timeout)

    async def request(self, op: str, timeout: Optional[float], **fields: Any) -> dict[str, Any]:
        if self.closed.is_set():
            raise ChannelClosed(self.name)
        self._next_id += 1
        request_id = self._next_id
        future = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            self._writer.write(encode_frame({"id": request_id, "op": op, **fields}))
            await self._writer.drain()
            return await asyncio.wait_for(future, timeout)
        except (ConnectionError, OSError) as error:
            raise ChannelClosed(f"{self.name}: {error}") from None
        except (asyncio.CancelledError, asyncio.TimeoutError):
            if op == "exec":  # nobody waits for this command any more: stop it
                self.send_nowait("kill", target=request_id)
            raise
        finally:
            self._pending.pop(request_id, None)

    def send_nowait(self, op: str, **fields: Any) -> None:
        """Fire and forget (a kill for a command whose caller gave up)."""
        if not self.closed.is_set():
            self._next_id += 1
            self._writer.write(encode_frame({"id": self._next_id, "op": op, **fields}))

    async def _read_forever(self) -> None:
        try:
            while True:
                header = await self._reader.readexactly(DOCKER_HEADER.size)
                stream, size = DOCKER_HEADER.unpack(header)
                data = await self._reader.readexactly(size)
                if stream == STDOUT:
                    self._buffer.extend(data)
                    self._dispatch()
                elif stream == STDERR:
                    self._on_stderr(data)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        except Exception as error:  # noqa: BLE001 - a garbled stream ends this channel, never the broker
            self.violation = str(error) or type(error).__name__
            LOG.warning("agent stream of %s broke: %s", self.name, self.violation)
        finally:
            self._close()

    def _dispatch(self) -> None:
        while len(self._buffer) >= FRAME_HEADER.size:
            (size,) = FRAME_HEADER.unpack_from(self._buffer)
            if size > MAX_FRAME_BYTES:
                raise ValueError(f"a frame of {size} bytes from the sandbox: protocol violation")
            if len(self._buffer) < FRAME_HEADER.size + size:
                return
            message = json.loads(bytes(self._buffer[FRAME_HEADER.size:FRAME_HEADER.size + size]))
            del self._buffer[:FRAME_HEADER.size + size]
            if message.get("op") == "hello":
                if not self.hello.done():
                    self.hello.set_result(message)
                continue
            future = self._pending.get(message.get("id"))
            if future is not None and not future.done():
                future.set_result(message)

    def _on_stderr(self, data: bytes) -> None:
        self._stderr.extend(data)
        *lines, rest = self._stderr.split(b"\n")
        self._stderr = bytearray(rest[-MAX_STDERR_LINE:])
        for raw in lines:
            line = raw.decode("utf-8", "replace")
            self.stderr_tail.append(line)
            if line.startswith(NO_PYTHON_MARKER) and not self.hello.done():
                self.hello.set_exception(NoAgent(line))
            else:
                LOG.info("sandbox %s agent: %s", self.name, line)

    def _close(self) -> None:
        self.closed.set()
        if not self.hello.done():
            self.hello.set_exception(ChannelClosed(f"{self.name}: the agent ended before it started"))
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ChannelClosed(self.name))
        try:
            self._writer.close()
        except Exception:  # noqa: BLE001
            pass

    async def aclose(self) -> None:
        self._close()
        self._task.cancel()


class FallbackChannel:
    """Engine API exec per request, for a sandbox whose image has no python3."""

    def __init__(self, backend: SandboxBackend, container_id: str, name: str, shell: str = "sh"):
        self.backend, self.container_id, self.name, self.shell = backend, container_id, name, shell
        self.closed = asyncio.Event()
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)

    async def request(self, op: str, timeout: Optional[float], **fields: Any) -> dict[str, Any]:
        handler = getattr(self, f"_{op}", None)
        if handler is None:
            return {"ok": False, "error": f"{op} is not supported without the agent"}
        try:
            result = await asyncio.wait_for(handler(**fields), timeout)
        except ChannelClosed:
            raise
        except Exception as error:  # noqa: BLE001 - answered like the agent answers
            return {"ok": False, "error": f"{type(error).__name__}: {error}"}
        return {"ok": True, **result}

    def send_nowait(self, op: str, **fields: Any) -> None:
        pass

    async def _run(self, script: str, env: Optional[dict[str, str]] = None, cwd: Optional[str] = None):
        from gym_compose.sandbox.broker.broker_errors import NotFound

        try:
            return await self.backend.exec_run(self.container_id, [self.shell, "-c", script], cwd, env or {})
        except NotFound:
            self.closed.set()
            raise ChannelClosed(self.name) from None

    async def _exec(self, command: str, cwd: Optional[str] = None, env: Optional[dict] = None,
                    timeout_s: Optional[float] = None, max_output_bytes: Optional[int] = None,
                    shell: Optional[str] = None) -> dict[str, Any]:
        limit = max_output_bytes or 1 << 20
        script = command
        if timeout_s:  # coreutils/busybox timeout kills it; without one the command runs to its end
            quoted = shlex.quote(command)
            script = (f"if command -v timeout >/dev/null 2>&1; then exec timeout -s KILL {float(timeout_s):g} "
                      f"{self.shell} -c {quoted}; else exec {self.shell} -c {quoted}; fi")
        code, out, err = await self._run(script, env, cwd)
        timed_out = bool(timeout_s) and code == 137
        return {"return_code": code, "stdout": out[:limit].decode("utf-8", "replace"),
                "stderr": err[:limit].decode("utf-8", "replace"), "timed_out": timed_out, "oom": False,
                "truncated": len(out) > limit or len(err) > limit}

    async def _write(self, path: str, data: str, append: bool = False, mode: Optional[int] = None) -> dict[str, Any]:
        target = shlex.quote(path)
        payload = shlex.quote(data)
        redirect = ">>" if append else ">"
        script = (f"mkdir -p \"$(dirname {target})\" && printf %s {payload} | base64 -d {redirect} {target}"
                  + (f" && chmod {int(mode):o} {target}" if mode is not None else "") + f" && wc -c < {target}")
        code, out, err = await self._run(script)
        if code != 0:
            raise OSError(err.decode("utf-8", "replace").strip() or f"write failed ({code})")
        return {"size": int(out.strip() or 0)}

    async def _read(self, path: str, offset: int = 0, length: int = 1 << 20) -> dict[str, Any]:
        target = shlex.quote(path)
        code, out, err = await self._run(f"wc -c < {target} && tail -c +{int(offset) + 1} {target} | "
                                         f"head -c {int(length)} | base64")
        if code != 0:
            raise FileNotFoundError(err.decode("utf-8", "replace").strip() or path)
        size_line, _, encoded = out.partition(b"\n")
        size = int(size_line.strip() or 0)
        data = base64.b64decode(encoded)
        return {"data": base64.b64encode(data).decode(), "size": size, "eof": offset + len(data) >= size}

    async def _ping(self) -> dict[str, Any]:
        await self._run("true")
        return {}

    async def aclose(self) -> None:
        self.closed.set()
