"""The deployment targets, one row each: how a plan is rendered for it, how its deployed stack is
opened, and what it can do.

Adding a target is one row here, its renderer (gym_compose/render/) and its `DeployedStack`
(a module of this folder); nothing else names targets. `--target NAME` picks a row, and the
options that only some targets take (`--registry`, `--node-engine`) are checked against it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gym_compose.errors import UserError

if TYPE_CHECKING:
    from gym_compose.engine.targets.deployed_stack import DeployedStack
    from gym_compose.plan.model import CollectorRun, Stack
    from gym_compose.render.compose import RenderOptions

REGISTRY_NAME = re.compile(r"[A-Za-z0-9.:-]+(/[a-z0-9._-]+)*")
ENGINE_ADDRESS = re.compile(r"(ssh|tcp|unix)://\S+")

# stack, images (key -> image), output folder, the collection run (or None) -> the rendered file
Render = Callable[["Stack", dict[str, str], Path, "CollectorRun | None"], Path]


@dataclass(frozen=True)
class TargetOptions:
    """The target a command deploys on, with the options only some targets take."""

    name: str = "compose"
    registry: str | None = None  # HOST/PREFIX the images are pushed to (targets that take_registry)
    node_engines: tuple[str, ...] = ()  # engines the images are copied into (targets that take node_engines)


@dataclass(frozen=True)
class Target:
    name: str
    render: Render
    rendered_file: str  # its name in the project folder (stack/state.py)
    how_to_run: str  # after `render`: ..., {file}, {folder}, {project} filled in
    takes_registry: bool = False  # --registry: the images are pushed there, the nodes pull them
    takes_node_engines: bool = False  # --node-engine: the images are copied into each node's engine
    # Only for targets that run: the stack of a project (with the file `up` rendered, when there),
    # whether any of the project is running on this engine, and whether that look also sees a
    # collector left running (else `eval run` looks for one apart).
    open: Callable[[str, Path | None], DeployedStack] | None = None  # None: rendered only (render_only)
    running: Callable[[str], bool] | None = None
    running_sees_collector: bool = True
    render_only: tuple[str, str] | None = None  # why `up`/`eval run` refuse it: message, hint

    @property
    def runs(self) -> bool:
        """gym-compose deploys and drives it (else it is rendered only, applied by its own tool)."""
        return self.open is not None

    def opened(self, project: str, rendered: Path | None = None) -> DeployedStack:
        if self.open is None:
            raise self.not_run()
        return self.open(project, rendered)

    def is_running(self, project: str) -> bool:
        if self.running is None:
            raise self.not_run()
        return self.running(project)

    def not_run(self) -> UserError:
        message, hint = self.render_only or (f"{self.name} stacks are not run by gym-compose", "see docs/deploy.md")
        return UserError(message, hint=hint)


def render_options() -> RenderOptions:
    """What the engine at hand supports (asked once the config and the plan are known to be good)."""
    from gym_compose.engine.targets.sandbox_containers import docker_socket
    from gym_compose.render.compose import RenderOptions

    return RenderOptions(docker_socket=docker_socket())


def _render_compose(stack: Stack, images: dict[str, str], out_dir: Path, collector: CollectorRun | None) -> Path:
    from gym_compose.render.compose import write_project

    return write_project(stack, images, out_dir, collector, render_options())


def _open_compose(project: str, rendered: Path | None) -> DeployedStack:
    from gym_compose.engine.targets.compose_project import ComposeProject

    return ComposeProject(project, rendered)


def _compose_running(project: str) -> bool:
    from gym_compose.engine.targets.compose_project import ComposeProject

    return bool(ComposeProject(project).quick_states())  # one `docker ps`, not `compose ps`


def _render_swarm(stack: Stack, images: dict[str, str], out_dir: Path, collector: CollectorRun | None) -> Path:
    from gym_compose.render.swarm import write_swarm_project

    return write_swarm_project(stack, images, out_dir, collector, render_options())


def _open_swarm(project: str, rendered: Path | None) -> DeployedStack:
    from gym_compose.engine.targets.swarm_stack import SwarmStack

    return SwarmStack(project, rendered)


def _swarm_running(project: str) -> bool:
    from gym_compose.engine.targets.swarm_stack import SwarmStack, require_swarm

    require_swarm()
    return _compose_running(project) or bool(SwarmStack(project).ps())


def _render_kubernetes(stack: Stack, images: dict[str, str], out_dir: Path, collector: CollectorRun | None) -> Path:
    from gym_compose.render.kubernetes import write_manifests

    return write_manifests(stack, images, out_dir)


TARGETS: dict[str, Target] = {
    target.name: target for target in (
        Target("compose", _render_compose, "compose.yaml", "run it with: docker compose -f {file} up --wait",
               open=_open_compose, running=_compose_running),
        Target("swarm", _render_swarm, "stack.yaml", "deploy it with: docker stack deploy -c {file} {project}",
               takes_registry=True, takes_node_engines=True, open=_open_swarm, running=_swarm_running,
               running_sees_collector=False),
        Target("kubernetes", _render_kubernetes, "stack.yaml", "apply it with: kubectl apply -n NAMESPACE -f {folder}",
               takes_registry=True,
               render_only=("Kubernetes stacks are rendered, not run, by gym-compose",
                            "render the manifests with `gym-compose render --target kubernetes -o DIR`, then "
                            "`kubectl apply -n NAMESPACE -f DIR` (docs/deploy.md)")),
    )
}
DEFAULT_TARGET = "compose"


def target_named(name: str) -> Target:
    if name not in TARGETS:
        raise UserError(f"unknown --target {name!r}", hint=f"one of: {', '.join(TARGETS)}")
    return TARGETS[name]


def target_options(name: str, registry: str | None, node_engines: tuple[str, ...]) -> TargetOptions:
    """The command line's target options, checked against what the target takes."""
    target = target_named(name)
    takers = " or ".join(t.name for t in TARGETS.values() if t.takes_registry)
    if registry is not None and (not target.takes_registry or not REGISTRY_NAME.fullmatch(registry)):
        raise UserError(f"--registry {registry!r}: " + (f"only for --target {takers}" if not target.takes_registry
                                                         else "expected HOST[:PORT]/PREFIX"),
                        hint="e.g. --target swarm --registry registry.example:5000/gym")
    copiers = " or ".join(t.name for t in TARGETS.values() if t.takes_node_engines)
    for engine in node_engines:
        if not target.takes_node_engines or registry is not None or not ENGINE_ADDRESS.fullmatch(engine):
            raise UserError(f"--node-engine {engine!r}: " + (
                f"only for --target {copiers}" if not target.takes_node_engines else
                "not with --registry (the nodes pull from it)" if registry is not None else
                "expected a Docker engine address: ssh://USER@NODE, tcp://NODE:PORT or unix:///PATH"),
                hint="e.g. --target swarm --node-engine ssh://admin@node2 --node-engine ssh://admin@node3")
    return TargetOptions(name, registry.rstrip("/") if registry else None, node_engines)
