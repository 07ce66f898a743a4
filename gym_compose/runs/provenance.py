"""What a run's manifest records so that its results can be trusted and the run repeated: the
model endpoints and names, the sampling parameters and seeds, the rows' file hashes, gym-compose's
version and git commit, the engine's versions, the collector's options, and where each secret
that the manifest masks came from (so that a rerun can ask for it again by name).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any, Iterable

from gym_compose import __version__
from gym_compose.config.redact import is_secret_key
from gym_compose.paths import PROJECT_ROOT

MODEL_SERVER_TYPE = "responses_api_models"
SAMPLING_FLAGS = {"--temperature": "temperature", "--top-p": "top_p", "--max-output-tokens": "max_output_tokens"}
SAMPLING_PARAMS = ("temperature", "top_p", "max_output_tokens", "seed")
MODEL_NAME_KEYS = ("model", "model_name", "openai_model", "policy_model_name")
MAX_DISTINCT = 5


def file_digest(path: Path) -> dict[str, Any]:
    """{"sha256", "rows", "bytes"} of a JSONL file (rows: non-empty lines)."""
    digest, rows, size = hashlib.sha256(), 0, 0
    with open(path, "rb") as source:
        for line in source:
            digest.update(line)
            size += len(line)
            rows += bool(line.strip())
    return {"sha256": digest.hexdigest(), "rows": rows, "bytes": size}


def git_commit(root: Path = PROJECT_ROOT) -> dict[str, Any]:
    """The checkout's commit and whether it had changes; nulls when it is no git checkout."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit.strip() if commit else None, "dirty": bool(status.strip()) if status is not None else None}


def _instances(data: dict[str, Any], server_type: str) -> Iterable[tuple[str, str, dict[str, Any]]]:
    for name, block in data.items():
        if isinstance(block, dict) and isinstance(block.get(server_type), dict):
            for implementation, spec in block[server_type].items():
                if isinstance(spec, dict):
                    yield name, implementation, spec


def model_endpoints(data: dict[str, Any]) -> dict[str, Any]:
    """Per model server instance: its implementation, endpoint URLs and model names (as configured)."""
    models: dict[str, Any] = {}
    for name, implementation, spec in _instances(data, MODEL_SERVER_TYPE):
        endpoints = {key: value for key, value in spec.items() if key.endswith("base_url") and value}
        names = {key: value for key, value in spec.items() if key in MODEL_NAME_KEYS and isinstance(value, str)}
        entry: dict[str, Any] = {"implementation": implementation, "endpoints": endpoints, "names": names}
        if implementation == "mock_model":
            entry["mode"] = spec.get("mode", "oracle")
        models[name] = entry
    return models


def _summary(values: list[Any]) -> Any:
    distinct: list[Any] = []
    for value in values:
        if value not in distinct:
            distinct.append(value)
    if len(distinct) == 1:
        return distinct[0]
    return {"distinct": len(distinct), "first": distinct[:MAX_DISTINCT]}


def sampling(collector_args: list[str], rows_file: Path | None) -> dict[str, Any]:
    """The sampling options the command line set, and the values the rows carry (one value, or
    how many distinct and the first few)."""
    options = {}
    for index, arg in enumerate(collector_args):
        flag, _, inline = arg.partition("=")
        if flag in SAMPLING_FLAGS:
            value = inline or (collector_args[index + 1] if index + 1 < len(collector_args) else None)
            options[SAMPLING_FLAGS[flag]] = value
    found: dict[str, list[Any]] = {}
    if rows_file is not None and rows_file.is_file():
        with open(rows_file, encoding="utf-8") as source:
            for line in source:
                try:
                    params = (json.loads(line) or {}).get("responses_create_params")
                except (json.JSONDecodeError, AttributeError):
                    continue
                if isinstance(params, dict):
                    for key in SAMPLING_PARAMS:
                        if key in params:
                            found.setdefault(key, []).append(params[key])
    return {"options": options, "rows": {key: _summary(values) for key, values in found.items()}}


def secret_sources(data: dict[str, Any]) -> dict[str, str | None]:
    """Each secret path (dotted) of the config -> the top-level key holding the same value (e.g.
    `policy_api_key`, the key `--model-api-key` sets), or None. Values themselves never leave here."""
    top = {key: value for key, value in data.items() if is_secret_key(key) and isinstance(value, str) and value}
    sources: dict[str, str | None] = {}

    def walk(node: Any, path: list[str], secret: bool) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, path + [str(key)], secret or is_secret_key(key))
        elif secret and node is not None and not isinstance(node, (bool, dict, list)):
            dotted = ".".join(path)
            sources[dotted] = path[0] if len(path) == 1 else next(
                (name for name, value in top.items() if value == node), None)

    walk(data, [], False)
    return sources


def provenance(data: dict[str, Any], collector_args: list[str], rows_file: Path | None,
               dataset_files: list[Path], engine: dict[str, Any]) -> dict[str, Any]:
    kept_args = [arg for arg in collector_args if arg not in ("--resume", "--host-lease")]
    return {
        "gym_compose": {"version": __version__, **git_commit()},
        "engine": engine,
        "models": model_endpoints(data),
        "sampling": sampling(kept_args, rows_file),
        "rows": {
            "input": {"file": rows_file.name, **file_digest(rows_file)} if rows_file and rows_file.is_file() else None,
            "datasets": [{"file": str(path), **file_digest(path)} for path in dataset_files if path.is_file()],
        },
        "secrets": secret_sources(data),
    }


def collection_record(collector_args: list[str], num_repeats: int | None, prompt_config: bool) -> dict[str, Any]:
    """How the collector was asked to run, as a rerun repeats it: the options passed through (the
    rows come from the run folder's input.jsonl)."""
    return {"input": "input.jsonl", "collector_args": list(collector_args), "num_repeats": num_repeats,
            "prompt_config": "prompt_config.yaml" if prompt_config else None}
