"""Ctrl-C, SIGTERM and SIGHUP become a KeyboardInterrupt raised wherever the main thread is
(gym_compose/cli/main.py). Where that would break what it lands in, it waits for the end of a
`deferred()` block instead.

Why: `Popen.wait` and `Popen.poll` take the Popen's lock, then enter the `try` that gives it back
one step later. An interrupt between the two leaves the lock taken for good, and the next
`wait()` without a timeout blocks forever: a CLI stopped by SIGHUP hung in `DockerProcess.stop`
until killed (CI, 2026-12-07; py-spy showed it waiting on that lock). So a process that gym-compose
waits on again and again is waited on through `wait_for_exit` and `exit_code`, each a short
deferred step, and an interrupt lands between steps, within WAIT_STEP_S.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import overload

WAIT_STEP_S = 0.5

_depth = 0  # deferred blocks the main thread is in
_pending = False  # an interrupt arrived inside one


def interrupt() -> None:
    """The signal handler's raise: a KeyboardInterrupt now, or when the deferred block ends."""
    global _pending
    if _depth:
        _pending = True
        return
    raise KeyboardInterrupt


@contextmanager
def deferred() -> Iterator[None]:
    """An interrupt that arrives inside is raised as the block ends (replacing an exception that
    ends it: the user asked to stop). Other threads never get the interrupt, so it costs them nothing."""
    global _depth, _pending
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if not _depth and _pending:
            _pending = False
            raise KeyboardInterrupt


def exit_code(popen: subprocess.Popen) -> int | None:
    """`popen.poll()`, safe from an interrupt."""
    with deferred():
        return popen.poll()


@overload
def wait_for_exit(popen: subprocess.Popen, timeout: None = None) -> int: ...
@overload
def wait_for_exit(popen: subprocess.Popen, timeout: float | None) -> int | None: ...


def wait_for_exit(popen: subprocess.Popen, timeout: float | None = None) -> int | None:
    """Its exit status, or None if it still runs after `timeout` seconds (None: until it exits);
    waited for in steps of WAIT_STEP_S, each safe from an interrupt."""
    remaining = timeout
    while remaining is None or remaining > 0:
        step = WAIT_STEP_S if remaining is None else min(WAIT_STEP_S, remaining)
        with deferred():
            try:
                return popen.wait(timeout=step)
            except subprocess.TimeoutExpired:
                pass
        if remaining is not None:
            remaining -= step
    return exit_code(popen)


def kill_and_reap(popen: subprocess.Popen) -> int:
    """SIGKILL, then its exit status."""
    with deferred():
        popen.kill()
    return wait_for_exit(popen)
