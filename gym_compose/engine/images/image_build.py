"""`docker build` (classic builder) with a compact progress view, and image inspection."""

from __future__ import annotations

import json
import re
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
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


# Images the engine was found to have by one `docker image inspect` of many (`inspected_together`),
# answered from here while that block runs. Only images found: a missing one is asked again (it may
# be built or loaded meanwhile, by this process or another), unless the caller asks `known_missing`.
_found_together: dict[str, dict] = {}
_missing_together: set[str] = set()


def known_missing(tag: str) -> bool:
    """Whether the one call of the enclosing `inspected_together` found `tag` missing: for an image
    this process never builds (the public Python image), whose answer need not be asked again."""
    return tag in _missing_together


def inspect_image(tag: str) -> dict | None:
    """`docker image inspect` of one image, or None when it does not exist locally."""
    known = _found_together.get(tag)
    if known is not None:
        return known
    result = docker_cli.run_docker(
        ["image", "inspect", tag], timeout=INSPECT_TIMEOUT_S, retries=2, check=False
    )
    if not result.ok:
        if "No such image" in result.stderr or "No such object" in result.stderr:
            return None
        raise docker_cli.DockerCommandError(result)
    return json.loads(result.stdout)[0]


def inspect_images(refs: Sequence[str]) -> dict[str, dict | None]:
    """`docker image inspect` of several images in one call: each one's answer, None for those the
    engine does not have (the engine answers the ones it has, names the others on stderr)."""
    refs = list(dict.fromkeys(refs))
    if len(refs) <= 1:
        return {ref: inspect_image(ref) for ref in refs}
    result = docker_cli.run_docker(["image", "inspect", *refs], timeout=INSPECT_TIMEOUT_S, retries=2, check=False)
    named = result.stderr.lower()
    missing = [ref for ref in refs
               if f"no such image: {ref.lower()}" in named or f"no such object: {ref.lower()}" in named]
    if not result.ok and not missing:
        raise docker_cli.DockerCommandError(result)
    present = [ref for ref in refs if ref not in missing]
    try:
        answers = json.loads(result.stdout or "[]")
    except json.JSONDecodeError:
        answers = None
    # The answers come in the order asked; when they cannot be paired with their names (a
    # different count, a tag not among the image's), each image is asked alone.
    if not isinstance(answers, list) or len(answers) != len(present) or not all(
            _answers_to(ref, image) for ref, image in zip(present, answers, strict=True)):
        return {ref: inspect_image(ref) for ref in refs}
    paired = dict(zip(present, answers, strict=True))
    return {ref: paired.get(ref) for ref in refs}


def _answers_to(ref: str, image: dict) -> bool:
    if ref.startswith("sha256:"):
        return image.get("Id") == ref
    if "@" in ref or ":" not in ref.rsplit("/", 1)[-1]:
        return True  # by digest, or an implied :latest: nothing simple to compare
    tags = image.get("RepoTags") or []
    return ref in tags or f"docker.io/{ref}" in tags or ref.removeprefix("docker.io/") in tags


@contextmanager
def inspected_together(refs: Sequence[str]) -> Iterator[dict[str, dict | None]]:
    """Asks the engine about all `refs` in one call; within the block `inspect_image` answers from
    it for the images found, and asks as before for any other (a missing one may be built meanwhile)."""
    answers = inspect_images(refs)
    found = {ref: image for ref, image in answers.items() if image is not None}
    missing = {ref for ref, image in answers.items() if image is None}
    _found_together.update(found)
    _missing_together.update(missing)
    try:
        yield answers
    finally:
        for ref in found:
            _found_together.pop(ref, None)
        _missing_together.difference_update(missing)
