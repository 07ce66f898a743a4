"""The one place that runs the `docker` CLI: every call has a timeout, idempotent calls retry.

Failures become `UserError`s that say what to do; callers that expect a command to fail (an
inspect of a missing image, a pull with no registry) pass `check=False` and read the result.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gym_compose.errors import UserError

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


class DockerCommandError(UserError):
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


class DockerTimeout(UserError):
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
        raise UserError(
            "The `docker` command was not found.",
            hint="install Docker Engine (https://docs.docker.com/engine/install/) and put `docker` on PATH",
        ) from None
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
        returncode = process.wait()
    finally:
        watchdog.cancel()
        if process.poll() is None:
            process.kill()
            process.wait()
    if timed_out.is_set():
        raise subprocess.TimeoutExpired(command, timeout)
    return DockerResult(tuple(command[1:]), returncode, "\n".join(lines), "")


def _raise_if_engine_unusable(result: DockerResult) -> None:
    if result.ok:
        return
    output = result.stderr + result.stdout
    if _PERMISSION.search(output):
        raise UserError(
            "Permission denied talking to the Docker engine.",
            hint="add your user to the `docker` group (then log in again) or run with sudo",
        )
    if _DAEMON_DOWN.search(output):
        raise UserError(
            "The Docker engine is not running.",
            hint="start it (`sudo systemctl start docker`) and check with `docker info`",
        )


def indented_tail(text: str, count: int) -> str:
    """The last `count` lines of a command's output, indented under an error message."""
    return "\n".join("    " + line for line in text.strip().splitlines()[-count:])
