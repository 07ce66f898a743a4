"""A collection run from the host: serve (or reuse) the stack, run the collector container, report.

The collector itself (`gym_compose.collect`) runs inside the project's network; this module checks
every row and option before anything starts, claims the run folder, starts the collector with
`docker compose run` holding a lease on it (its stdin), watches the stack while it runs (a server
that dies stops the run, naming it), shows its progress, writes the run's manifest and prints the
key metrics.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from gym_compose import __version__
from gym_compose.collect import read_progress
from gym_compose.collect.lock import current_holder
from gym_compose.config import redact
from gym_compose.config.redact import MASK, is_secret_key
from gym_compose.engine.compose import ComposeProject
from gym_compose.engine.docker_cli import DockerProcess
from gym_compose.engine.images import image_digest
from gym_compose.engine.postmortem import describe_death, indented_log
from gym_compose.errors import UserError
from gym_compose.inputs import benchmark_datasets, check_rollouts, uniform_num_repeats, write_collection_input
from gym_compose.plan import COLLECTOR_SERVICE, Stack
from gym_compose.render import CollectorRun
from gym_compose.stack_commands import (
    StackArgs,
    build_and_render,
    down_quietly,
    load_and_plan,
    project_dir,
    project_states,
    refuse_if_running,
    say,
    stack_service_names,
    start_servers,
    stop_and_remove,
    uninterruptible,
)

INPUT_FILE = "input.jsonl"
MANIFEST_FILE = "manifest.json"
METRICS_FILE = "rollouts_aggregate_metrics.json"
COLLECTOR_TIMEOUT_SECONDS = 7 * 24 * 3600
COLLECTOR_STOP_SECONDS = 30  # how long a collector asked to stop may take to write what it has
WATCH_INTERVAL_SECONDS = 2.0  # how often the stack is checked for a dead server while collecting
PROGRESS_INTERVAL_SECONDS = 0.5
UNPRIVILEGED_UID = 10001  # the base image's `server` user


@dataclass(frozen=True)
class CollectionArgs:
    results_dir: Path = Path("results")
    input_file: Path | None = None
    run_name: str | None = None
    resume: bool = False
    collector_args: list[str] = field(default_factory=list)  # passed through to the collector
    num_repeats: int | None = None
    prompt_config: Path | None = None


@dataclass(frozen=True)
class CollectorOutcome:
    exit_code: int
    stopped_for: str | None = None  # a server died: the run was stopped early


@dataclass(frozen=True)
class PlannedRun:
    """A collection that passed every check; nothing has been written yet."""

    name: str
    datasets: list
    collector_args: list[str]


def run_collection(args: StackArgs, collection: CollectionArgs, serve: bool, keep: bool,
                   pinned_images: dict[str, str] | None = None, rerun_of: Path | None = None,
                   check_images: Callable[[dict[str, str]], None] | None = None) -> int:
    """Collect rollouts; with `serve`, start the stack first and stop it after unless `keep`.
    `pinned_images` (key -> image id) are used as they are instead of built, and `check_images`
    sees the images before anything starts (`eval rerun`).

    Every row and option is checked, and the run folder's writer lock and the project's collector
    looked at, before a folder is made or a container starts; a start that fails removes the run
    folder it made.
    """
    loaded, stack = load_and_plan(args)
    planned = _plan_run(loaded, stack, collection)
    if serve:
        refuse_if_running(stack.project)
    else:
        _require_running(ComposeProject(stack.project))
    refuse_second_collector(ComposeProject(stack.project))
    run_dir, created = _claim_run_dir(collection, planned.name)
    started_at = datetime.now(timezone.utc)
    record = _run_record(loaded.data, planned, collection, run_dir, rerun_of)
    outcome: CollectorOutcome | None = None
    images: dict[str, str] = {}
    project: ComposeProject | None = None
    try:
        collector = _write_run_inputs(run_dir, planned, collection)
        images, project = build_and_render(stack, project_dir(stack.project), collector, pinned=pinned_images)
        if check_images is not None:
            check_images(images)
        if serve:
            start_servers(stack, project)
        outcome = CollectorOutcome(1)  # from here on the run folder is the run's, whatever happens
        outcome = _run_collector(project, run_dir, stack_service_names(stack))
    except BaseException:
        if outcome is not None and project is not None:  # before `down` forgets the compose file
            _write_manifest(run_dir, loaded.data, project.compose_file, images, started_at, outcome.exit_code, record)
        if serve and not keep and project is not None:
            down_quietly(project)
        if outcome is None and created:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    _write_manifest(run_dir, loaded.data, project.compose_file, images, started_at, outcome.exit_code, record)
    _print_summary(run_dir)
    print(f"results: {run_dir}")
    if serve and not keep:
        stop_and_remove(project)
    elif serve:
        say(f"stack left running (--keep); stop it with `gym-compose down -p {stack.project}`")
    if outcome.stopped_for:
        raise UserError(
            f"the run was stopped: {outcome.stopped_for}",
            hint=f"finished rollouts are saved in {run_dir}; once the cause is fixed, continue the run with: "
            f"{_resume_command(sys.argv)}",
            exit_code=1,
        )
    return outcome.exit_code


def _plan_run(loaded, stack: Stack, collection: CollectionArgs) -> PlannedRun:
    """Check every input row and collector option, as the collector will; write nothing."""
    if collection.input_file is not None:
        if not collection.input_file.is_file():
            raise UserError(f"input file {collection.input_file} does not exist")
        datasets = []
        num_repeats = collection.num_repeats
    else:
        datasets = benchmark_datasets(loaded.data, loaded.search_roots)
        if not datasets:
            raise UserError(
                "nothing to collect: the config declares no dataset of type `benchmark`",
                hint="select one with --benchmark NAME, or pass rows with --input FILE",
            )
        num_repeats = collection.num_repeats or uniform_num_repeats(datasets)
    if collection.prompt_config is not None and not collection.prompt_config.is_file():
        raise UserError(f"prompt config {collection.prompt_config} does not exist")
    extra = list(collection.collector_args)
    if num_repeats:
        extra += ["--num-repeats", str(num_repeats)]
    check_rollouts(stack.network_config, extra, collection.input_file, datasets, collection.prompt_config)
    if collection.resume:
        extra.append("--resume")
    if collection.prompt_config is not None:
        extra += ["--prompt-config", "/results/prompt_config.yaml"]
    name = collection.run_name or _default_run_name(collection, datasets)
    return PlannedRun(name=name, datasets=datasets, collector_args=extra)


def refuse_second_collector(project: ComposeProject) -> None:
    """One collector per project: a second would write beside the first (or into its folder)."""
    running = project.one_off_containers(COLLECTOR_SERVICE, running_only=True)
    if running:
        raise UserError(
            f"a collector of project {project.name!r} is still running: {', '.join(running)}",
            hint="wait for it to finish, or stop it with `gym-compose down -p "
            f"{project.name}` (or `docker rm -f {running[0]}`); run another collection at once with -p OTHER",
        )


def _claim_run_dir(collection: CollectionArgs, name: str) -> tuple[Path, bool]:
    """The run folder and whether this command made it; a resumed folder that a live collector
    still writes is refused (a dead one's lock is no obstacle)."""
    if not collection.resume:
        return _new_run_dir(collection.results_dir, name), True
    run_dir = _resumed_run_dir(collection.results_dir, name)
    holder = current_holder(run_dir)
    if holder is not None:
        raise UserError(
            f"{run_dir} is being written by another collector: {holder}",
            hint="wait for it to finish or stop it, then run with --resume again",
        )
    return run_dir, False


def _write_run_inputs(run_dir: Path, planned: PlannedRun, collection: CollectionArgs) -> CollectorRun:
    input_copy = run_dir / INPUT_FILE
    if not (collection.resume and input_copy.exists()):
        if collection.input_file is not None:
            shutil.copyfile(collection.input_file, input_copy)
        else:  # a --prompt-config given here replaces the datasets' own prompt configs
            write_collection_input(planned.datasets, input_copy,
                                   apply_dataset_prompts=collection.prompt_config is None)
    if collection.prompt_config is not None:
        shutil.copyfile(collection.prompt_config, run_dir / "prompt_config.yaml")
    return CollectorRun(input_file=input_copy, output_dir=run_dir, args=[*planned.collector_args, "--host-lease"],
                        user=collector_user(run_dir))


def collector_user(run_dir: Path) -> str:
    """The collector writes as the host user, so the artifacts are theirs; for root, as the
    image's unprivileged user, given the run folder (a container never runs as root)."""
    uid, gid = os.getuid(), os.getgid()
    if uid != 0:
        return f"{uid}:{gid}"
    for path in [run_dir, *run_dir.iterdir()]:
        os.chown(path, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
    return f"{UNPRIVILEGED_UID}:{UNPRIVILEGED_UID}"


def _default_run_name(collection: CollectionArgs, datasets) -> str:
    if collection.input_file is not None:
        return collection.input_file.stem
    return "+".join(sorted({d.name for d in datasets})) or "run"


def _resumed_run_dir(results_dir: Path, name: str) -> Path:
    own_runs = re.compile(re.escape(name) + r"-\d{8}-\d{6}(-\d+)?")
    earlier = [p for p in results_dir.glob(f"{name}-*") if own_runs.fullmatch(p.name) and p.is_dir()]
    if not earlier:
        raise UserError(f"--resume: no earlier run named {name!r} under {results_dir}",
                        hint="run without --resume first, or pass the same --run-name as that run")
    return max(earlier, key=lambda p: (p.name[len(name) + 1:len(name) + 16], _suffix_number(p, name)))


def _suffix_number(path: Path, name: str) -> int:
    rest = path.name[len(name) + 16:]
    return int(rest[1:]) if rest.startswith("-") and rest[1:].isdigit() else 1


def _new_run_dir(results_dir: Path, name: str) -> Path:
    """A fresh `<name>-<time>[-N]` folder, claimed with an exclusive mkdir (two runs never share one)."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    try:
        results_dir.mkdir(parents=True, exist_ok=True)
        for suffix in range(1, 1000):
            candidate = results_dir / (f"{name}-{stamp}" if suffix == 1 else f"{name}-{stamp}-{suffix}")
            try:
                candidate.mkdir()
                return candidate
            except FileExistsError:
                continue
    except OSError as error:
        raise UserError(f"cannot create a run folder under {results_dir}: {error.strerror}",
                        hint="pick a folder you can write with --results-dir") from None
    raise UserError(f"too many runs named {name!r} in the same second under {results_dir}")


def _require_running(project: ComposeProject) -> None:
    states = [s for s in project_states(project) if not s.one_off]
    unhealthy = [s.service for s in states if not s.serving]
    if not states or unhealthy:
        raise UserError(
            "--no-serve needs the stack to be up and healthy; "
            + (f"not healthy: {', '.join(unhealthy)}" if states else f"project {project.name!r} has no containers"),
            hint="start it with `gym-compose up -d` and the same config arguments",
        )


def _run_collector(project: ComposeProject, run_dir: Path, services: list[str]) -> CollectorOutcome:
    """Run the collector, showing its progress and watching the servers; a server that dies
    stops the run at once (its rollouts in flight fail naming it). Ctrl-C stops the collector,
    which keeps what it finished, and removes its container."""
    log_path = run_dir / "collector.log"
    with open(log_path, "a", encoding="utf-8", errors="replace") as log:
        collector = project.run_one_off(COLLECTOR_SERVICE, log)
        display = ProgressDisplay()
        stopped_for = None
        try:
            stopped_for = _watch(project, collector, run_dir, services, display)
            code = collector.wait(COLLECTOR_STOP_SECONDS if stopped_for else None)
            if code is None:
                code = collector.stop(5)
        except KeyboardInterrupt:
            display.close()
            say("\ninterrupted: stopping the collector; finished rollouts are saved (rerun with --resume)")
            with uninterruptible():
                _stop_collector(project, collector)
            raise
        finally:
            display.update(read_progress(run_dir))
            display.close()
    if stopped_for:
        return CollectorOutcome(code, stopped_for)
    if code not in (0, 1) or (code == 1 and not (run_dir / "rollouts_failures.jsonl").exists()):
        say(f"error: the collector exited with {code}; its output:")
        say(log_path.read_text(errors="replace")[-3000:].rstrip())
        collector.check(engine_only=True)  # the engine's own explanation, when it has one (daemon gone, ...)
    return CollectorOutcome(code)


def _watch(project: ComposeProject, collector: DockerProcess, run_dir: Path, services: list[str],
           display: ProgressDisplay) -> str | None:
    """Until the collector exits: progress every half second, the servers every few seconds.
    Returns why the run was stopped, if a server died."""
    deadline = time.monotonic() + COLLECTOR_TIMEOUT_SECONDS
    next_check = time.monotonic() + WATCH_INTERVAL_SECONDS
    reported_paused: set[str] = set()
    while collector.wait(PROGRESS_INTERVAL_SECONDS) is None:
        display.update(read_progress(run_dir))
        now = time.monotonic()
        if now > deadline:
            say(f"error: the collector ran for more than {COLLECTOR_TIMEOUT_SECONDS} s; stopping it")
            _stop_collector(project, collector)
            return None
        if now < next_check:
            continue
        next_check = now + WATCH_INTERVAL_SECONDS
        check = project.check_stack(services)
        for service in sorted(set(check.paused) - reported_paused):
            display.close()
            say(f"warning: server {service} is paused; its rollouts wait for it (until "
                "peer_request_timeout_seconds) unless it is unpaused")
        reported_paused = set(check.paused)
        if check.dead or check.empty:
            reason = "; ".join(describe_death(state) for state in check.dead) or "every server of the stack is gone"
            display.close()
            say(f"error: {reason}; stopping the run")
            for state in check.dead:
                if state.state != "missing":
                    say(f"  last log lines of {state.service}:")
                    say("\n".join(indented_log(project, state.service)) or "      (none)")
            collector.tell({"stop": reason})
            collector.close_stdin()
            return reason
    return None


def _stop_collector(project: ComposeProject, collector: DockerProcess) -> None:
    """Close its lease (it stops and keeps what it finished), give it a moment, then remove it."""
    collector.close_stdin()
    if collector.wait(COLLECTOR_STOP_SECONDS) is None:
        collector.stop(5)
    project.remove_one_off(COLLECTOR_SERVICE)


class ProgressDisplay:
    """A live one-line progress bar on a terminal; a line every few seconds otherwise."""

    def __init__(self):
        self.tty = sys.stderr.isatty()
        self.last_line = ""
        self.last_print = 0.0

    def update(self, progress: dict | None) -> None:
        if not progress:
            return
        total, done, failed = progress.get("total", 0), progress.get("done", 0), progress.get("failed", 0)
        rate, reward = progress.get("rollouts_per_second") or 0.0, progress.get("mean_reward")
        width = 30
        filled = int(width * done / total) if total else 0
        line = (f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total}  {rate:.1f} rollouts/s  "
                f"mean reward {reward if reward is None else f'{reward:.3f}'}  failures {failed}")
        if line == self.last_line:
            return
        if self.tty:
            sys.stderr.write("\r" + line)
            sys.stderr.flush()
        elif time.monotonic() - self.last_print > 5 or progress.get("finished"):
            sys.stderr.write(line + "\n")
            self.last_print = time.monotonic()
        self.last_line = line

    def close(self) -> None:
        """End the progress line, so that a message can follow on its own line."""
        if self.tty and self.last_line:
            sys.stderr.write("\n")
            self.last_line = ""


def _run_record(data: dict, planned: PlannedRun, collection: CollectionArgs, run_dir: Path,
                rerun_of: Path | None) -> dict:
    """The manifest's provenance (models, sampling, row hashes, versions, secrets' sources) and the
    collection as a rerun repeats it; the rows are hashed, the engine asked, when the manifest is written."""
    from gym_compose.run_provenance import collection_record

    passthrough = list(collection.collector_args)
    repeats = next((planned.collector_args[i + 1] for i, arg in enumerate(planned.collector_args[:-1])
                    if arg == "--num-repeats"), None)
    return {"collection": collection_record(passthrough, int(repeats) if repeats else None,
                                            collection.prompt_config is not None),
            "datasets": [d.path for d in planned.datasets],
            "rerun_of": str(rerun_of.resolve()) if rerun_of else None}


def _write_manifest(run_dir: Path, data: dict, compose_file: Path, images: dict[str, str],
                    started_at: datetime, exit_code: int, record: dict | None = None) -> None:
    from gym_compose.engine.engine_info import engine_versions
    from gym_compose.run_provenance import provenance

    shutil.copyfile(compose_file, run_dir / "compose.yaml")
    digests = {}
    for service, tag in sorted(images.items()):
        try:
            digests[service] = {"image": tag, "id": image_digest(tag)}
        except UserError:
            digests[service] = {"image": tag, "id": None}
    manifest = {
        "gym_compose_version": __version__,
        "command": _redacted_argv(sys.argv),
        "started_at": started_at.isoformat(timespec="seconds"),
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "collector_exit_code": exit_code,
        "images": digests,
        "compose_file": "compose.yaml",
        "resolved_config": redact(data),
    }
    if record is not None:
        manifest["collection"] = record["collection"]
        manifest["provenance"] = provenance(data, record["collection"]["collector_args"], run_dir / INPUT_FILE,
                                            record["datasets"], engine_versions())
        if record["rerun_of"]:
            manifest["rerun_of"] = record["rerun_of"]
    (run_dir / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, default=str) + "\n", encoding="utf-8")


def _print_summary(run_dir: Path) -> None:
    path = run_dir / METRICS_FILE
    if not path.is_file():
        return
    try:
        per_agent = json.loads(path.read_text())
    except json.JSONDecodeError:
        return
    for entry in per_agent if isinstance(per_agent, list) else []:
        name = (entry.get("agent_ref") or {}).get("name", "?")
        print(f"{name}:")
        for key, value in (entry.get("key_metrics") or {}).items():
            shown = f"{value:.4g}" if isinstance(value, float) else value
            print(f"  {key:40} {shown}")


def _resume_command(argv: list[str]) -> str:
    """The command line that continues this run: the same one with --resume (secrets masked)."""
    shown = ["gym-compose", *_redacted_argv(argv[1:])]
    if "--resume" not in shown:
        shown.append("--resume")
    return " ".join(shown)


def _redacted_argv(argv: list[str]) -> list[str]:
    """The command line with secret values (--model-api-key X, ++policy_api_key=X) masked."""
    shown: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            shown.append(MASK)
            hide_next = False
        elif arg == "--model-api-key":
            shown.append(arg)
            hide_next = True
        elif arg.startswith("--model-api-key="):
            shown.append(f"--model-api-key={MASK}")
        elif "=" in arg and is_secret_key(arg.split("=", 1)[0].lstrip("+~").rsplit(".", 1)[-1]):
            shown.append(arg.split("=", 1)[0] + "=" + MASK)
        else:
            shown.append(arg)
    return shown
