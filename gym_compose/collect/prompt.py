"""NeMo Gym's --prompt-config: a YAML file with `user` (required) and `system` (optional) templates.

Each template is a str.format string filled from the row's top-level fields ({{ and }} for
literal braces); the result becomes `responses_create_params.input`. Rows that already carry
an `input` are refused, as NeMo Gym does.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gym_compose.errors import UserError


@dataclass(frozen=True)
class PromptConfig:
    user: str
    system: str | None = None


def load_prompt_config(path: Path) -> PromptConfig:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as error:
        raise UserError(f"cannot read prompt config {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise UserError(f"prompt config {path} is not valid YAML: {error}") from None
    if not isinstance(data, dict) or not isinstance(data.get("user"), str):
        raise UserError(
            f"prompt config {path} needs a string `user` template",
            hint="write e.g. `user: \"Solve: {question}\"` and optionally `system: \"...\"`",
        )
    unknown = sorted(set(data) - {"user", "system"})
    if unknown:
        raise UserError(f"prompt config {path} has unknown keys {unknown}", hint="only `user` and `system` are read")
    system = data.get("system")
    if system is not None and not isinstance(system, str):
        raise UserError(f"prompt config {path}: `system` must be a string")
    return PromptConfig(user=data["user"], system=system)


def apply_prompt(prompt: PromptConfig, row: dict[str, Any], where: str) -> dict[str, Any]:
    params = row.get("responses_create_params")
    params = dict(params) if isinstance(params, dict) else {}
    if params.get("input"):
        raise UserError(
            f"{where}: the row already has responses_create_params.input, and --prompt-config would replace it",
            hint="use --prompt-config only with raw rows that carry no input",
        )
    messages = []
    if prompt.system is not None:
        messages.append({"role": "system", "content": _fill(prompt.system, "system", row, where)})
    messages.append({"role": "user", "content": _fill(prompt.user, "user", row, where)})
    params["input"] = messages
    return {**row, "responses_create_params": params}


def _fill(template: str, name: str, row: dict[str, Any], where: str) -> str:
    """str.format_map, with every way it can fail turned into a UserError naming the template and the row."""
    try:
        return template.format_map(row)
    except KeyError as error:
        missing = error.args[0] if error.args else None
        if missing in _top_level_fields(template) and missing not in row:
            raise UserError(
                f"{where}: the {name} prompt template uses field {missing!r} but the row has only {sorted(row)}"
            ) from None
        raise UserError(
            f"{where}: the {name} prompt template {template!r} looks up key {error} that the row's value lacks"
        ) from None
    except (ValueError, IndexError) as error:
        raise UserError(
            f"{where}: the {name} prompt template {template!r} cannot be filled: {error}",
            hint="double literal braces: {{ and }}",
        ) from None
    except (AttributeError, TypeError) as error:
        raise UserError(
            f"{where}: the {name} prompt template {template!r} cannot be filled from this row: {error}",
            hint="a template field is a top-level row field; {field[key]} and {field.attribute} work only "
                 "where the row's value has that key or attribute",
        ) from None


def _top_level_fields(template: str) -> set[str]:
    """The row fields a template names: `question` for {question}, {question.text} and {question[0]}."""
    try:
        return {re.split(r"[.\[]", field, maxsplit=1)[0]
                for _, field, _, _ in string.Formatter().parse(template) if field}
    except ValueError:
        return set()
