"""How a run is stopped from outside: the host's lease on the collector (its stdin), or a signal.

With `--host-lease` the host CLI holds a pipe to the collector's stdin. A line
`{"stop": "REASON"}` stops the run: rollouts in flight fail at once with REASON (a server the
host saw die), the rest stay pending for `--resume`. The end of stdin stops the run too, leaving
the rollouts in flight pending: the host asked us to stop (Ctrl-C), or it died, however it died,
and nobody would read what we do next. So a collector never outlives the command that started it.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

import orjson


class RunStop:
    """Set once; cancels the rollouts in flight. Used from the event loop's thread only."""

    def __init__(self) -> None:
        self.requested = False
        self.reason: str | None = None
        self._busy: set[asyncio.Task] = set()

    def request(self, reason: str | None) -> None:
        if self.requested:
            return
        self.requested, self.reason = True, reason
        for task in list(self._busy):
            task.cancel()

    @contextmanager
    def rollout(self) -> Iterator[None]:
        """Marks the current task as running a rollout: a stop cancels it there, and only there."""
        task = asyncio.current_task()
        assert task is not None
        self._busy.add(task)
        try:
            yield
        finally:
            self._busy.discard(task)


def stop_reason(line: bytes) -> str | None:
    """The reason in a `{"stop": REASON}` line; None for anything else (ignored)."""
    try:
        message = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if isinstance(message, dict) and isinstance(message.get("stop"), str):
        return message["stop"]
    return None


def watch_lease(stop: RunStop, loop: asyncio.AbstractEventLoop, stream: IO | None = None) -> threading.Thread:
    """Read the lease in a thread; each event is handed to the loop."""

    def hand_over(reason: str | None) -> None:
        try:
            loop.call_soon_threadsafe(stop.request, reason)
        except RuntimeError:  # the loop is closed: the run is over anyway
            pass

    def read() -> None:
        # raw reads of the descriptor: a thread blocked in a buffered read holds the buffer's lock,
        # which the interpreter would wait for at exit
        fd = (stream if stream is not None else sys.stdin).fileno()
        pending = b""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                reason = stop_reason(line)
                if reason is not None:
                    print(f"collect: stopping: {reason}", file=sys.stderr, flush=True)
                    hand_over(reason)
        print("collect: the host closed the lease; stopping (finished rollouts are saved)", file=sys.stderr, flush=True)
        hand_over(None)

    thread = threading.Thread(target=read, name="host-lease", daemon=True)
    thread.start()
    return thread
