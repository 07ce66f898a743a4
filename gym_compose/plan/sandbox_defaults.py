"""What the built-in SWE verifier's sandboxes may be, when its config does not say.

NeMo Gym's own `resources_servers/swebench_pro` config names its images only through
`image_repository` (one image per instance, pulled by its provider); gym-compose's broker starts
only images the plan allows. So a `swebench_pro` instance whose `sandbox_config` names neither
`allowed_images` nor `task_images` may use `<image_repository>:*` and `<image_repository>@*`,
pulled on demand, and NeMo Gym's config runs unchanged.
"""

from __future__ import annotations

from typing import Any

VERIFIER = "swebench_pro"
DEFAULT_REPOSITORY = "docker.io/jefzda/sweap-images"


def sandbox_defaults(implementation: str, spec: dict[str, Any]) -> dict[str, Any]:
    """sandbox_config keys to add under the instance's own (which win)."""
    block = spec.get("sandbox_config")
    if implementation != VERIFIER or not isinstance(block, dict) or spec.get("image_template"):
        return {}
    if block.get("allowed_images") or block.get("task_images"):
        return {}
    repository = str(spec.get("image_repository") or DEFAULT_REPOSITORY)
    return {"allowed_images": [f"{repository}:*", f"{repository}@*"], "pull": True}
