"""An image made by one container and one commit: `docker create` from the parent, `docker cp` of
folders into it, `docker start -a` of a shell script (or nothing), `docker commit --change ...`.

The classic builder commits a container for every Dockerfile step, metadata ones (ENV, USER,
WORKDIR, CMD, LABEL) included: 2-14 s each on the shared fuse-overlayfs engine here. The whole
recipe is one container and one commit here, and the metadata rides on the commit. The folder is
copied in (not bind-mounted), so a remote engine works as with `docker build`; the script removes
it again, so it leaves nothing in the layer.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

from gym_compose.engine import docker_cli
from gym_compose.engine.images.image_build import BUILD_TIMEOUT_S, inspect_image
from gym_compose.errors import UserError

STAGING = "/tmp/gym-compose-build"  # where the folder lands in the container; the script removes it
SHORT_TIMEOUT_S = 120
COPY_TIMEOUT_S = 600
COMMIT_TIMEOUT_S = 600


def commit_image(parent: str, tag: str, *, copies: Sequence[tuple[Path, str]], changes: Sequence[str],
                 progress: Callable[[str], None], script: Sequence[str] = (), verbose: bool = False) -> None:
    """A container of `parent` gets each host folder's content copied to its path (`copies`), runs
    `script` (a command, as root; none: nothing runs) and is committed as `tag` with the
    Dockerfile-style `changes`. One progress line per step with its duration; on failure the
    script's last lines."""
    name = f"gym-compose-build-{uuid.uuid4().hex[:12]}"
    head = f"  [{tag}] "
    recent: deque[str] = deque(maxlen=30)

    def on_line(line: str) -> None:
        recent.append(line)
        if verbose:
            progress(head + line)

    def timed(text: str, began: float) -> None:
        progress(f"{head}{text} ({time.monotonic() - began:.1f} s)")

    started = time.monotonic()
    if script:  # the container ran the script as root: the image keeps the parent's user and command
        changes = [*changes, *_parent_defaults(parent, {change.split()[0].upper() for change in changes})]
    try:
        create = ["create", "--name", name]
        if script:
            create += ["--user", "0", parent, *script]
        else:
            create.append(parent)
        docker_cli.run_docker(create, timeout=SHORT_TIMEOUT_S)
        for folder, target in copies:
            step = time.monotonic()
            docker_cli.run_docker(["cp", f"{folder}/.", f"{name}:{target}"], timeout=COPY_TIMEOUT_S)
            count = sum(1 for path in folder.rglob("*") if not path.is_dir())
            timed(f"copy {count} files to {target}", step)
        if script:
            step = time.monotonic()
            result = docker_cli.run_docker(["start", "--attach", name], timeout=BUILD_TIMEOUT_S, check=False,
                                           on_line=on_line)
            timed("run " + " ".join(script), step)
            if not result.ok:
                output = "\n".join("    " + line for line in recent)
                raise UserError(f"Building image {tag} failed (`{' '.join(script)}` exited {result.returncode}):"
                                f"\n{output}",
                                hint="the lines above end its output; GYM_COMPOSE_BUILD_VERBOSE=1 shows all of it")
        step = time.monotonic()
        commit = ["commit"]
        for change in changes:
            commit += ["--change", change]
        docker_cli.run_docker([*commit, name, tag], timeout=COMMIT_TIMEOUT_S)
        timed(f"commit with {', '.join(sorted({change.split()[0] for change in changes}))}", step)
    finally:
        docker_cli.run_docker(["rm", "--force", name], timeout=SHORT_TIMEOUT_S, check=False)
    progress(f"built {tag} in {time.monotonic() - started:.1f} s")


def read_changes(path: Path, **values: str) -> list[str]:
    """The `--change` lines of a `.changes` file (comments and blank lines dropped), with each
    `${NAME}` replaced by values[NAME]."""
    lines = [line.strip() for line in path.read_text().splitlines()]
    changes = [line for line in lines if line and not line.startswith("#")]
    for name, value in values.items():
        changes = [change.replace("${" + name + "}", value) for change in changes]
    return changes


def _parent_defaults(image: str, changed: set[str]) -> list[str]:
    """USER and CMD changes that put back the parent's (a commit takes the container's: root and the
    script). A parent without a command has none to put back (`CMD []` does not clear one)."""
    found = inspect_image(image)
    if found is None:
        raise UserError(f"Image {image} does not exist.")
    config = found.get("Config") or {}
    defaults = {"USER": config.get("User") or "root"}
    if config.get("Cmd"):
        defaults["CMD"] = json.dumps(config["Cmd"])
    return [f"{name} {value}" for name, value in defaults.items() if name not in changed]
