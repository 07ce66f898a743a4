"""Where the rendered project of each running stack lives, whatever the working directory, and
which command owns a project while it creates (or runs attached) its stack."""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import orjson

from gym_compose.contract import INSTANCE_LABEL
from gym_compose.engine.targets.deployed_stack import DeployedStack
from gym_compose.engine.targets.registry import DEFAULT_TARGET, target_named
from gym_compose.errors import UserError

TARGET_FILE = "target"  # which target `up` deployed the project on, for down/ps/logs
OWNER_LOCK_SUFFIX = ".owner.lock"

STATE_DIR_ENV = "GYM_COMPOSE_STATE_DIR"


def state_dir() -> Path:
    if os.environ.get(STATE_DIR_ENV):
        return Path(os.environ[STATE_DIR_ENV])
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "gym-compose"


def project_dir(project: str) -> Path:
    return state_dir() / "projects" / project


def existing_project(project: str) -> DeployedStack:
    """The project as `up` rendered it (its compose file, when still there), on the target `up`
    deployed it on (compose unless it recorded another)."""
    return deployed_stack(project, recorded_target(project))


def recorded_target(project: str) -> str:
    """The target `up` deployed the project on (compose unless it recorded another)."""
    target_file = project_dir(project) / TARGET_FILE
    return target_file.read_text().strip() if target_file.is_file() else DEFAULT_TARGET


def deployed_stack(project: str, target: str) -> DeployedStack:
    """`project` on `target`, with the file `up` rendered for it when it is there."""
    row = target_named(target)
    rendered = project_dir(project) / row.rendered_file
    return row.opened(project, rendered if rendered.is_file() else None)


def rendered_instances(project: str) -> dict[str, str]:
    """Service -> instance name, from the instance labels of the file `up` rendered for the project
    (the compose and swarm files label their services alike); empty when it is gone."""
    import yaml

    path = project_dir(project) / target_named(recorded_target(project)).rendered_file
    if not path.is_file():
        return {}
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    services = (yaml.load(path.read_text(encoding="utf-8"), Loader=loader) or {}).get("services") or {}
    return {service: str(spec["labels"][INSTANCE_LABEL]) for service, spec in services.items()
            if isinstance(spec, dict) and INSTANCE_LABEL in (spec.get("labels") or {})}


def remember_target(project: str, target: str) -> None:
    project_dir(project).mkdir(parents=True, exist_ok=True)
    (project_dir(project) / TARGET_FILE).write_text(target + "\n", encoding="utf-8")


def forget_project(project: str) -> None:
    """The rendered project and its secret files live only as long as the stack they describe."""
    shutil.rmtree(project_dir(project), ignore_errors=True)


def owner_lock_path(project: str) -> Path:
    """Beside the project's folder, not in it: `down` (or a failed start) removes the folder while
    the owner may still be running, and a new lock file there would let a second owner in."""
    return state_dir() / "projects" / f"{project}{OWNER_LOCK_SUFFIX}"


class ProjectBusy(UserError):
    def __init__(self, project: str, holder: dict | None):
        who = (f"pid {holder.get('pid')} (`{holder.get('command')}`, since {holder.get('since')})"
               if holder else "another gym-compose command")
        super().__init__(
            f"project {project!r} is being started or run by {who}",
            hint="wait for it (once its stack is up, `gym-compose eval run --no-serve -p "
            f"{project}` collects against it), stop it with Ctrl-C in its terminal, or start another "
            "stack with -p NAME and --head-port PORT",
        )


@contextmanager
def owning_project(project: str) -> Iterator[None]:
    """One owner per project name: an exclusive `flock`, taken before anything of the stack is
    created and held until the block ends (`up -d`: until the stack is healthy; attached `up`,
    `eval run`: for their whole life). A second command is refused at once, before it creates
    or removes anything. The kernel drops the lock when its holder dies, however it dies, and
    the descriptor is not inherited by the docker processes the owner starts."""
    path = owner_lock_path(project)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ProjectBusy(project, _read_holder(fd)) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, orjson.dumps({"pid": os.getpid(), "command": _command_words(),
                                    "since": datetime.now(timezone.utc).isoformat(timespec="seconds")}), 0)
        yield
    finally:
        os.close(fd)  # the only descriptor: closing it drops the lock


def _command_words() -> str:
    """`gym-compose up`, `gym-compose eval run`: the command without its arguments (they may hold keys)."""
    words = sys.argv[1:3] if sys.argv[1:2] == ["eval"] else sys.argv[1:2]
    return " ".join(["gym-compose", *words])


def _read_holder(fd: int) -> dict | None:
    try:
        data = os.pread(fd, 4096, 0)
        record = orjson.loads(data) if data.strip() else None
    except (OSError, orjson.JSONDecodeError):  # the holder has not written it yet
        return None
    return record if isinstance(record, dict) else None
