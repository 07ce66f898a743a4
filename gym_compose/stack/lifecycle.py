"""A stack's life: resolve -> plan -> build -> render -> start and wait; the commands that drive it.

`render`, `build`, `up`, `down` (and `down --all`, the reaper), `ps`. The target is a row of
`engine.targets.registry` (compose unless --target); everything after rendering goes through
`engine.targets.deployed_stack.DeployedStack`.
"""

from __future__ import annotations

import fnmatch
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from gym_compose.config import LoadedConfig, load
from gym_compose.config.request import ConfigRequest
from gym_compose.console import say
from gym_compose.contract import CACHE_LABEL
from gym_compose.engine.images.build import build_stack_images
from gym_compose.engine.targets.compose_project import ensure_volume, labelled_projects
from gym_compose.engine.targets.deployed_stack import DeployedStack
from gym_compose.engine.targets.registry import TargetOptions, target_named
from gym_compose.errors import GymComposeError, UserError
from gym_compose.plan.model import CollectorRun, Stack, StackOptions
from gym_compose.plan.planner import plan_stack
from gym_compose.render.compose import wait_timeout_seconds
from gym_compose.stack.log_following import attach
from gym_compose.stack.state import (
    existing_project,
    forget_project,
    owning_project,
    project_dir,
    remember_target,
    rendered_instances,
)
from gym_compose.stack.table import print_services
from gym_compose.stack.teardown import down_quietly


@dataclass(frozen=True)
class StackArgs:
    request: ConfigRequest
    options: StackOptions
    target: TargetOptions = TargetOptions()


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


def target_images(stack: Stack, target: TargetOptions, pinned: dict[str, str] | None = None) -> dict[str, str]:
    """The stack's images, built here; with --registry, pushed and named by digest."""
    images = build_stack_images(stack, progress=say, pinned=pinned)
    if target.registry:
        from gym_compose.engine.images.image_registry import push_images

        return push_images(images, target.registry, progress=say)
    if target.node_engines:
        from gym_compose.engine.images.image_registry import copy_images

        copy_images(images, target.node_engines, progress=say)
    elif target_named(target.name).takes_registry:
        say("note: no --registry: every node must hold the images under their local tags "
            "(--node-engine ENGINE copies them); see docs/deploy.md")
    return images


def build_and_render(stack: Stack, target: TargetOptions, out_dir: Path, collector: CollectorRun | None = None,
                     pinned: dict[str, str] | None = None) -> tuple[dict[str, str], DeployedStack]:
    """Build (and push) the images and render the project for the target."""
    row = target_named(target.name)
    if not row.runs:
        raise row.not_run()
    images = target_images(stack, target, pinned)
    rendered = row.render(stack, images, out_dir, collector)
    registries = stack.sandboxes.pulled_registries() if stack.sandboxes is not None else []
    if registries and (out_dir / "secrets").is_dir():
        from gym_compose.engine.registry_login import write_registry_auth

        write_registry_auth(out_dir / "secrets", registries)  # the host's `docker login`, for the broker's pulls
    return images, row.opened(stack.project, rendered)


def render_command(args: StackArgs, output: Path) -> Path:
    stack = plan_from_request(args)
    row = target_named(args.target.name)
    rendered = row.render(stack, target_images(stack, args.target), output, None)
    say(f"rendered {rendered}; " + row.how_to_run.format(file=rendered, folder=output, project=stack.project))
    return rendered


def build_command(args: StackArgs, pull: Optional["PullOptions"] = None) -> dict[str, str]:
    """Build the stack's images; with `pull`, load task image archives first (`load`), then pull the
    task images its SWE rows name, then save them all as archives (`save`)."""
    if pull is None or not pull.pull:
        stack = plan_from_request(args)
        load_archives(pull)
    else:
        from gym_compose.stack.engine_room import check_engine_room
        from gym_compose.stack.swe_preflight import check_pulled_images

        if pull.input_file is not None and not pull.input_file.is_file():
            raise UserError(f"--input {pull.input_file} is not a file", hint="--input takes a JSONL file of rows")
        loaded, stack = load_and_plan(args)
        load_archives(pull)  # before the checks: what the archives hold needs no registry
        to_pull = check_pulled_images(loaded.data, loaded.search_roots, pull.input_file, skip_missing=True)
        check_engine_room(stack, to_pull)
    images = build_stack_images(stack, progress=say)
    for service in stack.services:
        print(f"{service.name:40} {images[service.name]}")
    if pull is not None and pull.pull:
        from gym_compose.engine.images.build_context import image_exists
        from gym_compose.engine.images.task_pulls import pull_task_images

        sizes = {image: size for image, size in to_pull.sizes.items() if size is not None}
        report = pull_task_images(list(to_pull.sizes), sizes, pull.parallel, say, image_exists)
        problems = [f"{image}: {why}" for image, why in sorted(report.failed.items())]
        problems += [f"{image}: not in its registry" for image in sorted(to_pull.skipped)]
        if problems:
            raise UserError(f"{len(problems)} task image(s) are not on the engine:\n"
                            + "\n".join(f"  - {p}" for p in problems[:20]),
                            hint="run `gym-compose build --pull` again to go on where it stopped; a run leaves the "
                            "rows of images the registry lacks out with --skip-missing-images", exit_code=1)
        if pull.save is not None:
            from gym_compose.engine.images.task_archives import save_task_images
            from gym_compose.stack.swe_preflight import rows_task_images

            wanted = rows_task_images(loaded.data, loaded.search_roots, pull.input_file)
            saved = save_task_images(wanted, pull.save, say)
            fail_on_archive_problems(saved.failed, "save", f"--save {pull.save}")
    return images


