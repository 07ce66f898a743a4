"""`--skip-missing-images`: a run without the SWE rows whose task image the registry does not have.

The preflight (stack/swe_preflight.py) names those images; the run then collects a copy of its
rows (the --input file, or the benchmark datasets' rows as the collector would get them) without
theirs, so nothing downstream knows they were there: the counts, the run folder's input.jsonl and
--resume all see the rows that run.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from gym_compose.config import LoadedConfig
from gym_compose.console import say
from gym_compose.runs.datasets import benchmark_datasets, uniform_num_repeats, write_collection_input
from gym_compose.runs.run_inputs import CollectionArgs, default_run_name
from gym_compose.stack.swe_preflight import rows_without_images


@contextmanager
def without_skipped_rows(loaded: LoadedConfig, collection: CollectionArgs, skipped: set[str]
                         ) -> Iterator[CollectionArgs]:
    """The collection to run: `collection` itself, or one whose input leaves out the rows of `skipped`."""
    if not skipped:
        yield collection
        return
    with tempfile.TemporaryDirectory(prefix="gym-compose-rows-") as folder:
        source, name, repeats = collection.input_file, collection.run_name, collection.num_repeats
        if source is None:
            datasets = benchmark_datasets(loaded.data, loaded.search_roots)
            source = Path(folder) / "datasets.jsonl"
            write_collection_input(datasets, source, apply_dataset_prompts=collection.prompt_config is None)
            name = name or default_run_name(collection, datasets)
            repeats = repeats or uniform_num_repeats(datasets)
        else:
            name = name or source.stem
        target = Path(folder) / "rows.jsonl"
        dropped = rows_without_images(source, target, loaded.data, loaded.search_roots, skipped)
        say(f"left out {dropped} row(s) of {source.name if collection.input_file else 'the datasets'}")
        yield replace(collection, input_file=target, run_name=name, num_repeats=repeats)
