"""Images for targets that span machines (swarm, kubernetes): tagged into a registry, pushed, and
named by digest, so every node runs exactly the image that was built here.

Without a registry the images must be on every node under their local tags: `--node-engine
ENGINE` copies them into a node's engine (`docker save`, then `docker -H ENGINE load`), skipping
the ones it already holds with the same id.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from gym_compose.engine.docker_cli import run_docker
from gym_compose.engine.images.image_build import inspect_image
from gym_compose.errors import EngineFailure, GymComposeError

PUSH_TIMEOUT_S = 1800
COPY_TIMEOUT_S = 1800
PARALLEL_LOADS = 4  # node engines loading the saved images at once


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
            raise EngineFailure(f"could not push {remote}:\n{(result.stderr or result.stdout).strip()[-800:]}",
                                hint=f"check that the registry {registry.split('/')[0]} is reachable and that "
                                "you are logged in (`docker login HOST`)")
        pushed[local] = _digest_of(remote)
    return {key: pushed[local] for key, local in images.items()}


def _digest_of(remote: str) -> str:
    repository = remote.rsplit(":", 1)[0]
    result = run_docker(["image", "inspect", "--format", "{{range .RepoDigests}}{{println .}}{{end}}", remote],
                        timeout=30, retries=2)
    for line in result.stdout.split():
        if line.startswith(repository + "@"):
            return line
    raise EngineFailure(f"the registry gave no digest for {remote}", hint="push it again; see `docker image inspect`")


def copy_images(images: dict[str, str], engines: Sequence[str], progress=lambda line: None) -> None:
    """Every engine gets the stack's images under their local tags, with the ids they have here."""
    local = sorted(set(images.values()))
    ids = {image: (inspect_image(image) or {}).get("Id") for image in local}
    missing = {engine: [image for image in local if _image_id_on(engine, image) != ids[image]] for engine in engines}
    wanted = sorted({image for images_of in missing.values() for image in images_of})
    if not wanted:
        progress(f"every node engine holds the stack's {len(local)} images")
        return
    with tempfile.TemporaryDirectory(prefix="gym-compose-images-") as folder:
        archive = f"{folder}/images.tar"
        started = time.monotonic()
        run_docker(["save", "-o", archive, *wanted], timeout=COPY_TIMEOUT_S)
        progress(f"saved {len(wanted)} images in {time.monotonic() - started:.1f} s")

        def load(engine: str) -> None:
            started = time.monotonic()
            result = _on_node(engine, ["load", "-q", "-i", archive], COPY_TIMEOUT_S)
            if not result.ok:
                output = (result.stderr or result.stdout).strip()[-800:]
                raise EngineFailure(f"could not load the images into {engine}:\n{output}",
                                    hint="check its disk space and `docker -H ENGINE info`")
            progress(f"{engine}: loaded {', '.join(missing[engine])} in {time.monotonic() - started:.1f} s")

        receiving = [engine for engine, images_of in missing.items() if images_of]
        with ThreadPoolExecutor(max_workers=min(len(receiving), PARALLEL_LOADS)) as pool:  # each node its own engine
            for loaded in [pool.submit(load, engine) for engine in receiving]:
                loaded.result()  # the first failure, once every load has ended


def _image_id_on(engine: str, image: str) -> str:
    """The image's id in a node's engine, or '' when it does not hold it."""
    result = _on_node(engine, ["image", "inspect", "--format", "{{.Id}}", image], 60)
    if result.ok:
        return result.stdout.strip()
    if "no such image" in (result.stderr + result.stdout).lower():
        return ""
    said = (result.stderr or result.stdout).strip()[-400:]
    raise EngineFailure(f"the Docker engine at {engine} did not answer: {said}",
                        hint="check the address and that `docker -H ENGINE info` works from here (for ssh://, "
                        "key-based login and docker on the node's PATH)")


def _on_node(engine: str, args: list[str], timeout: float):
    try:
        return run_docker(["-H", engine, *args], timeout=timeout, check=False)
    except GymComposeError as error:  # the one door's wording is about this machine's engine
        raise EngineFailure(f"the Docker engine at {engine}: {error.message}",
                            hint="check the address and that `docker -H ENGINE info` works from here") from None
