"""A run's inputs: every row and option checked as the collector will check them, before anything
is written or started; then the rows (and prompt config) copied into the run folder."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from gym_compose.config import LoadedConfig
from gym_compose.contract import COLLECTOR_RESULTS
from gym_compose.errors import UserError
from gym_compose.plan.model import CollectorRun, Stack
from gym_compose.runs.datasets import (
    Dataset,
    benchmark_datasets,
    check_rollouts,
    uniform_num_repeats,
    write_collection_input,
)
from gym_compose.runs.run_folders import collector_user
from gym_compose.runs.swe_row_images import sandbox_image_check

INPUT_FILE = "input.jsonl"
PROMPT_CONFIG_FILE = "prompt_config.yaml"
# The collector options a run may pass through (the CLI's collection options, each with a value);
# the input, the output folder, the lease and the prompt config are gym-compose's to set.
PASSED_THROUGH = ("--limit", "--num-samples-in-parallel", "--temperature", "--top-p", "--max-output-tokens")


@dataclass(frozen=True)
class CollectionArgs:
    results_dir: Path = Path("results")
    input_file: Path | None = None
    run_name: str | None = None
    resume: bool = False
    collector_args: list[str] = field(default_factory=list)  # passed through to the collector
    num_repeats: int | None = None
    prompt_config: Path | None = None
    collector_args_from: str = "the command line"  # where collector_args came from, for an error
    skip_missing_images: bool = False  # SWE rows whose image the registry lacks are left out


@dataclass(frozen=True)
class PlannedRun:
    """A collection that passed every check; nothing has been written yet."""

    name: str
    datasets: list[Dataset]
    collector_args: list[str]
    rollouts: int = 0  # how many the run folder must hold once every rollout succeeded


def plan_run(loaded: LoadedConfig, stack: Stack, collection: CollectionArgs) -> PlannedRun:
    """Check every input row and collector option, as the collector will; write nothing."""
    check_input_files(collection)
    if collection.input_file is not None:
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
    check_passed_through(collection.collector_args, collection.collector_args_from)
    extra = list(collection.collector_args)
    if num_repeats:
        extra += ["--num-repeats", str(num_repeats)]
    rollouts = check_rollouts(stack.network_config, extra, collection.input_file, datasets, collection.prompt_config,
                              sandbox_image_check(stack))
    if collection.resume:
        extra.append("--resume")
    if collection.prompt_config is not None:
        extra += ["--prompt-config", f"{COLLECTOR_RESULTS}/{PROMPT_CONFIG_FILE}"]
    name = collection.run_name or default_run_name(collection, datasets)
    return PlannedRun(name=name, datasets=datasets, collector_args=extra, rollouts=rollouts)


def check_input_files(collection: CollectionArgs) -> None:
    """--input and --prompt-config name files; say what is wrong with one that is not a file."""
    for option, path, expected in (("--input", collection.input_file, "a JSONL file of rows, one JSON object a line"),
                                   ("--prompt-config", collection.prompt_config,
                                    "a YAML file with a `user` (and `system`) template")):
        if path is None or path.is_file():
            continue
        if path.is_dir():
            inside = sorted(item.name for item in path.glob("*.jsonl"))[:3] if option == "--input" else []
            raise UserError(f"{option} {path} is a directory; it takes {expected}",
                            hint=f"e.g. {option} {path / inside[0]}" if inside else f"pass {expected} to {option}")
        raise UserError(f"{option} {path} does not exist" + ("" if path.parent.is_dir() else
                                                           f" (nor does its folder {path.parent})"),
                        hint=f"{option} takes {expected}")


def check_passed_through(args: list[str], source: str) -> None:
    """Only the collection options a command line can give, each with its value: an option that
    moves the collector's input or output (`--output-dir`, `--input`, or an abbreviation of one)
    would make a run that writes nothing where it says."""
    index = 0
    while index < len(args):
        flag, inline = args[index].partition("=")[0], "=" in args[index]
        if flag not in PASSED_THROUGH:
            raise UserError(
                f"{source}: collector option {args[index]!r} is not one a run passes through",
                hint=f"allowed: {', '.join(PASSED_THROUGH)} (each with a value); gym-compose sets the input, "
                "the output folder and the rest itself: remove it",
            )
        if not inline and index + 1 >= len(args):
            raise UserError(f"{source}: collector option {flag} has no value", hint=f"e.g. {flag} 4")
        index += 1 if inline else 2


def default_run_name(collection: CollectionArgs, datasets: list[Dataset]) -> str:
    if collection.input_file is not None:
        return collection.input_file.stem
    return "+".join(sorted({d.name for d in datasets})) or "run"


def write_run_inputs(run_dir: Path, planned: PlannedRun, collection: CollectionArgs) -> CollectorRun:
    """The rows (kept on --resume) and the prompt config in the run folder; the collector's run."""
    input_copy = run_dir / INPUT_FILE
    if not (collection.resume and input_copy.exists()):
        if collection.input_file is not None:
            shutil.copyfile(collection.input_file, input_copy)
        else:  # a --prompt-config given here replaces the datasets' own prompt configs
            write_collection_input(planned.datasets, input_copy,
                                   apply_dataset_prompts=collection.prompt_config is None)
    if collection.prompt_config is not None:
        shutil.copyfile(collection.prompt_config, run_dir / PROMPT_CONFIG_FILE)
    return CollectorRun(input_file=input_copy, output_dir=run_dir, args=[*planned.collector_args, "--host-lease"],
                        user=collector_user(run_dir))