def load_archives(pull: Optional["PullOptions"]) -> None:
    if pull is not None and pull.load is not None:
        from gym_compose.engine.images.task_archives import load_task_images

        loaded = load_task_images(pull.load, say)
        fail_on_archive_problems(loaded.failed, "load", f"--load {pull.load}")


def fail_on_archive_problems(failed: dict[str, str], verb: str, option: str) -> None:
    if failed:
        raise UserError(f"could not {verb} {len(failed)} task image(s) ({option}):\n"
                        + "\n".join(f"  - {image}: {why}" for image, why in sorted(failed.items())[:20]),
                        hint=f"run the same command again to go on; what was {verb.rstrip('e')}ed stays", exit_code=1)


@dataclass(frozen=True)
class PullOptions:
    """`build --pull/--save/--load`: the rows whose task images to pull (None: the benchmark's datasets),
    how many at once, the folder to save them all into after, the folder of archives to load first."""

    input_file: Optional[Path] = None
    parallel: int = 4
    save: Optional[Path] = None
    load: Optional[Path] = None
    pull: bool = True


def refuse_if_running(project_name: str, target: str) -> None:
    """Two commands must not drive one project: the second would recreate the first's containers.
    Asked while holding the project (`state.owning_project`), so no other command is creating it."""
    if target_named(target).is_running(project_name):
        raise UserError(
            f"project {project_name!r} is already running",
            hint=f"stop it with `gym-compose down -p {project_name}`, collect against it with "
            "`gym-compose eval run --no-serve`, or start another stack with -p NAME and --head-port PORT",
        )


def start_servers(stack: Stack, deployed: DeployedStack) -> None:
    """Start every server and wait until all are healthy; any failure removes the stack again."""
    names = stack_service_names(stack)
    say(f"starting {len(names)} services of project {stack.project!r} ...")
    started = time.monotonic()
    try:
        for volume in stack.volumes.values():
            ensure_volume(volume, f"{CACHE_LABEL}=model")
        deployed.up(wait_timeout_seconds(stack), services=names)
        say(f"all {len(names)} services healthy in {time.monotonic() - started:.1f}s")
        print_services(deployed.quick_states(), {s.name: s.instance for s in stack.services if s.instance})
    except BaseException:
        down_quietly(deployed)
        raise


def stack_service_names(stack: Stack) -> list[str]:
    """Every long-running service: the servers, and the sandbox broker (and egress proxies) when servers
    lease sandboxes."""
    from gym_compose.plan.sandbox_names import BROKER_SERVICE

    sandbox_services = [BROKER_SERVICE, *stack.sandboxes.proxy_services()] if stack.sandboxes is not None else []
    return [s.name for s in stack.services] + sandbox_services


def serve(stack: Stack, target: TargetOptions) -> DeployedStack:
    """Build, render and start a planned stack and wait until it is healthy (`up -d`, the Python
    API); the caller holds the project (`state.owning_project`)."""
    refuse_if_running(stack.project, target.name)
    _, project = build_and_render(stack, target, project_dir(stack.project))
    remember_target(stack.project, target.name)
    start_servers(stack, project)
    return project


def up_command(args: StackArgs, detach: bool) -> None:
    from gym_compose.stack.engine_room import check_engine_room
    from gym_compose.stack.swe_preflight import check_pulled_images

    loaded, stack = load_and_plan(args)
    check_engine_room(stack, check_pulled_images(loaded.data, loaded.search_roots))
    with owning_project(stack.project):  # -d: until the stack is up; attached: until it is removed
        project = serve(stack, args.target)
        if detach:
            say(f"stack is up; stop it with `gym-compose down -p {stack.project}`")
            return
        attach(project, stack_service_names(stack))


def down_command(project_name: str, images: bool = False) -> None:
    from gym_compose.stack.pulled_images import remember_pulled_images, remove_pulled_images

    project = existing_project(project_name)
    remember_pulled_images(project)  # the brokers' logs go with the project
    removed = project.down()
    forget_project(project_name)
    if removed:
        say(f"removed project {project_name!r} ({removed.count()}); results folders are kept")
    else:
        say(f"project {project_name!r} had nothing to remove")
    if images:
        remove_pulled_images(project_name)


def down_all_command(match: str | None = None, images: bool = False) -> None:
    """The reaper: every project that has a container labelled by gym-compose, whatever its name
    (or only those whose name matches the glob `match`)."""
    names = [name for name in labelled_projects() if match is None or fnmatch.fnmatchcase(name, match)]
    if not names:
        say("no gym-compose project on this engine" + (f" matches {match!r}" if match else ""))
    failed = []
    for name in names:
        try:
            down_command(name, images)
        except GymComposeError as error:
            say(f"error: {error}")
            failed.append(name)
    if failed:
        raise UserError(f"not every project was removed: {', '.join(failed)}", hint="see the errors above")


def ps_command(project_name: str) -> None:
    states = existing_project(project_name).ps()
    if not states:
        say(f"project {project_name!r} has no containers")
        return
    print_services(states, rendered_instances(project_name))
    from gym_compose.stack.sandbox_commands import print_sandboxes

    print_sandboxes(project_name)
