"""A collection run from the host: serve (or reuse) the stack, run the collector container, report.

The collector itself (`gym_compose.collect`) runs inside the project's network; this module picks
its rows and run folder, starts it with `docker compose run`, shows its progress, writes the
run's manifest and prints the key metrics.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from gym_compose import __version__
from gym_compose.collect import read_progress
from gym_compose.config import redact
from gym_compose.config.redact import MASK, is_secret_key
from gym_compose.engine.compose import ComposeProject
from gym_compose.engine.images import image_digest
from gym_compose.errors import UserError
from gym_compose.inputs import benchmark_datasets, check_rows, uniform_num_repeats, write_collection_input
from gym_compose.plan import COLLECTOR_SERVICE
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
    start_servers,
    stop_and_remove,
)

INPUT_FILE = "input.jsonl"
MANIFEST_FILE = "manifest.json"
METRICS_FILE = "rollouts_aggregate_metrics.json"
COLLECTOR_TIMEOUT_SECONDS = 7 * 24 * 3600
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


def run_collection(args: StackArgs, collection: CollectionArgs, serve: bool, keep: bool) -> int:
    """Collect rollouts; with `serve`, start the stack first and stop it after unless `keep`."""
    loaded, stack = load_and_plan(args)
    if serve:
        refuse_if_running(stack.project)
    run_dir, collector = _prepare_run(loaded, collection)  # bad rows stop us before any container
    images, project = build_and_render(stack, project_dir(stack.project), collector)
    started_at = datetime.now(timezone.utc)
    exit_code = 1
    try:
        if serve:
            start_servers(stack, project)
        else:
            _require_running(project)
        exit_code = _run_collector(project, run_dir)
    except BaseException:
        if serve and not keep:
            down_quietly(project)
        raise
    finally:
        _write_manifest(run_dir, loaded.data, project.compose_file, images, started_at, exit_code)
    _print_summary(run_dir)
    print(f"results: {run_dir}")
    if serve and not keep:
        stop_and_remove(project)
    elif serve:
        say(f"stack left running (--keep); stop it with `gym-compose down -p {stack.project}`")
    return exit_code


def _prepare_run(loaded, collection: CollectionArgs) -> tuple[Path, CollectorRun]:
    """Check every input row first, then claim the run folder and put the rows there."""
    if collection.input_file is not None:
        if not collection.input_file.is_file():
            raise UserError(f"input file {collection.input_file} does not exist")
        check_rows(collection.input_file)
        datasets = []
        num_repeats = collection.num_repeats
    else:
        datasets = benchmark_datasets(loaded.data, loaded.search_roots)
        if not datasets:
            raise UserError(
                "nothing to collect: the config declares no dataset of type `benchmark`",
                hint="select one with --benchmark NAME, or pass rows with --input FILE",
            )
        for dataset in datasets:
            check_rows(dataset.path)
        num_repeats = collection.num_repeats or uniform_num_repeats(datasets)
    if collection.prompt_config is not None and not collection.prompt_config.is_file():
        raise UserError(f"prompt config {collection.prompt_config} does not exist")

    name = collection.run_name or _default_run_name(collection, datasets)
    run_dir = _resumed_run_dir(collection.results_dir, name) if collection.resume else _new_run_dir(
        collection.results_dir, name)
    input_copy = run_dir / INPUT_FILE
    if not (collection.resume and input_copy.exists()):
        if collection.input_file is not None:
            shutil.copyfile(collection.input_file, input_copy)
        else:  # a --prompt-config given here replaces the datasets' own prompt configs
            write_collection_input(datasets, input_copy, apply_dataset_prompts=collection.prompt_config is None)

    extra = list(collection.collector_args)
    if num_repeats:
        extra += ["--num-repeats", str(num_repeats)]
    if collection.resume:
        extra.append("--resume")
    if collection.prompt_config is not None:
        shutil.copyfile(collection.prompt_config, run_dir / "prompt_config.yaml")
        extra += ["--prompt-config", "/results/prompt_config.yaml"]
    return run_dir, CollectorRun(input_file=input_copy, output_dir=run_dir, args=extra, user=collector_user(run_dir))


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
    states = project_states(project)
    unhealthy = [s.service for s in states if s.state != "running" or s.health not in ("healthy", "")]
    if not states or unhealthy:
        raise UserError(
            "--no-serve needs the stack to be up and healthy; "
            + (f"not healthy: {', '.join(unhealthy)}" if states else f"project {project.name!r} has no containers"),
            hint="start it with `gym-compose up -d` and the same config arguments",
        )


def _run_collector(project: ComposeProject, run_dir: Path) -> int:
    argv = project.run_command(COLLECTOR_SERVICE)
    log_path = run_dir / "collector.log"
    with open(log_path, "ab") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        display = ProgressDisplay()
        try:
            deadline = time.monotonic() + COLLECTOR_TIMEOUT_SECONDS
            while process.poll() is None and time.monotonic() < deadline:
                display.update(read_progress(run_dir))
                time.sleep(0.5)
            if process.poll() is None:
                process.kill()
        except KeyboardInterrupt:
            say("\ninterrupted: stopping the collector; finished rollouts are saved (rerun with --resume)")
            process.terminate()
            project.remove_one_off(COLLECTOR_SERVICE)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
            raise
        finally:
            display.update(read_progress(run_dir))
            display.close()
    code = process.returncode
    if code not in (0, 1) or (code == 1 and not (run_dir / "rollouts_failures.jsonl").exists()):
        say(f"error: the collector exited with {code}; its output:")
        say(log_path.read_text(errors="replace")[-3000:].rstrip())
    return code


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
        if self.tty and self.last_line:
            sys.stderr.write("\n")


def _write_manifest(run_dir: Path, data: dict, compose_file: Path, images: dict[str, str],
                    started_at: datetime, exit_code: int) -> None:
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
