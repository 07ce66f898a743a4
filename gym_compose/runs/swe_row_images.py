"""Before a run starts: can each SWE row's verifier read the row and start the row's sandbox image?

The built-in verifier (server/swe/verifier.py) reads a row as SWE-bench Pro's (rows.SWERow) and
leases, per rollout, a sandbox of the row's image (rows.row_image: `image_template`, else
`image_repository` with the row's digest or tag); the broker starts only the images the plan
allows it (`sandbox_config`'s image, `allowed_images`, the `task_images` it builds). A row outside
them would fail each of its rollouts once the stack runs: 422 for a row the verifier cannot read,
403 "image ... is not in the plan" for an image it may not start. Here they are refused before
anything starts, naming the row (file and line), the image, and what to set.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from gym_compose.contract import AGENTS, RESOURCES_SERVERS
from gym_compose.errors import UserError
from gym_compose.plan.sandbox_defaults import DEFAULT_REPOSITORY, VERIFIER

if TYPE_CHECKING:
    from gym_compose.plan.model import Stack
    from gym_compose.plan.sandbox_plan import ServerSandboxes

RowCheck = Callable[[dict[str, Any], str, Optional[str]], None]  # (row, "FILE, line N", its agent)


@dataclass(frozen=True)
class VerifierImages:
    """What one verifier's rows make of images, and which of them its sandboxes may be."""

    server: "ServerSandboxes"
    repository: str
    template: Optional[str]
    task_aliases: frozenset[str]  # REPOSITORY:<task> of the task images the plan builds

    @property
    def key(self) -> str:
        return f"{self.server.instance}.{RESOURCES_SERVERS}.{VERIFIER}.sandbox_config"

    def refusal(self, image: str) -> Optional[tuple[str, str]]:
        """(why, what to do) when the plan would refuse a lease of `image`, else None."""
        policy = self.server.policy
        if image == self.server.image or image in self.task_aliases or policy.allows_image(image):
            return None
        task_images = self.server.task_images
        if task_images is not None and image.startswith(f"{task_images.repository}:"):
            task = image.removeprefix(f"{task_images.repository}:")
            return (f"the row's task image {image!r} is not one {self.server.instance} builds: "
                    f"{task_images.folder} has no folder {task!r}",
                    f"add the task's folder there, or fix the row's dockerhub_tag; built: "
                    f"{', '.join(sorted(self.task_aliases)[:5]) or 'none'}")
        allowed = [*([self.server.image] if self.server.image else []), *policy.allowed_images]
        return (f"the row's sandbox image {image!r} is not one the plan lets {self.server.instance} start "
                f"(allowed: {', '.join(allowed) or 'none'}), so each of its rollouts would fail with 403",
                f"set {self.key}.allowed_images to patterns that match it (e.g. "
                f"++{self.key}.allowed_images=[\"{_repository_of(image)}:*\"]), or leave allowed_images out: it "
                "then follows image_repository (or image_template)")


def sandbox_image_check(stack: "Stack") -> Optional[RowCheck]:
    """The check of one row against its verifier, or None when no agent's rows go to a SWE verifier."""
    if stack.sandboxes is None:
        return None
    config = stack.network_config
    verifiers = {server.instance: _verifier_images(server, _spec(config, server.instance, RESOURCES_SERVERS))
                 for server in stack.sandboxes.servers if server.implementation == VERIFIER}
    agents: dict[str, VerifierImages] = {}
    for name, block in config.items():
        if not isinstance(block, dict) or not isinstance(block.get(AGENTS), dict):
            continue
        for spec in block[AGENTS].values():
            reference = spec.get("resources_server") if isinstance(spec, dict) else None
            if isinstance(reference, dict) and reference.get("name") in verifiers:
                agents[name] = verifiers[reference["name"]]
    if not agents:
        return None

    def check(row: dict[str, Any], where: str, agent: Optional[str]) -> None:
        verifier = agents.get(agent or "")
        if verifier is not None:
            check_row(row, where, verifier)

    return check


def check_row(row: dict[str, Any], where: str, verifier: VerifierImages) -> None:
    from pydantic import ValidationError

    from gym_compose.server.swe.swe_row import SWERow, listed_tests, row_image

    try:
        swe_row = SWERow.model_validate(row)
        for field in ("fail_to_pass", "pass_to_pass", "selected_test_files_to_run"):
            listed_tests(getattr(swe_row, field))
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(str(part) for part in e['loc'])}: {e['msg']}"
                             for e in error.errors(include_url=False, include_input=False))
        raise UserError(f"{where}: {verifier.server.instance} cannot read the row as a SWE-bench Pro row "
                        f"({problems})", hint="prepare the rows with the benchmark's prepare script "
                        "(`gym-compose eval prepare`), or route the row to another agent") from None
    except ValueError as error:
        raise UserError(f"{where}: {verifier.server.instance} cannot read the row's test lists: {error}",
                        hint="a JSON list of test names, or a string holding one") from None
    image = row_image(swe_row, verifier.repository, verifier.template)
    refused = verifier.refusal(image)
    if refused is not None:
        raise UserError(f"{where}: {refused[0]}", hint=refused[1])


def _verifier_images(server: "ServerSandboxes", spec: dict[str, Any]) -> VerifierImages:
    aliases: frozenset[str] = frozenset()
    if server.task_images is not None:
        from gym_compose.engine.images.task_repo import task_folders

        aliases = frozenset(f"{server.task_images.repository}:{folder.name}"
                            for folder in task_folders(server.task_images.folder))
    template = spec.get("image_template")
    return VerifierImages(server=server, repository=str(spec.get("image_repository") or DEFAULT_REPOSITORY),
                          template=str(template) if template else None, task_aliases=aliases)


def _spec(config: dict[str, Any], instance: str, server_type: str) -> dict[str, Any]:
    return (config.get(instance) or {}).get(server_type, {}).get(VERIFIER) or {}


def _repository_of(image: str) -> str:
    """`host/repo:tag` or `host/repo@sha256:...` -> `host/repo`."""
    if "@" in image:
        return image.split("@", 1)[0]
    head, _, tail = image.rpartition(":")
    return head if head and "/" not in tail else image

