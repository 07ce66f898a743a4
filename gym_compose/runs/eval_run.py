"""`eval run` (and `up --benchmark/--input`): serve (or reuse) the stack, collect, record, report.

Every row and option is checked, the run folder's writer lock and the project's collector looked
at, before a folder is made or a container starts; a start that fails removes the run folder it
made. From the moment the collector may start, the run folder is the run's, whatever happens:
its manifest is written even when the command is interrupted.
"""

from __future__ import annotations

import shutil
import sys
from contextlib import nullcontext
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from gym_compose.collect.artifacts import ArtifactPaths
from gym_compose.config import LoadedConfig
from gym_compose.console import say
from gym_compose.engine.targets.deployed_stack import DeployedStack
from gym_compose.engine.targets.registry import TargetOptions, target_named
from gym_compose.errors import UserError
from gym_compose.plan.model import Stack
from gym_compose.runs.manifest import EngineFacts, resume_command, run_record, write_manifest
from gym_compose.runs.run_folders import claim_run_dir
from gym_compose.runs.run_inputs import CollectionArgs, PlannedRun, check_input_files, plan_run, write_run_inputs
from gym_compose.runs.skipped_rows import without_skipped_rows
from gym_compose.runs.summary import print_summary
from gym_compose.runs.supervision import (
    COLLECTOR_LOG,
    CollectorOutcome,
    refuse_second_collector,
    require_running,
    run_collector,
    stack_states,
)
from gym_compose.stack.engine_room import check_engine_room
from gym_compose.stack.lifecycle import (
    StackArgs,
    build_and_render,
    load_and_plan,
    refuse_if_running,
    stack_service_names,
    start_servers,
)
from gym_compose.stack.state import deployed_stack, owning_project, project_dir, remember_target
from gym_compose.stack.swe_preflight import check_pulled_images
from gym_compose.stack.teardown import down_quietly, stop_and_remove

__all__ = ["CollectionArgs", "run_collection"]


def rendered_file(project: DeployedStack | None) -> Path | None:
    """The compose (or swarm stack) file the run was served from, copied into the run folder."""
    return project.rendered_file if project is not None else None


def missing_rollouts(run_dir: Path, planned: PlannedRun, outcome: CollectorOutcome) -> str | None:
    """A collector that says every rollout succeeded must have written each where the run says:
    never report success for a run folder that lacks them."""
    if outcome.exit_code != 0 or outcome.stopped_for:
        return None
    path = ArtifactPaths(run_dir).rollouts
    written = count_lines(path)
    if written >= planned.rollouts:
        return None
    return (f"the collector exited 0, but {path} holds {written} of the run's {planned.rollouts} rollouts: "
            "it wrote them somewhere else or not at all")


def count_lines(path: Path) -> int:
    """Non-blank lines of a file (0 when it is missing), without parsing them."""
    if not path.is_file():
        return 0
    with open(path, "rb") as source:
        return sum(1 for line in source if line.strip())


def run_collection(args: StackArgs, collection: CollectionArgs, serve: bool, keep: bool,
                   pinned_images: dict[str, str] | None = None, rerun_of: Path | None = None,
                   check_images: Callable[[dict[str, str]], None] | None = None) -> int:
    """Collect rollouts; with `serve`, start the stack first and stop it after unless `keep`.
    `pinned_images` (key -> image) are used as they are instead of built, and `check_images` sees
    the images before anything starts (`eval rerun`)."""
    check_input_files(collection)  # before the config's own checks read the rows
    loaded, stack = load_and_plan(args)
    to_pull = check_pulled_images(loaded.data, loaded.search_roots, collection.input_file,
                                  skip_missing=collection.skip_missing_images)
    check_engine_room(stack, to_pull)
    with without_skipped_rows(loaded, collection, to_pull.skipped) as collection:
        planned = plan_run(loaded, stack, collection)
        # Serving, this command owns the project from before its first check to its stack's removal;
        # --no-serve collects against a stack another command owns (an attached `up` holds it).
        with owning_project(stack.project) if serve else nullcontext():
            return _collect(loaded, stack, planned, collection, args.target, serve, keep, pinned_images, rerun_of,
                            check_images)


def _collect(loaded: LoadedConfig, stack: Stack, planned: PlannedRun, collection: CollectionArgs,
             target_options: TargetOptions, serve: bool, keep: bool, pinned_images: dict[str, str] | None,
             rerun_of: Path | None, check_images: Callable[[dict[str, str]], None] | None) -> int:
    target = target_options.name
    deployed = deployed_stack(stack.project, target)
    if serve:
        refuse_if_running(stack.project, target)
        if not target_named(target).running_sees_collector:  # else no container means no collector either
            refuse_second_collector(deployed)
    else:
        states = stack_states(deployed)  # one listing answers both questions
        require_running(deployed, states)
        refuse_second_collector(deployed, states)
    run_dir, created = claim_run_dir(collection.results_dir, planned.name, collection.resume)
    started_at = datetime.now(timezone.utc)
    record = run_record(planned, collection, rerun_of)
    outcome: CollectorOutcome | None = None
    images: dict[str, str] = {}
    project: DeployedStack | None = None
    facts: EngineFacts | None = None
    try:
        collector = write_run_inputs(run_dir, planned, collection)
        images, project = build_and_render(stack, target_options, project_dir(stack.project), collector,
                                           pinned=pinned_images)
        if serve:
            remember_target(stack.project, target)
        if check_images is not None:
            check_images(images)
        facts = EngineFacts(images)  # asked while the servers start and the collector runs
        if serve:
            start_servers(stack, project)
        outcome = CollectorOutcome(1)  # from here on the run folder is the run's, whatever happens
        outcome = run_collector(project, run_dir, stack_service_names(stack))
    except BaseException:
        if outcome is not None and project is not None:  # before `down` forgets the compose file
            write_manifest(run_dir, loaded.data, rendered_file(project), images, started_at, outcome.exit_code,
                           record, facts, loaded.from_environment)
        if serve and not keep and project is not None:
            down_quietly(project)
        if outcome is None and created:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    write_manifest(run_dir, loaded.data, rendered_file(project), images, started_at, outcome.exit_code,
                   record, facts, loaded.from_environment)
    missing = missing_rollouts(run_dir, planned, outcome)
    print_summary(run_dir)
    print(f"results: {run_dir}")
    if serve and not keep:
        stop_and_remove(project)
    elif serve:
        say(f"stack left running (--keep); stop it with `gym-compose down -p {stack.project}`")
    if missing:
        raise UserError(missing, hint=f"the collector's output is in {run_dir / COLLECTOR_LOG}", exit_code=1)
    if outcome.exit_code == 1 and not outcome.stopped_for:
        failures = ArtifactPaths(run_dir).failures
        say(f"some rollouts failed: why is in {failures} (`gym-compose view {run_dir}`); once the cause is fixed, "
            f"retry them with: {resume_command(sys.argv)}")
    if outcome.stopped_for:
        raise UserError(
            f"the run was stopped: {outcome.stopped_for}",
            hint=f"finished rollouts are saved in {run_dir}; once the cause is fixed, continue the run with: "
            f"{resume_command(sys.argv)}",
            exit_code=1,
        )
    return outcome.exit_code
