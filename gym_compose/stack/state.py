"""Where the rendered project of each running stack lives, whatever the working directory."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from gym_compose.engine.compose import ComposeProject
from gym_compose.render import COMPOSE_FILE

STATE_DIR_ENV = "GYM_COMPOSE_STATE_DIR"


def state_dir() -> Path:
    if os.environ.get(STATE_DIR_ENV):
        return Path(os.environ[STATE_DIR_ENV])
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "gym-compose"


def project_dir(project: str) -> Path:
    return state_dir() / "projects" / project


def existing_project(project: str) -> ComposeProject:
    """The project as `up` rendered it (its compose file, when still there)."""
    compose_file = project_dir(project) / COMPOSE_FILE
    return ComposeProject(project, compose_file if compose_file.is_file() else None)


def forget_project(project: str) -> None:
    """The rendered project and its secret files live only as long as the stack they describe."""
    shutil.rmtree(project_dir(project), ignore_errors=True)
