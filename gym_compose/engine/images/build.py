"""Build (or find, by content hash) every image a stack needs."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Callable

from gym_compose.contract import SERVER_TYPES
from gym_compose.plan.model import Service, Stack
from gym_compose.plan.runtime_choice import LEAN, NEMO_GYM

PARALLEL_BUILDS = 3


def build_stack_images(stack: Stack, progress: Callable[[str], None] = print,
                       pinned: dict[str, str] | None = None) -> dict[str, str]:
    """Returns service name -> image tag, plus "base" -> the base image tag. A `pinned` entry (the
    same keys, an image id) is used as it is, nothing built for it (`eval rerun`). The engine is
    asked about the images it should have in one call (`expected_tags`), not one or two per image."""
    from gym_compose.engine.images.image_build import inspected_together
    from gym_compose.engine.images.lean_images import expected_tags

    pinned = pinned or {}
    lean = [(service.source_dir, service.extra_requirements) for service in stack.services
            if service.name not in pinned and service.image is None and service.source_dir is not None
            and service.runtime != NEMO_GYM]
    with inspected_together([] if "base" in pinned else expected_tags(lean)):
        return _stack_images(stack, progress, pinned)


def _stack_images(stack: Stack, progress: Callable[[str], None], pinned: dict[str, str]) -> dict[str, str]:
    from gym_compose.engine.images.lean_images import ensure_base_image, ensure_server_image
    from gym_compose.engine.images.nemo_gym_images import ensure_nemo_gym_runtime_image, ensure_nemo_gym_server_image

    base = pinned.get("base") or ensure_base_image(progress=progress)
    images: dict[str, str] = {"base": base}
    builds: dict[tuple, Callable[[], str]] = {}  # one per distinct server image, run in parallel below
    service_builds: dict[str, tuple] = {}
    runtime: str | None = None  # the NeMo Gym runtime image, built when a server needs it
    for service in stack.services:
        if service.name in pinned:
            images[service.name] = pinned[service.name]
        elif service.image is not None:  # an inference engine's public image: compose pulls it
            images[service.name] = service.image
        elif service.source_dir is None:
            images[service.name] = base
        elif service.runtime == NEMO_GYM:
            if runtime is None:  # the parent of every NeMo Gym server image: first, once
                runtime = ensure_nemo_gym_runtime_image(base, progress=progress)
            source, server_type = service.source_dir.resolve(), _server_type(stack, service)
            key: tuple = (source, NEMO_GYM, server_type, service.siblings, service.referenced_paths)
            builds.setdefault(key, partial(ensure_nemo_gym_server_image, source, server_type, service.siblings,
                                           runtime, progress=progress, referenced=service.referenced_paths))
            service_builds[service.name] = key
        else:
            key = (service.source_dir.resolve(), LEAN, service.extra_requirements)
            builds.setdefault(key, partial(ensure_server_image, key[0], base, progress=progress,
                                           extra_requirements=service.extra_requirements))
            service_builds[service.name] = key
    built = _in_parallel(builds)
    images = {"base": base, **{service.name: built[service_builds[service.name]] if service.name in service_builds
                               else images[service.name] for service in stack.services}}
    if stack.sandboxes is not None:
        from gym_compose.engine.images.sandbox_images import ensure_stack_sandbox_images
        from gym_compose.plan.sandbox_names import BROKER_SERVICE
        from gym_compose.render.egress_proxy import IMAGE_KEY as PROXY_IMAGE_KEY

        keys = [BROKER_SERVICE] + [server.image_key for server in stack.sandboxes.servers]
        keys += [PROXY_IMAGE_KEY] if stack.sandboxes.proxy_services() else []
        if not all(key in pinned for key in keys):
            images.update(ensure_stack_sandbox_images(stack.sandboxes, base, progress))
        images.update({key: pinned[key] for key in keys if key in pinned})
    return images


def _in_parallel(builds: dict[tuple, Callable[[], str]]) -> dict[tuple, str]:
    """Runs independent image builds side by side: the classic builder spends much of a step
    waiting on the engine (a container commit), so a few at once finish sooner than in a row."""
    if len(builds) <= 1:
        return {key: build() for key, build in builds.items()}
    with ThreadPoolExecutor(max_workers=PARALLEL_BUILDS) as pool:
        futures = {key: pool.submit(build) for key, build in builds.items()}
        return {key: future.result() for key, future in futures.items()}


def _server_type(stack: Stack, service: Service) -> str:
    entry = stack.network_config[str(service.instance)]
    return next(key for key in SERVER_TYPES if key in entry)
