"""Reading one config file, with errors that name the file and line."""

from __future__ import annotations

from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from gym_compose.errors import UserError


def read_config_file(path: Path) -> DictConfig:
    """The mapping in `path`; an empty file is an empty mapping."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"config file not found: {path}") from None
    except OSError as error:
        raise UserError(f"cannot read config file {path}: {error.strerror}") from None
    try:
        config = OmegaConf.create(text) if text.strip() else OmegaConf.create({})
    except yaml.YAMLError as error:
        raise UserError(_yaml_error_message(path, error), hint="fix the YAML syntax at that line") from None
    except Exception as error:  # OmegaConf rejects some valid YAML, e.g. non-string keys
        raise UserError(f"{path}: not a valid config: {error}") from None
    if not isinstance(config, DictConfig):
        raise UserError(
            f"{path}: a config file must hold a mapping (key: value) at the top, not a list",
        )
    return config


def _yaml_error_message(path: Path, error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark is not None else str(path)
    problem = getattr(error, "problem", None)
    context = getattr(error, "context", None)
    context_mark = getattr(error, "context_mark", None)
    if context and context_mark is not None and mark is not None and context_mark.line != mark.line:
        context = f"{context} started at line {context_mark.line + 1}"
    if problem:
        message = f"{context}, {problem}" if context else problem
    else:
        message = str(error).splitlines()[0]
    return f"YAML syntax error in {where}: {message}"
