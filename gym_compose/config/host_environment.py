"""Values a config took from the host's environment: `${oc.env:VAR}` with VAR set, and every
value that interpolates one (`${a.b}`, `${oc.select:a.b,x}`, `${.sibling}`), so that what is
shown or recorded of the config (`resolve`, the run manifest) masks them as it masks secrets.

A default (`${oc.env:VAR,false}` with VAR unset) came from the config, not the host: not masked.
The raw expression of each such value (it names variables, never holds their values) is what a
rerun evaluates again against its own environment.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

Path = tuple[str, ...]

_ENV_CALL = re.compile(r"\$\{\s*oc\.env\s*:\s*([^,}\s]+)")
_REFERENCE = re.compile(r"\$\{\s*(?:oc\.select\s*:\s*)?(\.*[A-Za-z_][\w.\-\[\]]*)\s*[,}]")


def environment_paths(raw: Any, environ: Mapping[str, str]) -> dict[Path, str]:
    """Path -> raw expression of every node of the unresolved config `raw` whose value comes from
    a variable set in `environ`, directly or through interpolations of such nodes."""
    expressions = {path: text for path, text in _strings(raw, ()) if "${" in text}
    found = {path: text for path, text in expressions.items()
             if any(name in environ for name in _ENV_CALL.findall(text))}
    grew = bool(found)
    while grew:
        grew = False
        for path, text in expressions.items():
            if path not in found and any(_overlaps(ref, known) for ref in _references(text, path) for known in found):
                found[path] = text
                grew = True
    return found


def env_names(expression: str) -> list[str]:
    """The variables an expression reads with oc.env (those of the values it interpolates aside)."""
    return _ENV_CALL.findall(expression)


def is_masked(path: Path, masked: Mapping[Path, Any] | set[Path]) -> bool:
    """Whether `path` is one of `masked` or lies under one."""
    return any(path[:length] in masked for length in range(1, len(path) + 1))


def dotted(path: Path) -> str:
    return ".".join(path)


def _strings(node: Any, path: Path):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(value, (*path, str(key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _strings(value, (*path, str(index)))
    elif isinstance(node, str):
        yield path, node


def _references(text: str, path: Path) -> list[Path]:
    """The config paths `text` interpolates, made absolute (a relative one counts from the node's
    container: `.x` a sibling, `..x` one level up)."""
    refs = []
    for target in _REFERENCE.findall(text):
        if target.startswith("oc."):
            continue
        dots = len(target) - len(target.lstrip("."))
        parts = tuple(part for part in re.sub(r"\[(\d+)\]", r".\1", target.lstrip(".")).split(".") if part)
        base = path[:-1][: len(path) - dots] if dots else ()
        refs.append((*base, *parts))
    return refs


def _overlaps(reference: Path, known: Path) -> bool:
    """A reference to a known node, to a block holding one, or into one."""
    shorter = min(len(reference), len(known))
    return reference[:shorter] == known[:shorter]
