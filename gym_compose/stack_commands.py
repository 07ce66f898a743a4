"""The stack commands behind the CLI: render, build, up, down, ps, logs.

Each is resolve -> plan -> (build) -> render -> engine, in that order; nothing touches Docker
before the config has loaded and the stack has planned without error.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from gym_compose.config import LoadedConfig, load
from gym_compose.config.request import ConfigRequest
from gym_compose.engine.build import build_stack_images
from gym_compose.engine.compose import (
    ComposeProject,
    ServiceState,
    StackNotHealthy,
    require_compose,
    supports_start_interval,
)
from gym_compose.errors import UserError
from gym_compose.plan import Stack, StackOptions, plan_stack
from gym_compose.render import CollectorRun, wait_timeout_seconds, write_project

STATE_DIR = Path(".gym-compose")
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
    options = replace(args.options, healthcheck_start_interval=supports_start_interval())
    return loaded, plan_stack(loaded.data, loaded.search_roots, options)


def plan_from_request(args: StackArgs) -> Stack:
    return load_and_plan(args)[1]


def project_dir(project: str) -> Path:
    return STATE_DIR / project


def render_command(args: StackArgs, output: Path) -> Path:
    stack = plan_from_request(args)
    images = build_stack_images(stack, progress=say)
    compose_file = write_project(stack, images, output)
    say(f"rendered {compose_file}; run it with: docker compose -f {compose_file} up --wait")
    return compose_file


def build_command(args: StackArgs) -> dict[str, str]:
    stack = plan_from_request(args)
    images = build_stack_images(stack, progress=say)
    for service in stack.services:
        print(f"{service.name:40} {images[service.name]}")
    return images


def start_stack(args: StackArgs, collector: CollectorRun | None = None) -> tuple[Stack, ComposeProject]:
    """Plan, build, render and start the stack; returns once every server is healthy."""
    stack = plan_from_request(args)
    require_compose()
    images = build_stack_images(stack, progress=say)
    compose_file = write_project(stack, images, project_dir(stack.project), collector)
    project = ComposeProject(stack.project, compose_file)
    say(f"starting {len(stack.services)} services of project {stack.project!r} ...")
    started = time.monotonic()
    try:
        project.up(wait_timeout_seconds(stack))
        say(f"all {len(stack.services)} services healthy in {time.monotonic() - started:.1f}s")
        print_services(project.ps())
    except (StackNotHealthy, KeyboardInterrupt):
        down_quietly(project)
        raise
    return stack, project


def up_command(args: StackArgs, detach: bool) -> None:
    stack, project = start_stack(args)
    if detach:
        say(f"stack is up; stop it with `gym-compose down -p {stack.project}`")
        return
    attach(project)


def attach(project: ComposeProject) -> None:
    """Follow the logs until Ctrl-C (or SIGTERM) or a container dies, then stop and remove the stack."""
    signal.signal(signal.SIGTERM, _interrupt)
    logs = subprocess.Popen(project.logs_command([], follow=True, tail="0"))
    died: list[ServiceState] = []
    try:
        while not died:
            time.sleep(WATCH_INTERVAL_SECONDS)
            died = [s for s in project.ps() if s.state != "running"]
    except KeyboardInterrupt:
        say(f"\nstopping (grace period {STOP_GRACE_SECONDS}s) ...")
    finally:
        logs.send_signal(signal.SIGINT)
        try:
            logs.wait(timeout=5)
        except subprocess.TimeoutExpired:
            logs.kill()
    if died:
        for state in died:
            say(f"error: service {state.service} stopped ({state.state}, exit code {state.exit_code})")
            say(project.logs_tail(state.service))
    stop_and_remove(project)
    if died:
        raise UserError("a service died; the stack was stopped", hint="see the log lines above", exit_code=1)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def stop_and_remove(project: ComposeProject) -> None:
    project.stop(STOP_GRACE_SECONDS)
    killed = [s.service for s in project.ps() if s.exit_code == 137]
    if killed:
        say(f"killed after {STOP_GRACE_SECONDS}s grace: {', '.join(killed)}")
    project.down()
    forget_secrets(project.name)
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


def ps_command(project_name: str) -> None:
    states = existing_project(project_name).ps()
    if not states:
        say(f"project {project_name!r} has no containers")
        return
    print_services(states)


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
        forget_secrets(project.name)
    except Exception as error:  # the original failure matters more than a failed clean-up
        say(f"warning: could not remove the stack: {error}")
