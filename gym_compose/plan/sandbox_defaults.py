"""What the built-in SWE verifier's sandboxes may be, when its config does not say.

The verifier names a row's image through `image_repository` (or `image_template`), one image per
instance, pulled on demand; gym-compose's broker starts only images the plan allows. So a
`swebench_pro` instance whose `sandbox_config` names neither `allowed_images` nor `task_images`
may use the images its own keys make: `<image_repository>:*` and `<image_repository>@*`, or the
template with every field a `*`, pulled on demand. NeMo Gym's config runs unchanged, and a mirror
or private registry given as `image_repository` is allowed with it.
"""

from __future__ import annotations

import string
from typing import Any

from gym_compose.errors import UserError

VERIFIER = "swebench_pro"
DEFAULT_REPOSITORY = "docker.io/jefzda/sweap-images"


def sandbox_defaults(implementation: str, spec: dict[str, Any], where: str = VERIFIER) -> dict[str, Any]:
    """sandbox_config keys to add under the instance's own (which win)."""
    block = spec.get("sandbox_config")
    if implementation != VERIFIER or not isinstance(block, dict):
        return {}
    if block.get("allowed_images") or block.get("task_images"):
        return {}
    return {"allowed_images": image_patterns(spec, where), "pull": True}


def image_patterns(spec: dict[str, Any], where: str = VERIFIER) -> list[str]:
    """The images a verifier's `image_template` or `image_repository` can name, as glob patterns."""
    template = spec.get("image_template")
    if template:
        return [template_pattern(str(template), f"{where}.image_template")]
    repository = str(spec.get("image_repository") or DEFAULT_REPOSITORY)
    return [f"{repository}:*", f"{repository}@*"]


def template_pattern(template: str, where: str) -> str:
    """`registry.example/swe/{instance_id}:{dockerhub_tag}` -> `registry.example/swe/*:*`; a field the
    rows cannot fill in is refused here, not in every rollout."""
    from gym_compose.server.swe.swe_row import IMAGE_TEMPLATE_FIELDS

    pattern = []
    try:
        for literal, field, _, _ in string.Formatter().parse(template):
            pattern.append(literal)
            if field is None:
                continue
            if field not in IMAGE_TEMPLATE_FIELDS:
                raise UserError(f"{where} {template!r}: {{{field}}} is not a field of a row's image",
                                hint=f"use {', '.join('{' + name + '}' for name in IMAGE_TEMPLATE_FIELDS)}")
            pattern.append("*")
    except ValueError as error:  # an unmatched brace
        raise UserError(f"{where} {template!r} is not a format string: {error}",
                        hint="write a literal brace as {{ or }}") from None
    return "".join(pattern)
