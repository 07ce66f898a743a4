"""The one place that runs the `docker` CLI: every call has a timeout, idempotent calls retry.

Failures become `EngineFailure`s (errors.py) that say what to do; callers that expect a command to fail (an
inspect of a missing image, a pull with no registry) pass `check=False` and read the result.
Long-running commands (`logs --follow`, a one-off `compose run`) are started with
`start_docker`, whose `DockerProcess` explains the same failures once it has exited.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from gym_compose.child_process import ChildProcess
from gym_compose.errors import EngineFailure
from gym_compose.interrupts import exit_code, kill_and_reap, wait_for_exit

DOCKER = "docker"
RETRY_DELAYS_S = (1.0, 3.0, 9.0)

_TRANSIENT = re.compile(
    r"i/o timeout|TLS handshake timeout|connection reset|unexpected EOF|"
    r"Client\.Timeout|50[234] |Service Unavailable|too many requests|toomanyrequests",
    re.IGNORECASE,
)
_DAEMON_DOWN = re.compile(r"Cannot connect to the Docker daemon|Is the docker daemon running", re.IGNORECASE)
_PERMISSION = re.compile(r"permission denied while trying to connect to the Docker daemon", re.IGNORECASE)


@dataclass(frozen=True)
class DockerResult:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class DockerUnavailable(EngineFailure):
    """The engine cannot be used at all: no `docker` CLI, the daemon down, no permission."""


class DockerCommandError(EngineFailure):
    """`docker ...` exited non-zero; `result` holds its output."""

    def __init__(self, result: DockerResult, hint: str | None = None):
        command = describe(result.args)
        detail = indented_tail(result.stderr or result.stdout, 20)
        super().__init__(f"`{command}` failed (exit {result.returncode}):\n{detail}", hint=hint)
        self.result = result


def describe(args: Sequence[str]) -> str:
    """`docker compose up`-style name of a call: the command words, without -p/-f/--profile values."""
    words, skip = ["docker"], False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("-p", "-f", "--profile"):
            skip = True
        elif not arg.startswith("-"):
            words.append(arg)
        if len(words) == 4:
            break
    return " ".join(words)


class DockerTimeout(EngineFailure):
    def __init__(self, args: Sequence[str], timeout: float):
        super().__init__(
            f"`{describe(args)}` did not finish within {timeout:.0f} s.",
            hint="check that the Docker engine is responsive (`docker info`), then try again",
        )


def run_docker(
    args: Sequence[str],
    *,
    timeout: float,
    retries: int = 0,
    check: bool = True,
    on_line: Callable[[str], None] | None = None,
    env: Mapping[str, str] | None = None,
) -> DockerResult:
    """Run `docker ARGS`. `retries` > 0 only for idempotent commands (inspect, pull, ls).

    With `on_line`, stdout and stderr are merged and each line is passed on as it arrives
    (`stderr` of the result is then empty).
    """
    full_env = {**os.environ, **(env or {})}
    for attempt in range(retries + 1):
        try:
            result = _run_once([DOCKER, *args], timeout, on_line, full_env)
        except DockerTimeout:
            if attempt < retries:
                time.sleep(RETRY_DELAYS_S[min(attempt, len(RETRY_DELAYS_S) - 1)])
                continue
            raise
        _raise_if_engine_unusable(result)
        transient = not result.ok and _TRANSIENT.search(result.stderr + result.stdout)
        if transient and attempt < retries:
            time.sleep(RETRY_DELAYS_S[min(attempt, len(RETRY_DELAYS_S) - 1)])
            continue
        if check and not result.ok:
            raise DockerCommandError(result)
        return result
    raise AssertionError("unreachable")


def _run_once(
    command: list[str], timeout: float, on_line: Callable[[str], None] | None, env: dict[str, str]
) -> DockerResult:
    try:
        if on_line is None:
            completed = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
            return DockerResult(tuple(command[1:]), completed.returncode, completed.stdout, completed.stderr)
        return _run_streaming(command, timeout, on_line, env)
    except FileNotFoundError:
        raise _docker_missing() from None
    except subprocess.TimeoutExpired:
        raise DockerTimeout(command[1:], timeout) from None


def _run_streaming(
    command: list[str], timeout: float, on_line: Callable[[str], None], env: dict[str, str]
) -> DockerResult:
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, bufsize=1
    )
    timed_out = threading.Event()

    def kill_on_timeout() -> None:
        timed_out.set()
        process.kill()

    watchdog = threading.Timer(timeout, kill_on_timeout)
    watchdog.start()
    lines: list[str] = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            line = line.rstrip("\n")
            lines.append(line)
            on_line(line)
        returncode = wait_for_exit(process)
    finally:
        watchdog.cancel()
        if exit_code(process) is None:
            kill_and_reap(process)
    if timed_out.is_set():
        raise subprocess.TimeoutExpired(command, timeout)
    return DockerResult(tuple(command[1:]), returncode, "\n".join(lines), "")


def _docker_missing() -> DockerUnavailable:
    return DockerUnavailable(
        "The `docker` command was not found.",
        hint="install Docker Engine (https://docs.docker.com/engine/install/) and put `docker` on PATH",
    )


STDERR_TAIL_LINES = 50


class DockerProcess(ChildProcess):
    """A long-running `docker ...` that its owner stops. Its stderr is passed on line by line
    (to `stderr_to`) and its tail kept, so that `check()` explains a failure as `run_docker` does."""

    def __init__(self, popen: subprocess.Popen, args: Sequence[str], stderr_to: IO[str] | None):
        super().__init__(popen)
        self.args = tuple(args)
        self._tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        self._stderr_to = stderr_to
        self._pump = threading.Thread(target=self._copy_stderr, daemon=True)
        self._pump.start()

    @property
    def stdin(self) -> IO[bytes] | None:
        return self._popen.stdin

    def _copy_stderr(self) -> None:
        assert self._popen.stderr is not None
        for raw in self._popen.stderr:
            line = raw.decode("utf-8", "replace")
            self._tail.append(line.rstrip("\n"))
            if self._stderr_to is not None:
                try:
                    self._stderr_to.write(line)
                    self._stderr_to.flush()
                except (OSError, ValueError):  # a closed terminal or log file: keep the tail only
                    self._stderr_to = None

    def wait(self, timeout: float | None = None) -> int | None:
        code = super().wait(timeout)
        if code is not None:
            self._pump.join(timeout=5)  # its stderr's tail, whole
        return code

    def stop(self, grace_seconds: float, signum: int = signal.SIGINT) -> int:
        code = super().stop(grace_seconds, signum)
        self._pump.join(timeout=5)
        return code

    def result(self) -> DockerResult:
        """After it exited: its status and the tail of its stderr."""
        code = self.poll()
        return DockerResult(self.args, -1 if code is None else code, "", "\n".join(self._tail))

    def check(self, engine_only: bool = False) -> None:
        """Raise the engine's own explanation (daemon down, permission), or else, unless
        `engine_only` (the command's status is its own business), DockerCommandError."""
        result = self.result()
        _raise_if_engine_unusable(result)
        if not result.ok and not engine_only:
            raise DockerCommandError(result)


def start_docker(
    args: Sequence[str],
    *,
    stdout: IO | None = None,
    stderr_to: IO[str] | None = None,
    stdin_pipe: bool = False,
    new_session: bool = False,
    env: Mapping[str, str] | None = None,
) -> DockerProcess:
    """Start `docker ARGS` and return at once. stdout goes to `stdout` (None: ours); stderr is
    copied to `stderr_to` (None: kept only for `check()`). `stdin_pipe` gives the caller a pipe to
    its stdin (closed when the caller dies, whatever the signal); `new_session` keeps the
    terminal's Ctrl-C from reaching it, so that its owner alone decides how it stops."""
    try:
        popen = subprocess.Popen(
            [DOCKER, *args],
            stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.PIPE,
            env={**os.environ, **(env or {})},
            start_new_session=new_session,
        )
    except FileNotFoundError:
        raise _docker_missing() from None
    return DockerProcess(popen, args, stderr_to)


def run_docker_attached(args: Sequence[str]) -> int:
    """`docker ARGS` on our terminal (stdin, stdout, stderr), for interactive commands such as
    `docker exec -it`; returns its exit code (130 when interrupted)."""
    try:
        return subprocess.call([DOCKER, *args])
    except FileNotFoundError:
        raise _docker_missing() from None
    except KeyboardInterrupt:
        return 130


def _raise_if_engine_unusable(result: DockerResult) -> None:
    if result.ok:
        return
    output = result.stderr + result.stdout
    if _PERMISSION.search(output):
        raise DockerUnavailable(
            "Permission denied talking to the Docker engine.",
            hint="add your user to the `docker` group (then log in again) or run with sudo",
        )
    if _DAEMON_DOWN.search(output):
        raise DockerUnavailable(
            "The Docker engine is not running.",
            hint="start it (`sudo systemctl start docker`) and check with `docker info`",
        )


def indented_tail(text: str, count: int) -> str:
    """The last `count` lines of a command's output, indented under an error message."""
    return "\n".join("    " + line for line in text.strip().splitlines()[-count:])
