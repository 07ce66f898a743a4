"""Images for targets that span machines (swarm, kubernetes): tagged into a registry, pushed, and
named by digest, so every node runs exactly the image that was built here.

Without a registry the images must already be on every node under their local tags (`docker save
... | ssh NODE docker load`); `--registry HOST/PREFIX` does the tagging and pushing instead.
"""

from __future__ import annotations

from gym_compose.engine.docker_cli import run_docker
from gym_compose.errors import UserError

PUSH_TIMEOUT_S = 1800


def registry_name(local: str, registry: str) -> str:
    """`gym-compose/base:abc` -> `HOST/PREFIX/base:abc` (the last path part and the tag are kept)."""
    repository, _, tag = local.rpartition(":") if ":" in local.rsplit("/", 1)[-1] else (local, "", "latest")
    return f"{registry}/{repository.rsplit('/', 1)[-1]}:{tag}"


def push_images(images: dict[str, str], registry: str, progress=lambda line: None) -> dict[str, str]:
    """Tag and push every distinct image; returns the same keys mapped to `HOST/PREFIX/name@sha256:...`."""
    pushed: dict[str, str] = {}
    for local in sorted(set(images.values())):
        remote = registry_name(local, registry)
        progress(f"pushing {local} as {remote}")
        run_docker(["tag", local, remote], timeout=60)
        result = run_docker(["push", remote], timeout=PUSH_TIMEOUT_S, retries=2, check=False)
        if not result.ok:
            raise UserError(f"could not push {remote}:\n{(result.stderr or result.stdout).strip()[-800:]}",
                            hint=f"check that the registry {registry.split('/')[0]} is reachable and that you are "
                            "logged in (`docker login HOST`)")
        pushed[local] = _digest_of(remote)
    return {key: pushed[local] for key, local in images.items()}


def _digest_of(remote: str) -> str:
    repository = remote.rsplit(":", 1)[0]
    result = run_docker(["image", "inspect", "--format", "{{range .RepoDigests}}{{println .}}{{end}}", remote],
                        timeout=30, retries=2)
    for line in result.stdout.split():
        if line.startswith(repository + "@"):
            return line
    raise UserError(f"the registry gave no digest for {remote}", hint="push it again; see `docker image inspect`")
