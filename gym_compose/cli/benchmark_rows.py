"""How many rows a benchmark config's own datasets hold, for `gym-compose list`.

Read from the benchmark's file alone (its `datasets` entries of type `benchmark`), not from the
merged config, so that listing a checkout with many benchmarks stays fast and a benchmark whose
config does not load still gets a line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import yaml

from gym_compose.config import resolve_path

NOT_PREPARED = "not prepared"


def _benchmark_datasets(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasets" and isinstance(value, list):
                yield from (entry for entry in value if isinstance(entry, dict) and entry.get("type") == "benchmark")
            else:
                yield from _benchmark_datasets(value)


def count_lines(path: Path) -> int:
    count, last = 0, b"\n"
    with open(path, "rb") as source:
        while chunk := source.read(1 << 20):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (last != b"\n")


def benchmark_rows(config_file: Path, roots: list[Path]) -> str:
    """The rows of the file's benchmark datasets ("1319"; "30+500" for several), "not prepared"
    when a dataset's file is missing, "-" when the file declares none (or does not parse)."""
    try:
        data = yaml.safe_load(config_file.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return "-"
    counts = []
    for entry in _benchmark_datasets(data):
        path = resolve_path(str(entry.get("jsonl_fpath") or ""), roots) if entry.get("jsonl_fpath") else None
        if path is None or not Path(path).is_file():
            return NOT_PREPARED
        counts.append(str(count_lines(Path(path))))
    return "+".join(counts) or "-"
