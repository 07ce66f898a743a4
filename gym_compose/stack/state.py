"""Where the rendered project of each running stack lives, whatever the working directory."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from gym_compose.engine.targets.deployed_stack import DeployedStack
from gym_compose.engine.targets.registry import DEFAULT_TARGET, target_named

TARGET_FILE = "target"  # which target `up` deployed the project on, for down/ps/logs

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
    target_file = project_dir(project) / TARGET_FILE
    target = target_file.read_text().strip() if target_file.is_file() else DEFAULT_TARGET
    return deployed_stack(project, target)


def deployed_stack(project: str, target: str) -> DeployedStack:
    """`project` on `target`, with the file `up` rendered for it when it is there."""
    row = target_named(target)
    rendered = project_dir(project) / row.rendered_file
    return row.opened(project, rendered if rendered.is_file() else None)


def remember_target(project: str, target: str) -> None:
    project_dir(project).mkdir(parents=True, exist_ok=True)
    (project_dir(project) / TARGET_FILE).write_text(target + "\n", encoding="utf-8")


def forget_project(project: str) -> None:
    """The rendered project and its secret files live only as long as the stack they describe."""
    shutil.rmtree(project_dir(project), ignore_errors=True)
