"""Build (or find, by content hash) every image a stack needs."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from gym_compose.plan import Stack


def build_stack_images(stack: Stack, progress: Callable[[str], None] = print) -> dict[str, str]:
    """Returns service name -> image tag, plus "base" -> the base image tag."""
    from gym_compose.engine.images import ensure_base_image, ensure_server_image

    base = ensure_base_image(progress=progress)
    images: dict[str, str] = {"base": base}
    by_source: dict[Path, str] = {}
    for service in stack.services:
        if service.image is not None:  # an inference engine's public image: compose pulls it
            images[service.name] = service.image
            continue
        if service.source_dir is None:
            images[service.name] = base
            continue
        source = service.source_dir.resolve()
        if source not in by_source:
            by_source[source] = ensure_server_image(source, base, progress=progress)
        images[service.name] = by_source[source]
    if stack.sandboxes is not None:
        from gym_compose.engine.sandbox_images import ensure_stack_sandbox_images

        images.update(ensure_stack_sandbox_images(stack.sandboxes, base, progress))
    return images
