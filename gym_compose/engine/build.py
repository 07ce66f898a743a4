"""Build (or find, by content hash) every image a stack needs."""

from __future__ import annotations

from typing import Callable

from gym_compose.contract import SERVER_TYPES
from gym_compose.plan import Service, Stack
from gym_compose.runtime_choice import LEAN, NEMO_GYM


def build_stack_images(stack: Stack, progress: Callable[[str], None] = print,
                       pinned: dict[str, str] | None = None) -> dict[str, str]:
    """Returns service name -> image tag, plus "base" -> the base image tag. A `pinned` entry (the
    same keys, an image id) is used as it is, nothing built for it (`eval rerun`)."""
    from gym_compose.engine.images import ensure_base_image, ensure_server_image
    from gym_compose.engine.nemo_gym_images import ensure_nemo_gym_runtime_image, ensure_nemo_gym_server_image

    pinned = pinned or {}
    base = pinned.get("base") or ensure_base_image(progress=progress)
    images: dict[str, str] = {"base": base}
    by_source: dict[tuple, str] = {}
    runtime: str | None = None  # the NeMo Gym runtime image, built when a server needs it
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
        if service.runtime == NEMO_GYM:
            if runtime is None:
                runtime = ensure_nemo_gym_runtime_image(base, progress=progress)
            server_type = _server_type(stack, service)
            key: tuple = (source, NEMO_GYM, server_type, service.siblings)
            if key not in by_source:
                by_source[key] = ensure_nemo_gym_server_image(source, server_type, service.siblings, runtime,
                                                              progress=progress)
        else:
            key = (source, LEAN)
            if key not in by_source:
                by_source[key] = ensure_server_image(source, base, progress=progress)
        images[service.name] = by_source[key]
    if stack.sandboxes is not None:
        from gym_compose.engine.sandbox_images import ensure_stack_sandbox_images
        from gym_compose.sandbox_stack.plan import BROKER_SERVICE

        keys = [BROKER_SERVICE] + [server.image_key for server in stack.sandboxes.servers]
        if not all(key in pinned for key in keys):
            images.update(ensure_stack_sandbox_images(stack.sandboxes, base, progress))
        images.update({key: pinned[key] for key in keys if key in pinned})
    return images


def _server_type(stack: Stack, service: Service) -> str:
    entry = stack.network_config[str(service.instance)]
    return next(key for key in SERVER_TYPES if key in entry)
