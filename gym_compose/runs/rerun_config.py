"""A finished run's config again, from its manifest alone: the resolved config it recorded, with
the secrets the manifest masks asked of the user again (they are never written to a run folder).

A value the run's host environment gave (`${oc.env:VAR}`, masked too) gets its expression back,
to be evaluated against this environment. A masked secret is filled, in this order, from: an
override naming its path (`++a.b.api_key=X`),
the value given for the top-level key it came from (`--model-api-key` sets `policy_api_key`; an
`env.yaml` in the working directory may hold `policy_api_key` and other top-level secrets). A
secret left unfilled is an error that names each one and how to give it.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

from gym_compose.config.redact import MASK
from gym_compose.errors import UserError

MANIFEST_FILE = "manifest.json"
INPUT_FILE = "input.jsonl"
ENV_FILE = "env.yaml"


def read_manifest(run_dir: Path) -> dict[str, Any]:
    path = run_dir / MANIFEST_FILE
    if not path.is_file():
        raise UserError(f"{run_dir} has no {MANIFEST_FILE}: not a finished run folder",
                        hint="pass a folder that `gym-compose eval run` or `up --benchmark` wrote")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise UserError(f"{path} is not valid JSON (line {error.lineno}): {error.msg}") from None
    missing = [key for key in ("resolved_config", "images") if not isinstance(manifest.get(key), dict)]
    if missing:
        raise UserError(f"{path} lacks {', '.join(missing)}: it was written by an older gym-compose",
                        hint="rerun it by hand with the command it records under `command`")
    if not (run_dir / INPUT_FILE).is_file():
        raise UserError(f"{run_dir} has no {INPUT_FILE}: the rows of that run are gone")
    return manifest


def masked_paths(node: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(node, dict):
        return [found for key, value in node.items() for found in masked_paths(value, path + (str(key),))]
    if isinstance(node, list):
        return [found for index, value in enumerate(node) for found in masked_paths(value, path + (str(index),))]
    return [path] if node == MASK else []


def _set(node: Any, path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if isinstance(node, list):
        node[int(path[-1])] = value
    else:
        node[path[-1]] = value


def env_secrets(cwd: Path) -> dict[str, Any]:
    """Top-level values of `env.yaml` in `cwd` (NeMo Gym's file for keys and endpoints)."""
    path = cwd / ENV_FILE
    if not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        raise UserError(f"{path} is not valid YAML: {error}") from None
    return data if isinstance(data, dict) else {}


def literal(node: Any) -> Any:
    """`node` with every `${` escaped, so that the loader takes a recorded value as it is (OmegaConf
    reads a backslash before `${` as a plain `${`) and evaluates no interpolation a manifest holds."""
    if isinstance(node, dict):
        return {key: literal(value) for key, value in node.items()}
    if isinstance(node, list):
        return [literal(value) for value in node]
    return node.replace("${", "\\${") if isinstance(node, str) else node


def restore_environment_expressions(config: dict[str, Any], expressions: dict[str, Any]) -> None:
    """The values the run's host environment gave are masked in the manifest, which keeps their
    expressions (`${oc.env:VAR}`): put those back, for the loader to evaluate against this
    environment. A path the config no longer holds (the manifest was edited) is skipped."""
    for dotted, expression in sorted(expressions.items(), key=lambda item: item[0].count(".")):
        if not isinstance(expression, str) or "${" not in expression:
            continue
        try:
            _set(config, tuple(dotted.split(".")), expression)
        except (KeyError, IndexError, ValueError, TypeError):
            continue


def rerun_config(manifest: dict[str, Any], given: dict[str, Any], cwd: Path) -> dict[str, Any]:
    """The recorded config with every masked secret filled from `given` (dotted path or top-level
    name -> value, from the command line) or `env.yaml`; `config_paths` dropped (the config is
    already merged: loading those files again would merge them twice)."""
    config = literal(copy.deepcopy(manifest["resolved_config"]))  # resolved values: no interpolation evaluated again
    config.pop("config_paths", None)
    restore_environment_expressions(config, (manifest.get("provenance") or {}).get("environment") or {})
    sources = (manifest.get("provenance") or {}).get("secrets") or {}
    from_env = env_secrets(cwd)
    unfilled = []
    for path in masked_paths(config):
        dotted = ".".join(path)
        source = sources.get(dotted) or (path[0] if len(path) == 1 else None)
        for candidates in (given, from_env):
            if dotted in candidates:
                _set(config, path, literal(candidates[dotted]))
                break
            if source and candidates.get(source) not in (None, "", MASK):
                _set(config, path, literal(candidates[source]))
                break
        else:
            unfilled.append((dotted, source))
    if unfilled:
        lines = [f"  {dotted}" + (f" (the run took it from {source})" if source else "") for dotted, source in unfilled]
        hints = sorted({"--model-api-key KEY" if source == "policy_api_key" else f"{source}: ... in env.yaml"
                        for _, source in unfilled if source})
        raise UserError("the run's manifest masks secrets that a rerun needs again:\n" + "\n".join(lines),
                        hint="give them with " + ", or ".join(hints + ["++PATH=VALUE for any of them"]))
    return config
