"""A chat-completions endpoint on loopback that misbehaves on cue, for the upstream-fault tests.

Each POST takes the next step of the script (then answers normally once it is used up):
`Answer(status, headers, body)`, `Reset()` (the connection is reset after the request is read),
`Hang()` (the request is read and never answered). `GET .../models` always answers 200 (readiness).
The server runs its own event loop in a thread and records every POST it read.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Optional, Union


def chat_completion(text: str = "42", prompt_tokens: int = 5, completion_tokens: int = 1) -> dict:
    return {"id": "chatcmpl-scripted", "object": "chat.completion", "created": 1, "model": "scripted",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


@dataclass
class Answer:
    status: int = 200
    headers: dict = field(default_factory=dict)
    body: Union[dict, bytes, None] = None
    delay_s: float = 0.0


@dataclass
class Reset:
    pass


@dataclass
class Hang:
    pass


Step = Union[Answer, Reset, Hang]


@dataclass
class Received:
    path: str
    body: dict
    at: float


class ScriptedUpstream:
    def __init__(self, script: Optional[list[Step]] = None, default: Optional[Answer] = None):
        self.script = list(script or [])
        self.default = default or Answer()
        self.received: list[Received] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._server = None
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self._handlers: set = set()
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def posts(self) -> list[Received]:
        with self._lock:
            return list(self.received)

    def start(self) -> "ScriptedUpstream":
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("scripted upstream did not start within 10 s")
        return self

    def stop(self) -> None:
        if self._loop is None:
            return

        async def shut() -> None:
            self._server.close()
            handlers = list(self._handlers)
            for task in handlers:
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shut(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> "ScriptedUpstream":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._handlers.add(asyncio.current_task())
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, target = lines[0].split(" ")[:2]
                length = 0
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value.strip())
                raw = await reader.readexactly(length) if length else b""
                if method == "GET":
                    await self._send(writer, Answer(200, {}, {"object": "list", "data": [{"id": "scripted"}]}))
                    continue
                with self._lock:
                    self.received.append(Received(target, json.loads(raw or b"{}"), time.monotonic()))
                    step = self.script.pop(0) if self.script else self.default
                if isinstance(step, Reset):
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.transport.abort()
                    return
                if isinstance(step, Hang):
                    await asyncio.Event().wait()  # until the client gives up or the server stops
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
                try:
                    if step.delay_s:
                        await asyncio.sleep(step.delay_s)
                    await self._send(writer, step)
                finally:
                    self.in_flight -= 1
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            self._handlers.discard(asyncio.current_task())
            writer.close()

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, answer: Answer) -> None:
        body = answer.body if answer.body is not None else chat_completion()
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        head = [f"HTTP/1.1 {answer.status} Scripted", f"Content-Length: {len(payload)}",
                "Content-Type: application/json"]
        head += [f"{name}: {value}" for name, value in answer.headers.items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload)
        await writer.drain()
