"""`docker build` (classic builder) with a compact progress view, and image inspection."""

from __future__ import annotations

import json
import re
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path

from gym_compose.engine import docker_cli
from gym_compose.errors import UserError

BUILD_TIMEOUT_S = 1800
INSPECT_TIMEOUT_S = 30
_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
# Steps that do work. ARG, ENV, LABEL and the like are shown only when they took a while: the
# classic builder commits a container for each, a second or more on a busy engine.
_SHOWN_STEPS = ("FROM", "RUN", "COPY", "ADD")
_SHOWN_SLOWER_THAN_S = 1.0
_LINE_WIDTH = 110
# The classic builder colours a step's stderr with terminal escapes.
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


class BuildProgress:
    """Turns `docker build` output into one line per Dockerfile step that does work (or took a
    while) with its duration, or every line when verbose. A step's line is shown when it ends (the
    next step starts, or `finish()`).

    Keeps the last lines so that a failed build can show what went wrong.
    """

    def __init__(self, tag: str, progress: Callable[[str], None], verbose: bool = False,
                 clock: Callable[[], float] = time.monotonic):
        self.tag = tag
        self.progress = progress
        self.verbose = verbose
        self.clock = clock
        self.recent: deque[str] = deque(maxlen=30)
        self._running: tuple[str, float] | None = None  # the shown step under way, and when it began

    def __call__(self, line: str) -> None:
        line = _ANSI_ESCAPE.sub("", line)
        self.recent.append(line)
        if self.verbose:
            self.progress(f"  [{self.tag}] {line}")
            return
        step = _STEP.match(line)
        if step:
            self.finish()
            number, total, instruction = step.groups()
            self._running = (f"{number}/{total} {instruction}", self.clock())

    def finish(self) -> None:
        """Shows the step under way, if any, as ended now."""
        if self._running is None:
            return
        text, began = self._running
        self._running = None
        seconds = self.clock() - began
        if text.split(" ", 2)[1].upper() not in _SHOWN_STEPS and seconds < _SHOWN_SLOWER_THAN_S:
            return
        duration = f" ({seconds:.1f} s)"
        head = f"  [{self.tag}] "
        room = _LINE_WIDTH - len(head) - len(duration)
        self.progress(head + (text if len(text) <= room else text[: room - 3] + "...") + duration)


def build_image(
    context: Path,
    tag: str,
    *,
    build_args: Mapping[str, str],
    progress: Callable[[str], None],
    verbose: bool = False,
) -> None:
    args = ["build", "--rm", "--force-rm", "--tag", tag, "--file", str(context / "Dockerfile")]
    for name, value in build_args.items():
        args += ["--build-arg", f"{name}={value}"]
    args.append(str(context))
    display = BuildProgress(tag, progress, verbose)
    started = time.monotonic()
    result = docker_cli.run_docker(
        args, timeout=BUILD_TIMEOUT_S, check=False, on_line=display, env={"DOCKER_BUILDKIT": "0"}
    )
    display.finish()
    if result.ok:
        progress(f"built {tag} in {time.monotonic() - started:.1f} s")
    else:
        output = "\n".join("    " + line for line in display.recent)
        raise UserError(
            f"Building image {tag} failed:\n{output}",
            hint="the lines above end the build output; GYM_COMPOSE_BUILD_VERBOSE=1 shows all of it",
        )


def inspect_image(tag: str) -> dict | None:
    """`docker image inspect` of one image, or None when it does not exist locally."""
    result = docker_cli.run_docker(
        ["image", "inspect", tag], timeout=INSPECT_TIMEOUT_S, retries=2, check=False
    )
    if not result.ok:
        if "No such image" in result.stderr or "No such object" in result.stderr:
            return None
        raise docker_cli.DockerCommandError(result)
    return json.loads(result.stdout)[0]
