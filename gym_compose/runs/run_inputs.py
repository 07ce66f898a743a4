"""A run's inputs: every row and option checked as the collector will check them, before anything
is written or started; then the rows (and prompt config) copied into the run folder."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from gym_compose.config import LoadedConfig
from gym_compose.contract import COLLECTOR_RESULTS
from gym_compose.errors import UserError
from gym_compose.inputs import Dataset, benchmark_datasets, check_rollouts, uniform_num_repeats, write_collection_input
from gym_compose.plan import Stack
from gym_compose.render import CollectorRun
from gym_compose.runs.run_folders import collector_user
from gym_compose.swe.row_images import sandbox_image_check

INPUT_FILE = "input.jsonl"
PROMPT_CONFIG_FILE = "prompt_config.yaml"


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
class PlannedRun:
    """A collection that passed every check; nothing has been written yet."""

    name: str
    datasets: list[Dataset]
    collector_args: list[str]


def plan_run(loaded: LoadedConfig, stack: Stack, collection: CollectionArgs) -> PlannedRun:
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
    check_rollouts(stack.network_config, extra, collection.input_file, datasets, collection.prompt_config,
                   sandbox_image_check(stack))
    if collection.resume:
        extra.append("--resume")
    if collection.prompt_config is not None:
        extra += ["--prompt-config", f"{COLLECTOR_RESULTS}/{PROMPT_CONFIG_FILE}"]
    name = collection.run_name or default_run_name(collection, datasets)
    return PlannedRun(name=name, datasets=datasets, collector_args=extra)


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
