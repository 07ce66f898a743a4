"""Files of a NeMo Gym checkout that a server's config names by a path from the checkout's root.

NeMo Gym servers read such paths against the root (critpt_agent's `turn2_prompt_fpath:
benchmarks/critpt/prompts/turn2.yaml`, opened as `Path(__file__).parents[2] / path`). A NeMo
Gym-runtime image holds the server's folder at /srv/gym/<server_type>/<name>/, as in a checkout:
each file or folder named this way goes in beside it, at its own path under /srv/gym, so the
server finds it where it would in the checkout.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

# Subtrees of an instance's config that name the collector's data, not the server's files: a
# training set can be gigabytes, and the server never opens it.
NOT_SERVER_FILES = frozenset({"datasets"})
MAX_FOLDER_FILES = 2000  # a value naming a folder that large is not a file the server reads


def referenced_paths(spec: Any, root: Path, present: tuple[str, ...]) -> tuple[str, ...]:
    """The relative paths (POSIX, from `root`) that string values of `spec` name and that exist
    under `root`, outside the folders `present` (the server's own and its siblings, which the
    image holds already)."""
    root = root.resolve()
    found: set[str] = set()
    for value in _strings(spec):
        relative = _checkout_path(value)
        if relative is None or _inside_any(relative, present):
            continue
        try:
            target = (root / relative).resolve()
            if not target.is_relative_to(root) or not (target.is_file() or _small_folder(target)):
                continue
        except OSError:  # prose, not a path (a name too long, ...)
            continue
        found.add(relative)
    return tuple(sorted(path for path in found if not _inside_any(path, tuple(found - {path}))))


def _strings(node: Any, key: str | None = None):
    if key in NOT_SERVER_FILES:
        return
    if isinstance(node, dict):
        for name, value in node.items():
            yield from _strings(value, str(name))
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)
    elif isinstance(node, str):
        yield node


def _checkout_path(value: str) -> str | None:
    """`value` as a path below the checkout's root: relative, with a folder, without `..`."""
    if not value or len(value) > 500 or "\n" in value or "://" in value or "${" in value:
        return None
    path = PurePosixPath(value)
    if path.is_absolute() or len(path.parts) < 2 or ".." in path.parts:
        return None
    return path.as_posix()


def _inside_any(relative: str, folders: tuple[str, ...]) -> bool:
    path = PurePosixPath(relative)
    return any(path == PurePosixPath(folder) or PurePosixPath(folder) in path.parents for folder in folders)


def _small_folder(path: Path) -> bool:
    if not path.is_dir():
        return False
    count = 0
    for _ in path.rglob("*"):
        count += 1
        if count > MAX_FOLDER_FILES:
            return False
    return True
