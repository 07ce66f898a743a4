"""Build (or find, by content hash) every image a stack needs."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from gym_compose.plan import Stack


def build_stack_images(stack: Stack, progress: Callable[[str], None] = print,
                       pinned: dict[str, str] | None = None) -> dict[str, str]:
    """Returns service name -> image tag, plus "base" -> the base image tag. A `pinned` entry (the
    same keys, an image id) is used as it is, nothing built for it (`eval rerun`)."""
    from gym_compose.engine.images import ensure_base_image, ensure_server_image

    pinned = pinned or {}
    base = pinned.get("base") or ensure_base_image(progress=progress)
    images: dict[str, str] = {"base": base}
    by_source: dict[Path, str] = {}
    for service in stack.services:
        if service.name in pinned:
            images[service.name] = pinned[service.name]
            continue
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
        from gym_compose.sandbox_stack.plan import BROKER_SERVICE

        keys = [BROKER_SERVICE] + [server.image_key for server in stack.sandboxes.servers]
        if not all(key in pinned for key in keys):
            images.update(ensure_stack_sandbox_images(stack.sandboxes, base, progress))
        images.update({key: pinned[key] for key in keys if key in pinned})
    return images
