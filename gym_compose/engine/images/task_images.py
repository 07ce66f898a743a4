"""Sandbox images of SWE task repositories, built with no registry.

The parent is `debian-swe` (an mmdebstrap root filesystem with Python, pytest, git and patch,
imported once per machine); each task adds one small layer: its repository at /app as a git
repository at its base commit. Tags carry a hash of everything that goes in, so an unchanged task
is never rebuilt; a lease asks for `<repository>:<task>` and the plan hands the broker the tag.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gym_compose.engine.images.build_context import BuildContext, build_lock, image_name
from gym_compose.engine.images.debian_base import ensure_debian_swe_image
from gym_compose.engine.images.image_build import build_image, inspect_image
from gym_compose.engine.images.image_hash import ContentHash
from gym_compose.engine.images.image_settings import ImageSettings
from gym_compose.engine.images.lean_images import DOCKER_DIR
from gym_compose.engine.images.task_repo import (
    AUTHOR,
    COMMIT_DATE,
    REPO_FOLDER,
    commit_repository,
    repository_files,
    task_folders,
)
from gym_compose.errors import UserError

Progress = Callable[[str], None]
DOCKERFILE = DOCKER_DIR / "swe-task.Dockerfile"
PARALLEL_BUILDS = 4


def task_image_tag(task_dir: Path, repository: str, parent_id: str, settings: ImageSettings) -> str:
    dockerfile = DOCKERFILE.read_text()
    digest = (ContentHash().add_text("dockerfile", dockerfile).add_text("parent", parent_id)
              .add_text("commit", f"{AUTHOR}|{COMMIT_DATE}|{task_dir.name}")
              .add_tree("repo", task_dir / REPO_FOLDER, repository_files(task_dir)).hexdigest())
    return f"{settings.image_prefix}/{image_name(repository)}:{image_name(task_dir.name)}-{digest}"


def ensure_task_images(folder: Path, repository: str, progress: Progress = print) -> dict[str, str]:
    """`<repository>:<task>` -> local image tag, for every task folder under `folder` (built when missing)."""
    settings = ImageSettings.from_env()
    parent = ensure_debian_swe_image(settings, progress)
    parent_image = inspect_image(parent)
    if parent_image is None:
        raise UserError(f"the SWE parent image {parent} vanished right after it was made")
    tags = {f"{repository}:{task.name}": (task, task_image_tag(task, repository, parent_image["Id"], settings))
            for task in task_folders(folder)}
    missing = [(task, tag) for task, tag in tags.values() if inspect_image(tag) is None]
    if missing:
        progress(f"building {len(missing)} SWE task image(s) of {repository} ({len(tags) - len(missing)} up to date)")
        with ThreadPoolExecutor(max_workers=PARALLEL_BUILDS) as pool:
            for future in [pool.submit(_build, task, tag, parent, settings, progress) for task, tag in missing]:
                future.result()
    else:
        progress(f"SWE task images of {repository} are up to date ({len(tags)})")
    return {alias: tag for alias, (_, tag) in tags.items()}


def _build(task_dir: Path, tag: str, parent: str, settings: ImageSettings, progress: Progress) -> None:
    with build_lock(settings, tag), BuildContext(settings) as context:
        if inspect_image(tag) is not None:
            return
        commit_repository(task_dir, context / "app")
        (context / "Dockerfile").write_text(DOCKERFILE.read_text())
        build_image(context, tag, build_args={"SWE_BASE": parent}, progress=lambda line: None,
                    verbose=settings.verbose)
    progress(f"built SWE task image {tag}")
