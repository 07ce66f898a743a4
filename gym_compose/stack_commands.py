"""The stack commands behind the CLI: render, build, up, down, ps, logs.

Each is resolve -> plan -> (build) -> render -> engine, in that order; nothing touches Docker
before the config has loaded and the stack has planned without error.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gym_compose.config import LoadedConfig, load
from gym_compose.config.request import ConfigRequest
from gym_compose.engine.build import build_stack_images
from gym_compose.engine.compose import (
    ComposeProject,
    ServiceState,
    labelled_projects,
    require_compose,
    supports_start_interval,
)
from gym_compose.errors import UserError
from gym_compose.plan import Stack, StackOptions, plan_stack
from gym_compose.render import CollectorRun, RenderOptions, wait_timeout_seconds, write_project

STOP_GRACE_SECONDS = 5
WATCH_INTERVAL_SECONDS = 2.0


@dataclass(frozen=True)
class StackArgs:
    request: ConfigRequest
    options: StackOptions


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def load_and_plan(args: StackArgs) -> tuple[LoadedConfig, Stack]:
    loaded = load(args.request)
    for warning in loaded.warnings:
        say(warning)
    stack = plan_stack(loaded.data, loaded.search_roots, args.options)
    for notice in stack.sandboxes.notices if stack.sandboxes else []:
        say(notice)
    return loaded, stack


def plan_from_request(args: StackArgs) -> Stack:
    return load_and_plan(args)[1]


def state_dir() -> Path:
    """Where the rendered project of each running stack lives, whatever the working directory."""
    if os.environ.get("GYM_COMPOSE_STATE_DIR"):
        return Path(os.environ["GYM_COMPOSE_STATE_DIR"])
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "gym-compose"


def project_dir(project: str) -> Path:
    return state_dir() / "projects" / project


def render_options() -> RenderOptions:
    """What the engine at hand supports (asked once the config and the plan are known to be good)."""
    from gym_compose.engine.sandboxes import docker_socket

    return RenderOptions(healthcheck_start_interval=supports_start_interval(), docker_socket=docker_socket())


def build_and_render(stack: Stack, out_dir: Path, collector: CollectorRun | None = None
                     ) -> tuple[dict[str, str], ComposeProject]:
    images = build_stack_images(stack, progress=say)
    compose_file = write_project(stack, images, out_dir, collector, render_options())
    return images, ComposeProject(stack.project, compose_file)


def render_command(args: StackArgs, output: Path) -> Path:
    stack = plan_from_request(args)
    _, project = build_and_render(stack, output)
    say(f"rendered {project.compose_file}; run it with: docker compose -f {project.compose_file} up --wait")
    return project.compose_file


def build_command(args: StackArgs) -> dict[str, str]:
    stack = plan_from_request(args)
    images = build_stack_images(stack, progress=say)
    for service in stack.services:
        print(f"{service.name:40} {images[service.name]}")
    return images


def project_states(project: ComposeProject) -> list[ServiceState]:
    """`compose ps`, explaining a missing Compose v2 instead of showing its raw failure."""
    try:
        return project.ps()
    except UserError:
        require_compose()
        raise


def refuse_if_running(project_name: str) -> None:
    """Two commands must not drive one project: the second would recreate the first's containers."""
    if project_states(ComposeProject(project_name)):
        raise UserError(
            f"project {project_name!r} is already running",
            hint=f"stop it with `gym-compose down -p {project_name}`, collect against it with "
            "`gym-compose eval run --no-serve`, or start another stack with -p NAME and --head-port PORT",
        )


def start_servers(stack: Stack, project: ComposeProject) -> None:
    """Start every server and wait until all are healthy; any failure removes the stack again."""
    names = [s.name for s in stack.services] + stack_extra_services(stack)
    say(f"starting {len(names)} services of project {stack.project!r} ...")
    started = time.monotonic()
    try:
        project.up(wait_timeout_seconds(stack), services=names)
        say(f"all {len(names)} services healthy in {time.monotonic() - started:.1f}s")
        print_services(project.ps())
    except BaseException:
        down_quietly(project)
        raise


