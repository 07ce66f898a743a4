"""What every image build shares: the build-once sequence (hash -> exists? -> lock -> build), and
the scratch build folder with the helpers that fill it."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from gym_compose.engine.images import saved_images
from gym_compose.engine.images.build_lock import file_lock
from gym_compose.engine.images.image_build import inspect_image
from gym_compose.engine.images.image_settings import ImageSettings
from gym_compose.errors import UserError


def ensure_built(tag: str, settings: ImageSettings, progress: Callable[[str], None], what: str,
                 build: Callable[[Path], None], note: str = "", saved: bool = False) -> str:
    """`tag` when the engine has it, else `build(context)` makes it: under a lock on the tag (two
    processes never build the same image), in a fresh build folder. `saved`: the image is also
    kept on the host (saved_images; written in the background), and loaded from there rather than
    built when it is there.
    `what` and `note` word the progress lines ("base image", "offline bootstrap")."""
    suffix = f" ({note})" if note else ""
    if image_exists(tag):
        progress(f"{what} {tag} is up to date{suffix}")
        return tag
    with build_lock(settings, tag):
        if image_exists(tag) or (saved and saved_images.load_saved(settings, tag, progress)):
            return tag
        progress(f"building {what} {tag}{suffix}")
        with BuildContext(settings) as context:
            build(context)
        if saved:
            saved_images.save_soon(settings, tag, progress)
    return tag


def build_lock(settings: ImageSettings, tag: str):
    return file_lock(settings.cache_dir / "locks" / f"{image_name(tag)}.lock")


def image_exists(tag: str) -> bool:
    return inspect_image(tag) is not None


def image_name(implementation: str) -> str:
    """A valid Docker repository name component for an implementation folder name."""
    name = re.sub(r"[^a-z0-9._-]+", "-", implementation.lower()).strip("._-")
    if not name:
        raise UserError(f"Cannot derive an image name from implementation folder {implementation!r}.")
    return name


class BuildContext:
    """A scratch folder next to the cache (same file system, so wheels are hard-linked)."""

    def __init__(self, settings: ImageSettings):
        self.parent = settings.cache_dir / "contexts"

    def __enter__(self) -> Path:
        self.parent.mkdir(parents=True, exist_ok=True)
        self.path = Path(tempfile.mkdtemp(dir=self.parent))
        return self.path

    def __exit__(self, *exc_info) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def link_wheels(wheelhouse: Path, target: Path) -> None:
    for wheel in wheelhouse.glob("*.whl"):
        link_file(wheel, target / wheel.name)


def link_file(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def copy_files(root: Path, files: list[Path], target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for relative in files:
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / relative, destination)
