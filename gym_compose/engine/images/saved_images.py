"""Built images kept on the host as `docker save` archives, keyed by their content-hashed tag.

When an image is gone from the engine (pruned, a fresh image prefix, another machine sharing the
cache folder) but its archive is here, `docker load` brings it back in seconds instead of a build.
Only the newest few archives are kept (`KEEP`), each the whole image with its parent's layers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from gym_compose.engine import docker_cli
from gym_compose.engine.images.image_settings import ImageSettings

KEEP = 3
SAVE_TIMEOUT_S = 600
_pending: list[threading.Thread] = []


def archive_path(settings: ImageSettings, tag: str) -> Path:
    """`<cache>/images/<prefix>+<name>-<hash>.tar`: one per tag."""
    repository, _, digest = tag.rpartition(":")
    return settings.cache_dir / "images" / f"{repository.replace('/', '+')}-{digest}.tar"


def load_saved(settings: ImageSettings, tag: str, progress: Callable[[str], None]) -> bool:
    """Loads the tag's archive when there is one; True when the image is then on the engine."""
    archive = archive_path(settings, tag)
    if not archive.is_file():
        return False
    started = time.monotonic()
    result = docker_cli.run_docker(["load", "--quiet", "--input", str(archive)], timeout=SAVE_TIMEOUT_S, check=False)
    if not result.ok or tag not in result.stdout:
        # A damaged or foreign archive: build instead, and let the fresh save replace it.
        why = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["it does not hold the tag"]
        progress(f"could not load {archive.name} ({why[0]}); building {tag}")
        archive.unlink(missing_ok=True)
        return False
    archive.touch()  # the newest use decides what is kept
    progress(f"loaded {tag} from {archive} in {time.monotonic() - started:.1f} s")
    return True


def save_soon(settings: ImageSettings, tag: str, progress: Callable[[str], None]) -> None:
    """save() in a thread of its own, so that what comes next (server images, `compose up`) does
    not wait for it. The thread is not a daemon: the process waits for it before it exits (or
    call wait_for_saves()); an archive appears only when complete."""
    thread = threading.Thread(target=save, args=(settings, tag, progress), name=f"save {tag}")
    thread.start()
    _pending.append(thread)


def wait_for_saves() -> None:
    while _pending:
        _pending.pop().join()


def save(settings: ImageSettings, tag: str, progress: Callable[[str], None]) -> None:
    """Writes the image's archive (atomically) and drops all but the newest KEEP of its repository."""
    archive = archive_path(settings, tag)
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_suffix(".partial")
    started = time.monotonic()
    result = docker_cli.run_docker(["save", "--output", str(partial), tag], timeout=SAVE_TIMEOUT_S, check=False)
    if not result.ok:  # a cache only: the image itself is built
        partial.unlink(missing_ok=True)
        progress(f"could not save {tag} to the host cache: {(result.stderr or result.stdout).strip()[-300:]}")
        return
    partial.rename(archive)
    size_mib = archive.stat().st_size >> 20
    progress(f"saved {tag} to {archive} in {time.monotonic() - started:.1f} s ({size_mib} MiB)")
    repository = archive.name.rsplit("-", 1)[0]
    siblings = sorted(archive.parent.glob(f"{repository}-*.tar"), key=lambda path: path.stat().st_mtime, reverse=True)
    for stale in siblings[KEEP:]:
        stale.unlink(missing_ok=True)
