"""The role defaults every target's renderer starts from: YAML in compose_templates/ (compose's
words; the other renderers read the values they map)."""

from __future__ import annotations

import copy
import functools
from typing import Any

import yaml

from gym_compose.paths import PROJECT_ROOT

TEMPLATES_DIR = PROJECT_ROOT / "compose_templates"


def load_template(name: str) -> dict[str, Any]:
    """A fresh copy of compose_templates/NAME.yaml (callers change it)."""
    return copy.deepcopy(_parsed_template(name))


@functools.lru_cache(maxsize=None)
def _parsed_template(name: str) -> dict[str, Any]:
    """Parsed once per process, with libyaml when PyYAML has it: a render asks for the templates
    once per service, and PyYAML's pure-Python parser was slow at it (docs/performance.md)."""
    with open(TEMPLATES_DIR / f"{name}.yaml", encoding="utf-8") as handle:
        return yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}


def role_defaults(role: str) -> dict[str, Any]:
    """What compose_templates/roles.yaml adds for `role` to the server defaults."""
    return copy.deepcopy(load_template("roles").get(role) or {})
