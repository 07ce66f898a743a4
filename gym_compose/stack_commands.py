"""The stack commands behind the CLI: render, build, up, down, ps, logs.

Each is resolve -> plan -> (build) -> render -> engine, in that order; nothing touches Docker
before the config has loaded and the stack has planned without error.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gym_compose.config import LoadedConfig, load
from gym_compose.config.request import ConfigRequest
from gym_compose.engine.build import build_stack_images
from gym_compose.engine.compose import (
    ensure_volume,
    ComposeProject,
    ServiceState,
    labelled_projects,
    require_compose,
    supports_start_interval,
)
from gym_compose.engine.postmortem import describe_death, indented_log
from gym_compose.errors import UserError
from gym_compose.inference_engines import CACHE_LABEL
from gym_compose.plan import Stack, StackOptions, plan_stack
from gym_compose.render import CollectorRun, RenderOptions, wait_timeout_seconds, write_project

STOP_GRACE_SECONDS = 5
WATCH_INTERVAL_SECONDS = 2.0


@dataclass(frozen=True)
class StackArgs:
    request: ConfigRequest
    options: StackOptions


def say(message: str) -> None:
    """A line on stderr; a terminal that went away (SIGHUP) must not stop a clean-up half-way."""
    try:
        print(message, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


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


def build_and_render(stack: Stack, out_dir: Path, collector: CollectorRun | None = None,
                     pinned: dict[str, str] | None = None) -> tuple[dict[str, str], ComposeProject]:
    images = build_stack_images(stack, progress=say, pinned=pinned)
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
    names = stack_service_names(stack)
    say(f"starting {len(names)} services of project {stack.project!r} ...")
    started = time.monotonic()
    try:
        for volume in stack.volumes.values():
            ensure_volume(volume, f"{CACHE_LABEL}=model")
        project.up(wait_timeout_seconds(stack), services=names)
        say(f"all {len(names)} services healthy in {time.monotonic() - started:.1f}s")
        print_services(project.ps())
    except BaseException:
        down_quietly(project)
        raise


def stack_service_names(stack: Stack) -> list[str]:
    """Every long-running service: the servers, and the sandbox broker when servers lease sandboxes."""
    from gym_compose.sandbox_stack.plan import BROKER_SERVICE

    return [s.name for s in stack.services] + ([BROKER_SERVICE] if stack.sandboxes is not None else [])


def up_command(args: StackArgs, detach: bool) -> None:
    stack = plan_from_request(args)
    refuse_if_running(stack.project)
    _, project = build_and_render(stack, project_dir(stack.project))
    start_servers(stack, project)
    if detach:
        say(f"stack is up; stop it with `gym-compose down -p {stack.project}`")
        return
    attach(project, stack_service_names(stack))


def attach(project: ComposeProject, services: list[str]) -> None:
    """Follow the logs until Ctrl-C (or SIGTERM/SIGHUP) or a server dies, then stop and remove the
    stack. Ctrl-C ends in KeyboardInterrupt (exit 130) once everything is removed."""
    logs = project.follow_logs([], follow=True, tail="0")
    dead: list[ServiceState] = []
    try:
        while not dead:
            time.sleep(WATCH_INTERVAL_SECONDS)
            check = project.check_stack(services)
            if check.empty:
                say("the stack's containers are gone (removed from outside)")
                break
            dead = check.dead
    except KeyboardInterrupt:
        say(f"\nstopping (grace period {STOP_GRACE_SECONDS}s) ...")
        raise
    finally:
        logs.stop(grace_seconds=5)
        for state in dead:
            say(f"error: {describe_death(state)}; last log lines:")
            say("\n".join(indented_log(project, state.service)))
        stop_and_remove(project)
    if dead:
        raise UserError("a server died; the stack was stopped", hint="see the log lines above", exit_code=1)


@contextmanager
def uninterruptible() -> Iterator[None]:
    """A clean-up that a second Ctrl-C (or SIGTERM, SIGHUP) must not leave half-done; every step
    of it has a timeout, so it ends."""
    stopping = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in stopping}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def stop_and_remove(project: ComposeProject) -> None:
    """Stop with a grace period, name what had to be killed, remove everything."""
    with uninterruptible():
        try:
            project.stop(STOP_GRACE_SECONDS)
            killed = [s.service for s in project.ps() if s.exit_code == 137]
            if killed:
                say(f"killed after {STOP_GRACE_SECONDS}s grace: {', '.join(killed)}")
        except UserError as error:
            say(f"warning: could not stop the stack gracefully: {error}")
        down_quietly(project)
    say("gym-compose finished")


def existing_project(project: str) -> ComposeProject:
    compose_file = project_dir(project) / "compose.yaml"
    return ComposeProject(project, compose_file if compose_file.is_file() else None)


def forget_project(project_name: str) -> None:
    """The rendered project and its secret files live only as long as the stack they describe."""
    shutil.rmtree(project_dir(project_name), ignore_errors=True)


def down_command(project_name: str) -> None:
    project = existing_project(project_name)
    removed = project.down()
    forget_project(project_name)
    if removed:
        say(f"removed project {project_name!r} ({removed.count()}); results folders are kept")
    else:
        say(f"project {project_name!r} had nothing to remove")


def down_all_command() -> None:
    """The reaper: every project that has a container labelled by gym-compose, whatever its name."""
    names = labelled_projects()
    if not names:
        say("no gym-compose project on this engine")
    failed = []
    for name in names:
        try:
            down_command(name)
        except UserError as error:
            say(f"error: {error}")
            failed.append(name)
    if failed:
        raise UserError(f"not every project was removed: {', '.join(failed)}", hint="see the errors above")


def ps_command(project_name: str) -> None:
    states = existing_project(project_name).ps()
    if not states:
        say(f"project {project_name!r} has no containers")
        return
    print_services(states)
    from gym_compose.sandbox_stack.commands import print_sandboxes

    print_sandboxes(project_name)


def logs_command(project_name: str, services: list[str], follow: bool, tail: str | None) -> int:
    logs = existing_project(project_name).follow_logs(services, follow, tail)
    try:
        code = logs.wait()
    except KeyboardInterrupt:
        logs.stop(grace_seconds=5)
        return 130
    if code:
        logs.check()
    return code or 0


def print_services(states: list[ServiceState]) -> None:
    rows = [("SERVICE", "STATE", "HEALTH", "PUBLISHED")]
    rows += [(s.service, s.state, s.health or "-", ", ".join(s.published) or "-") for s in states]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


def down_quietly(project: ComposeProject) -> None:
    try:
        with uninterruptible():
            project.down()
    except Exception as error:  # the original failure matters more than a failed clean-up
        say(f"warning: could not remove the stack: {error}; run `gym-compose down -p {project.name}`")
    else:
        forget_project(project.name)
