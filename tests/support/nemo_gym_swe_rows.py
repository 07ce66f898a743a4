"""swebench_mini's instances in the row format of NeMo Gym 0.7's own swebench_pro server: the keys
of that server's example rows (`resources_servers/swebench_pro/data/example.jsonl`), each filled
from a swebench_mini row (benchmarks/swebench_mini/data/swebench_mini.jsonl, whose images are built
here). Keys swebench_mini has no value for (`evaluator_commit`, `dataset_revision`: provenance of
the public dataset) are empty; `image_digest` is empty, so the image is `<image_repository>:<dockerhub_tag>`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
MINI_ROWS = REPO / "benchmarks" / "swebench_mini" / "data" / "swebench_mini.jsonl"
MINI_TASKS = REPO / "benchmarks" / "swebench_mini" / "tasks"
SERVER = "swebench_pro_resources_server"
KEY = f"++{SERVER}.resources_servers.swebench_pro"


def mini_rows() -> dict[str, dict[str, Any]]:
    """swebench_mini's rows by task name (their `dockerhub_tag`)."""
    rows = [json.loads(line) for line in MINI_ROWS.read_text().splitlines() if line.strip()]
    return {row["dockerhub_tag"]: row for row in rows}


def nemo_gym_row(nemo_gym: Path, task: str, **changes: Any) -> dict[str, Any]:
    """The swebench_mini task `task` as a row of NeMo Gym's swebench_pro example file."""
    examples = nemo_gym / "resources_servers" / "swebench_pro" / "data" / "example.jsonl"
    example = json.loads(examples.read_text().splitlines()[0])
    mini = mini_rows()[task]
    return {**{key: mini.get(key, "") for key in example}, **changes}


def local_image_overrides(*extra: str) -> list[str]:
    """Config only, NeMo Gym's code unchanged: its own swebench_pro (not gym-compose's built-in of the
    same name), images `swebench-mini:<dockerhub_tag>` built from the task folders instead of Docker
    Hub's, and sandbox limits this machine has (its config asks for 4 CPUs and 30 GiB each)."""
    return [f"{KEY}.docker.runtime=nemo_gym",
            f"{KEY}.image_repository=swebench-mini",
            f"{KEY}.sandbox_config.task_images.folder={MINI_TASKS}",
            f"{KEY}.sandbox_config.task_images.repository=swebench-mini",
            f"{KEY}.sandbox_config.resources.cpu=1",
            f"{KEY}.sandbox_config.resources.memory_mib=1024",
            f"{KEY}.sandbox_config.network=none",
            f"{KEY}.evaluation_timeout=300",
            *extra]
