"""Reading one config file, with errors that name the file and line."""

from __future__ import annotations

from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from gym_compose.errors import UserError

# How many values YAML aliases (`*name`) may add to one file once expanded. Aliases of aliases
# grow exponentially (9 aliases of 9 aliases, 6 deep, are 531,441 values: OmegaConf then takes
# minutes and half a gigabyte), while a config that repeats a block by alias adds a few hundred.
MAX_ALIAS_VALUES = 10_000
_COLLECTION_START = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_COLLECTION_END = (yaml.SequenceEndEvent, yaml.MappingEndEvent)


def read_config_file(path: Path) -> DictConfig:
    """The mapping in `path`; an empty file is an empty mapping."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"config file not found: {path}") from None
    except OSError as error:
        raise UserError(f"cannot read config file {path}: {error.strerror}") from None
    try:
        check_alias_expansion(text, path)
        config = OmegaConf.create(text) if text.strip() else OmegaConf.create({})
    except yaml.YAMLError as error:
        raise UserError(_yaml_error_message(path, error), hint="fix the YAML syntax at that line") from None
    except UserError:
        raise
    except Exception as error:  # OmegaConf rejects some valid YAML, e.g. non-string keys
        raise UserError(f"{path}: not a valid config: {error}") from None
    if not isinstance(config, DictConfig):
        raise UserError(
            f"{path}: a config file must hold a mapping (key: value) at the top, not a list",
        )
    return config


def check_alias_expansion(text: str, path: Path, limit: int = MAX_ALIAS_VALUES) -> None:
    """Count, from the parser's events alone (nothing is built), the values each alias adds once
    expanded; refuse the file at the alias that takes the total past `limit`, or that refers to
    the node it is inside of. A syntax error is raised as the parser's (yaml.YAMLError)."""
    sizes: dict[str, int] = {}  # anchor -> the values of its node, aliases inside expanded
    open_nodes: list[tuple[str | None, int]] = []  # (anchor, values so far) of each collection not closed
    added = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, _COLLECTION_START):
            open_nodes.append((event.anchor, 1))
            continue
        if isinstance(event, _COLLECTION_END):
            anchor, size = open_nodes.pop()
            if anchor is not None:
                sizes[anchor] = size
        elif isinstance(event, yaml.ScalarEvent):
            size = 1
            if event.anchor is not None:
                sizes[event.anchor] = size
        elif isinstance(event, yaml.AliasEvent):
            line = event.start_mark.line + 1 if event.start_mark is not None else "?"
            if any(anchor == event.anchor for anchor, _ in open_nodes):
                raise UserError(f"{path}, line {line}: alias *{event.anchor} refers to a node it is inside of",
                                hint="a config cannot hold itself; copy the values it needs instead")
            size = sizes.get(event.anchor or "", 1)  # an undefined alias is the parser's error, raised below
            added += size
            if added > limit:
                raise UserError(
                    f"{path}, line {line}: YAML aliases expand this file by more than {limit:,} values "
                    f"(*{event.anchor} alone stands for {size:,}); refused before loading it",
                    hint="aliases of aliases grow exponentially (an alias bomb): write the repeated part "
                    "once and point to it with an interpolation such as ${shared.block}",
                )
        else:
            continue
        if open_nodes:
            anchor, count = open_nodes[-1]
            open_nodes[-1] = (anchor, count + size)


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
