"""The rows a collection run sends: an explicit --input file, or the config's benchmark datasets.

Rows of a dataset declared on an agent get `agent_ref: {name: <agent>}` when they carry none,
as NeMo Gym's collation does, so the collector can route them. Every line is checked here, so a
malformed row stops the run before any container starts.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gym_compose.collect.jsonl import read_input_lines
from gym_compose.collect.prompt import apply_prompt, load_prompt_config
from gym_compose.config import instances, resolve_path
from gym_compose.contract import AGENTS, ENVIRONMENT_SERVERS
from gym_compose.errors import UserError

COLLECTABLE_TYPES = ("benchmark",)


@dataclass(frozen=True)
class Dataset:
    instance: str
    server_type: str
    name: str
    path: Path
    num_repeats: int | None
    prompt_config: Path | None = None  # NeMo Gym turns raw benchmark rows into prompts with it


def benchmark_datasets(data: dict[str, Any], roots: list[Path]) -> list[Dataset]:
    """Every dataset of type `benchmark`, once per (file, agent), in config order."""
    found: list[Dataset] = []
    seen: set[tuple[Path, str]] = set()
    for instance in instances(data):
        if instance.server_type == ENVIRONMENT_SERVERS:
            continue  # an environment server's datasets repeat its agent's
        for entry in instance.spec.get("datasets") or []:
            if not isinstance(entry, dict) or entry.get("type") not in COLLECTABLE_TYPES:
                continue
            raw = entry.get("jsonl_fpath")
            if not raw:
                raise UserError(f"{instance.name}: dataset {entry.get('name')!r} has no jsonl_fpath")
            path = resolve_path(raw, roots)
            if path is None or not Path(path).is_file():
                hint = _prepare_hint(entry)
                raise UserError(
                    f"{instance.name}: dataset {entry.get('name')!r} file {raw} does not exist "
                    f"(looked under {', '.join(str(r) for r in roots)})",
                    hint=hint,
                )
            key = (Path(path).resolve(), instance.name)
            if key in seen:
                continue
            seen.add(key)
            prompt = None
            if entry.get("prompt_config"):
                prompt = resolve_path(entry["prompt_config"], roots)
                if prompt is None:
                    raise UserError(f"{instance.name}: dataset {entry.get('name')!r} prompt_config "
                                    f"{entry['prompt_config']} does not exist")
            found.append(Dataset(instance.name, instance.server_type, entry.get("name", ""), Path(path),
                                 entry.get("num_repeats"), Path(prompt) if prompt else None))
    return found


def dataset_rows(dataset: Dataset, apply_dataset_prompt: bool = True) -> list[tuple[int, str, dict[str, Any]]]:
    """A dataset's rows as NeMo Gym collates them: its prompt_config applied, agent_ref added for
    an agent's dataset; (line number, text, row) as `read_input_lines` gives them."""
    prompt = load_prompt_config(dataset.prompt_config) if apply_dataset_prompt and dataset.prompt_config else None
    rows = []
    for line_number, text, row in read_input_lines(dataset.path):
        if prompt is not None:
            row = apply_prompt(prompt, row, f"{dataset.path}, line {line_number}")
        if dataset.server_type == AGENTS and "agent_ref" not in row:
            row = {**row, "agent_ref": {"name": dataset.instance}}
        rows.append((line_number, text, row))
    return rows


def write_collection_input(datasets: list[Dataset], target: Path, apply_dataset_prompts: bool = True) -> int:
    """Concatenate the datasets' rows (see dataset_rows) into target. Returns the number of rows."""
    count = 0
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "w", encoding="utf-8") as out:
        for dataset in datasets:
            for _, _, row in dataset_rows(dataset, apply_dataset_prompts):
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
                count += 1
    if count == 0:
        raise UserError(f"the benchmark datasets hold no rows: {', '.join(str(d.path) for d in datasets)}")
    return count


