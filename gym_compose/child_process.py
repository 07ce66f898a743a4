"""A child process that its owner talks to and stops (the collector, a log follower): JSON lines
to its stdin, and a stop that signals it, waits its grace, then kills it. Every wait goes through
interrupts.py, so Ctrl-C or SIGHUP never lands inside Popen's lock."""

from __future__ import annotations

import json
import signal
import subprocess

from gym_compose.interrupts import exit_code, kill_and_reap, wait_for_exit


class ChildProcess:
    def __init__(self, popen: subprocess.Popen):
        self._popen = popen

    @property
    def pid(self) -> int:
        return self._popen.pid

    def poll(self) -> int | None:
        return exit_code(self._popen)

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit status, or None if it is still running after `timeout` seconds."""
        return wait_for_exit(self._popen, timeout)

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            self._popen.send_signal(signum)

    def stop(self, grace_seconds: float, signum: int = signal.SIGINT) -> int:
        """Signal it, wait up to `grace_seconds`, then kill it; returns its exit status."""
        self.send_signal(signum)
        code = self.wait(grace_seconds)
        return kill_and_reap(self._popen) if code is None else code

    def tell(self, message: dict) -> None:
        """Write one JSON line to its stdin (a pipe); a closed pipe is ignored."""
        stdin = self._popen.stdin
        if stdin is None or stdin.closed:
            return
        try:
            stdin.write(json.dumps(message).encode() + b"\n")
            stdin.flush()
        except OSError:
            pass

    def close_stdin(self) -> None:
        stdin = self._popen.stdin
        if stdin is not None and not stdin.closed:
            try:
                stdin.close()
            except OSError:
                pass
