"""Where the rendered project of each running stack lives, whatever the working directory."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from gym_compose.contract import INSTANCE_LABEL
from gym_compose.engine.compose import ComposeProject
from gym_compose.engine.target import DeployedStack
from gym_compose.render import COMPOSE_FILE

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
    target = target_file.read_text().strip() if target_file.is_file() else "compose"
    return deployed_stack(project, target)


def deployed_stack(project: str, target: str) -> DeployedStack:
    """`project` on `target`, with the files `up` rendered for it when they are there."""
    if target == "swarm":
        from gym_compose.engine.swarm import SwarmStack
        from gym_compose.render_swarm import STACK_FILE

        stack_file = project_dir(project) / STACK_FILE
        return SwarmStack(project, stack_file if stack_file.is_file() else None)
    compose_file = project_dir(project) / COMPOSE_FILE
    return ComposeProject(project, compose_file if compose_file.is_file() else None)


def rendered_instances(project: str) -> dict[str, str]:
    """Service -> instance name, from the instance labels of the project `up` rendered (compose or
    swarm: the same service labels); empty when its files are gone."""
    import yaml

    from gym_compose.render_swarm import STACK_FILE

    for name in (COMPOSE_FILE, STACK_FILE):
        path = project_dir(project) / name
        if path.is_file():
            loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
            services = (yaml.load(path.read_text(encoding="utf-8"), Loader=loader) or {}).get("services") or {}
            return {service: str(spec["labels"][INSTANCE_LABEL]) for service, spec in services.items()
                    if isinstance(spec, dict) and INSTANCE_LABEL in (spec.get("labels") or {})}
    return {}


def remember_target(project: str, target: str) -> None:
    project_dir(project).mkdir(parents=True, exist_ok=True)
    (project_dir(project) / TARGET_FILE).write_text(target + "\n", encoding="utf-8")


def forget_project(project: str) -> None:
    """The rendered project and its secret files live only as long as the stack they describe."""
    shutil.rmtree(project_dir(project), ignore_errors=True)
