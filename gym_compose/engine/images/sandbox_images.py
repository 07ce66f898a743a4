"""Images a stack's sandboxes need: the broker's, the default sandbox image, and the sandbox
images servers ship as build folders. All content-hashed like the other images and buildable
with no registry (they start from the base image)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gym_compose.engine.images.build_context import ensure_built, image_exists, image_name
from gym_compose.engine.images.committed_image import STAGING, commit_image, read_changes
from gym_compose.engine.images.image_build import build_image
from gym_compose.engine.images.image_hash import ContentHash, tree_files
from gym_compose.engine.images.image_settings import ImageSettings
from gym_compose.engine.images.lean_images import DOCKER_DIR, ensure_server_image
from gym_compose.errors import UserError
from gym_compose.paths import PROJECT_ROOT

Progress = Callable[[str], None]
BROKER_IMAGE_DIR = PROJECT_ROOT / "server_images" / "sandbox_broker"
SANDBOX_SCRIPT = DOCKER_DIR / "sandbox.sh"
SANDBOX_CHANGES = DOCKER_DIR / "sandbox.changes"


def ensure_broker_image(base_tag: str, progress: Progress = print) -> str:
    return ensure_server_image(BROKER_IMAGE_DIR, base_tag, progress=progress)


def ensure_default_sandbox_image(base_tag: str, progress: Progress = print) -> str:
    """`<prefix>/sandbox:<hash>`: the base image with an unprivileged user owning /work (one
    container of the base running docker/sandbox.sh, committed with docker/sandbox.changes)."""
    settings = ImageSettings.from_env()
    script = SANDBOX_SCRIPT.read_text()
    tag = f"{settings.image_prefix}/sandbox:" + (
        ContentHash().add_text("script", script).add_text("changes", SANDBOX_CHANGES.read_text())
        .add_text("base", base_tag).hexdigest())

    def build(context: Path) -> None:
        (context / SANDBOX_SCRIPT.name).write_text(script)
        commit_image(base_tag, tag, copies=[(context, STAGING)], script=("sh", f"{STAGING}/{SANDBOX_SCRIPT.name}"),
                     changes=read_changes(SANDBOX_CHANGES, BASE_IMAGE=base_tag), progress=progress,
                     verbose=settings.verbose)

    return ensure_built(tag, settings, progress, "sandbox image", build)


def ensure_sandbox_build(folder: Path, name: str, base_tag: str, sandbox_tag: str, progress: Progress = print) -> str:
    """`<prefix>/sandbox-<name>:<hash>` from a server's own folder with a Dockerfile (which may start
    `FROM ${SANDBOX_IMAGE}` or `FROM ${BASE_IMAGE}`)."""
    settings = ImageSettings.from_env()
    if not (folder / "Dockerfile").is_file():
        raise UserError(f"sandbox image folder {folder} has no Dockerfile",
                        hint="add one (e.g. `ARG SANDBOX_IMAGE` / `FROM ${SANDBOX_IMAGE}` / `RUN ...`), or name an "
                        "image with sandbox_config.image")
    files = tree_files(folder)
    digest = (ContentHash().add_text("sandbox", sandbox_tag).add_text("base", base_tag)
              .add_tree("folder", folder, files).hexdigest())
    tag = f"{settings.image_prefix}/sandbox-{image_name(name)}:{digest}"
    return _ensure(tag, settings, progress, folder=folder,
                   build_args={"BASE_IMAGE": base_tag, "SANDBOX_IMAGE": sandbox_tag})


def require_image(image: str, where: str) -> str:
    if not image_exists(image):
        raise UserError(
            f"{where}: sandbox image {image!r} is not on this Docker engine "
            "(and gym-compose pulls nothing for sandboxes)",
            hint="build or load it first, ship a build folder with the server (sandbox_config.build), or leave "
            "sandbox_config.image out for gym-compose's default sandbox image")
    return image


def _ensure(tag: str, settings: ImageSettings, progress: Progress, *, build_args: dict[str, str],
            folder: Path) -> str:
    def build(context: Path) -> None:
        build_image(folder, tag, build_args=build_args, progress=progress, verbose=settings.verbose)

    return ensure_built(tag, settings, progress, "sandbox image", build)


def ensure_stack_sandbox_images(plan, base_tag: str, progress: Progress = print) -> dict[str, str]:
    """Images map entries for a SandboxPlan: the broker's, the egress proxy's when a server's sandboxes
    have an allow-list, and each declaring server's sandbox image."""
    from gym_compose.plan.sandbox_names import BROKER_SERVICE

    images = {BROKER_SERVICE: ensure_broker_image(base_tag, progress)}
    if plan.proxy_services():
        from gym_compose.engine.images.debian_base import ensure_egress_proxy_image
        from gym_compose.render.egress_proxy import IMAGE_KEY

        images[IMAGE_KEY] = ensure_egress_proxy_image(ImageSettings.from_env(), progress)
    default = None
    for server in plan.servers:
        if server.image:
            images[server.image_key] = require_image(server.image, f"{server.instance}.sandbox_config.image")
            continue
        default = default or ensure_default_sandbox_image(base_tag, progress)
        if server.build is not None:
            images[server.image_key] = ensure_sandbox_build(
                server.build, f"{server.implementation}-{server.build.name}", base_tag, default, progress)
        else:
            images[server.image_key] = default
        if server.task_images is not None:
            from gym_compose.engine.images.task_images import ensure_task_images

            for alias, tag in ensure_task_images(server.task_images.folder, server.task_images.repository,
                                                 progress).items():
                images[server.task_image_key(alias)] = tag
    return images