def stack_extra_services(stack: Stack) -> list[str]:
    """Services that serve no config instance: the sandbox broker, when servers lease sandboxes."""
    from gym_compose.sandbox_stack.plan import BROKER_SERVICE

    return [BROKER_SERVICE] if stack.sandboxes is not None else []


def up_command(args: StackArgs, detach: bool) -> None:
    stack = plan_from_request(args)
    refuse_if_running(stack.project)
    _, project = build_and_render(stack, project_dir(stack.project))
    start_servers(stack, project)
    if detach:
        say(f"stack is up; stop it with `gym-compose down -p {stack.project}`")
        return
    attach(project)


def attach(project: ComposeProject) -> None:
    """Follow the logs until Ctrl-C (or SIGTERM) or a container dies, then stop and remove the stack."""
    logs = subprocess.Popen(project.logs_command([], follow=True, tail="0"))
    died: list[ServiceState] = []
    try:
        while not died:
            time.sleep(WATCH_INTERVAL_SECONDS)
            states = project.ps()
            died = [s for s in states if s.state != "running"]
            if not states:
                say("the stack's containers are gone (removed from outside)")
                break
    except KeyboardInterrupt:
        say(f"\nstopping (grace period {STOP_GRACE_SECONDS}s) ...")
    finally:
        logs.send_signal(signal.SIGINT)
        try:
            logs.wait(timeout=5)
        except subprocess.TimeoutExpired:
            logs.kill()
        for state in died:
            say(f"error: service {state.service} stopped ({state.state}, exit code {state.exit_code})")
            say(project.logs_tail(state.service))
        stop_and_remove(project)
    if died:
        raise UserError("a service died; the stack was stopped", hint="see the log lines above", exit_code=1)


def stop_and_remove(project: ComposeProject) -> None:
    """Stop with a grace period, name what had to be killed, remove everything; a second Ctrl-C
    during this is ignored so that nothing is left half-removed."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        try:
            project.stop(STOP_GRACE_SECONDS)
            killed = [s.service for s in project.ps() if s.exit_code == 137]
            if killed:
                say(f"killed after {STOP_GRACE_SECONDS}s grace: {', '.join(killed)}")
        except UserError as error:
            say(f"warning: could not stop the stack gracefully: {error}")
        down_quietly(project)
    finally:
        signal.signal(signal.SIGINT, previous)
    say("gym-compose finished")


def existing_project(project: str) -> ComposeProject:
    compose_file = project_dir(project) / "compose.yaml"
    return ComposeProject(project, compose_file if compose_file.is_file() else None)


def forget_secrets(project_name: str) -> None:
    """Secret files live only as long as the stack that mounts them."""
    shutil.rmtree(project_dir(project_name) / "secrets", ignore_errors=True)


def down_command(project_name: str) -> None:
    project = existing_project(project_name)
    project.down()
    forget_secrets(project_name)
    say(f"removed project {project_name!r} (containers, networks, volumes); results folders are kept")


def down_all_command() -> None:
    """The reaper: every project that has a container labelled by gym-compose, whatever its name."""
    names = labelled_projects()
    if not names:
        say("no gym-compose project on this engine")
    for name in names:
        down_command(name)


def ps_command(project_name: str) -> None:
    states = existing_project(project_name).ps()
    if not states:
        say(f"project {project_name!r} has no containers")
        return
    print_services(states)
    from gym_compose.sandbox_stack.commands import print_sandboxes

    print_sandboxes(project_name)


def logs_command(project_name: str, services: list[str], follow: bool, tail: str | None) -> int:
    argv = existing_project(project_name).logs_command(services, follow, tail)
    try:
        return subprocess.call(argv)
    except KeyboardInterrupt:
        return 130


def print_services(states: list[ServiceState]) -> None:
    rows = [("SERVICE", "STATE", "HEALTH", "PUBLISHED")]
    rows += [(s.service, s.state, s.health or "-", ", ".join(s.published) or "-") for s in states]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


def down_quietly(project: ComposeProject) -> None:
    try:
        project.down()
    except Exception as error:  # the original failure matters more than a failed clean-up
        say(f"warning: could not remove the stack: {error}; run `gym-compose down -p {project.name}`")
    else:
        forget_secrets(project.name)
