"""Which folders are run folders, and the small files in them (manifest, progress, metrics).

Every reader here tolerates a file that is missing, half-written or not what it should be: a
run folder is looked at while a collection writes it, and after a crash.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import orjson

from gym_compose.collect.artifacts import ArtifactPaths
from gym_compose.errors import UserError

MANIFEST_FILE = "manifest.json"
RUN_MARKERS = ("rollouts.jsonl", "rollouts_materialized_inputs.jsonl", "progress.json", MANIFEST_FILE)
DEFAULT_RESULTS_DIR = Path("results")


def is_run_folder(path: Path) -> bool:
    return path.is_dir() and any((path / marker).is_file() for marker in RUN_MARKERS)


def run_folders_under(path: Path) -> list[Path]:
    """The run folders directly inside `path`, oldest first (by name, which ends in a timestamp, then mtime)."""
    if not path.is_dir():
        return []
    found = [child for child in path.iterdir() if is_run_folder(child)]
    return sorted(found, key=lambda p: (p.stat().st_mtime, p.name))


def resolve_run_folders(arguments: list[Path], results_dir: Path = DEFAULT_RESULTS_DIR) -> list[Path]:
    """The run folders to show: those given, or the latest one under `results_dir` when none is."""
    if not arguments:
        latest = run_folders_under(results_dir)
        if not latest:
            raise UserError(
                f"no run folder given, and none under {results_dir}/",
                hint="pass a run folder: gym-compose view results/<run-name>-<timestamp>",
            )
        return [latest[-1]]
    folders: list[Path] = []
    for path in arguments:
        if not path.exists():
            raise UserError(f"run folder not found: {path}",
                            hint="pass a folder that `gym-compose up` or `eval run` wrote")
        if not path.is_dir():
            raise UserError(f"{path} is a file, not a run folder", hint="pass the folder that holds rollouts.jsonl")
        if is_run_folder(path):
            folders.append(path)
            continue
        inside = run_folders_under(path)
        if not inside:
            raise UserError(
                f"{path} is not a run folder: it holds none of {', '.join(RUN_MARKERS)}",
                hint="pass the folder that `gym-compose up` printed after `results:`",
            )
        names = ", ".join(p.name for p in inside[-5:])
        raise UserError(
            f"{path} holds {len(inside)} run folders, not a run",
            hint=f"pass one or more of them, e.g. {path / inside[-1].name} (latest: {names})",
        )
    return folders


def read_json_file(path: Path) -> Any:
    """The parsed file, or None when it is missing or not (yet) valid JSON."""
    try:
        return orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_mtime_ns, stat.st_size)


class _AgentMetrics(msgspec.Struct):
    agent_ref: Any = None
    agent_metrics: Any = None
    key_metrics: Any = None  # group_level_metrics (most of a large file) is skipped, not decoded


_decode_metrics = msgspec.json.Decoder(list[_AgentMetrics]).decode


def read_metrics_summary(path: Path) -> list[dict[str, Any]] | None:
    """The aggregate metrics file per agent, without its per-task part; None when unreadable."""
    try:
        entries = _decode_metrics(path.read_bytes())
    except (OSError, ValueError):
        return None
    return [{"agent_ref": e.agent_ref, "agent_metrics": e.agent_metrics if isinstance(e.agent_metrics, dict) else {},
             "key_metrics": e.key_metrics if isinstance(e.key_metrics, dict) else {}} for e in entries]


class SmallFiles:
    """manifest.json, progress.json and the aggregate metrics, read again only when they change."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.paths = ArtifactPaths(folder)
        self._cache: dict[Path, tuple[tuple[int, int], Any]] = {}

    def _read(self, path: Path, convert=read_json_file) -> Any:
        stamp = _stamp(path)
        if stamp is None:
            self._cache.pop(path, None)
            return None
        cached = self._cache.get(path)
        if cached and cached[0] == stamp:
            return cached[1]
        value = convert(path)
        self._cache[path] = (stamp, value)
        return value

    def manifest(self) -> dict[str, Any]:
        value = self._read(self.folder / MANIFEST_FILE)
        return value if isinstance(value, dict) else {}

    def progress(self) -> dict[str, Any] | None:
        value = self._read(self.paths.progress)
        return value if isinstance(value, dict) else None

    def aggregate_metrics(self) -> list[dict[str, Any]]:
        """Per agent: agent_ref, agent_metrics, key_metrics (group_level_metrics are not kept)."""
        path = self.paths.aggregate_metrics
        value = self._read(path, read_metrics_summary)
        return value if isinstance(value, list) else []