def check_rows(path: Path) -> int:
    """How many rows the file holds; a bad line is an error naming file and line."""
    return len(read_input_lines(path))


def check_rollouts(network_config: dict[str, Any], collector_args: list[str], input_file: Path | None,
                   datasets: list[Dataset], prompt_config: Path | None,
                   row_check: Callable[[dict[str, Any], str, str | None], None] | None = None) -> int:
    """Run the collector's own checks, on the host, before anything starts: its options (as the
    collector will parse `collector_args` against the stack's in-network config), and every row
    it will send (JSON, `responses_create_params`, routing to an environment server, prompt);
    then `row_check(row, "FILE, line N", its agent)` for what the servers would refuse of a row
    (runs/swe_row_images.py). Returns the number of rollouts; none at all is an error, so an empty input
    starts nothing."""
    from gym_compose.collect.cli import options_from, parse_args
    from gym_compose.collect.routing import routing_table_from_config
    from gym_compose.collect.rows import materialize_rows

    options = options_from(parse_args(["--input", "-", "--output-dir", "-", *collector_args]), network_config)
    routing = routing_table_from_config(network_config)
    prompt = load_prompt_config(prompt_config) if prompt_config is not None else None
    if input_file is not None:
        sources = [(input_file, read_input_lines(input_file, options.limit))]
    else:  # a --prompt-config replaces the datasets' own prompt configs, as in write_collection_input
        sources = [(d.path, dataset_rows(d, apply_dataset_prompt=prompt is None)) for d in datasets]
    rollouts, rows_left = 0, options.limit
    for path, rows in sources:
        if rows_left is not None:
            rows, rows_left = rows[:rows_left], rows_left - len(rows[:rows_left])
        rollouts += len(materialize_rows(rows, path, options, routing, prompt, row_check))
    if rollouts == 0:
        named = str(input_file) if input_file is not None else ", ".join(str(d.path) for d in datasets)
        raise UserError(f"nothing to collect: {named} holds no rows", hint="pass a JSONL file with one row per line")
    return rollouts


def uniform_num_repeats(datasets: list[Dataset]) -> int | None:
    repeats = {d.num_repeats or 1 for d in datasets}
    if len(repeats) > 1:
        raise UserError(
            "the selected datasets ask for different num_repeats: "
            + ", ".join(f"{d.name}={d.num_repeats or 1}" for d in datasets),
            hint="pass --num-repeats N to use one value for every row",
        )
    value = repeats.pop() if repeats else None
    return value if value and value > 1 else None


def prepare_datasets(request) -> None:
    """Run each benchmark dataset's prepare_script (`python SCRIPT`, from the root it lives under)."""
    import subprocess
    import sys

    from gym_compose.config import load
    from gym_compose.config.search import find_path

    loaded = load(request)
    scripts: dict[Path, Path] = {}
    for instance in instances(loaded.data):
        for entry in instance.spec.get("datasets") or []:
            if isinstance(entry, dict) and entry.get("type") in COLLECTABLE_TYPES and entry.get("prepare_script"):
                found = find_path(entry["prepare_script"], loaded.search_roots)
                if found is None:
                    raise UserError(f"{instance.name}: prepare_script {entry['prepare_script']} does not exist")
                # it runs from the root its path was found under, as NeMo Gym runs it from its checkout
                scripts[found.path.resolve()] = found.root
    if not scripts:
        raise UserError("no benchmark dataset of this config has a prepare_script",
                        hint="select a benchmark with --benchmark NAME")
    for script, root in scripts.items():
        print(f"preparing: python {script} (in {root})", file=sys.stderr)
        code = subprocess.call([sys.executable, str(script)], cwd=root)
        if code != 0:
            raise UserError(f"{script} exited with {code}", exit_code=1)


def _prepare_hint(entry: dict[str, Any]) -> str:
    if entry.get("prepare_script"):
        return f"prepare it first: gym-compose eval prepare (runs {entry['prepare_script']})"
    return "check jsonl_fpath, or pass rows with --input FILE"
