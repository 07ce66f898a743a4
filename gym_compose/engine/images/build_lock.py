"""A lock file so that two gym-compose processes never build the same image or cache at once, and
the marker that says a cache folder was written to the end."""

from __future__ import annotations

import fcntl
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

COMPLETE_MARKER = ".complete"


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created if missing) for the `with` block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def publish_complete(staging: Path, folder: Path) -> None:
    """Marks `staging` complete and moves it into `folder`'s place (replacing an incomplete one):
    readers use a cache folder only when it holds the marker."""
    (staging / COMPLETE_MARKER).write_text("")
    if folder.exists():
        shutil.rmtree(folder)
    staging.rename(folder)


def make_once(folder: Path, lock: Path, make: Callable[[], None]) -> None:
    """Runs `make` unless `folder` is complete, checked again under `lock`, so that two processes
    never make the same cache folder; `make` ends with `publish_complete` into `folder`."""
    if (folder / COMPLETE_MARKER).exists():
        return
    with file_lock(lock):
        if not (folder / COMPLETE_MARKER).exists():
            make()
