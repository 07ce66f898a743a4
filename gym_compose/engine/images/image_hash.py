"""Content hashes for image tags: the same inputs always give the same tag, any change a new one."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

TAG_HASH_LENGTH = 16

# Never part of an image: caches, VCS data, virtual environments, editor droppings.
ALWAYS_SKIPPED = frozenset(
    {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".git", ".venv", "venv", ".DS_Store"}
)


def tree_files(root: Path, skip: Iterable[str] = ()) -> list[Path]:
    """Files under `root` (relative paths, sorted) that go into an image.

    `skip` holds relative paths (`tests`, `engine`, `cli.py`) dropped together with what they hold.
    """
    skipped = {Path(entry) for entry in skip}
    files: list[Path] = []
    for directory, dirnames, filenames in os.walk(root):
        relative_dir = Path(directory).relative_to(root)
        dirnames[:] = sorted(
            name for name in dirnames if name not in ALWAYS_SKIPPED and relative_dir / name not in skipped
        )
        for name in filenames:
            relative = relative_dir / name
            if name in ALWAYS_SKIPPED or name.endswith((".pyc", ".pyo")) or relative in skipped:
                continue
            files.append(relative)
    return sorted(files)


class ContentHash:
    """Accumulates named inputs; `hexdigest()` is the short hash that goes into a tag."""

    def __init__(self) -> None:
        self._sha = hashlib.sha256()

    def add_text(self, name: str, text: str) -> "ContentHash":
        return self.add_bytes(name, text.encode())

    def add_bytes(self, name: str, data: bytes) -> "ContentHash":
        self._sha.update(f"{name}\0{len(data)}\0".encode())
        self._sha.update(data)
        return self

    def add_tree(self, name: str, root: Path, files: Iterable[Path]) -> "ContentHash":
        for relative in files:
            path = root / relative
            executable = "x" if os.access(path, os.X_OK) else "-"
            self.add_bytes(f"{name}/{relative.as_posix()}:{executable}", path.read_bytes())
        return self

    def hexdigest(self) -> str:
        return self._sha.hexdigest()[:TAG_HASH_LENGTH]
