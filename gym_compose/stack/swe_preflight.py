"""Before a SWE benchmark whose task images come from a registry starts anything: are its rows
prepared, and can its images be had (already on the engine, or a registry that answers)?

Both are checked and reported in one message, so a machine with neither hears about both at
once, with how to get each and the offline miniature that needs neither. Nothing is written and
nothing starts before this passes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional

from gym_compose.config import instances, resolve_path
from gym_compose.contract import DOCKER_HUB as HUB
from gym_compose.contract import image_registry
from gym_compose.errors import UserError
from gym_compose.plan.sandbox_defaults import sandbox_defaults

if TYPE_CHECKING:
    from gym_compose.engine.registry_manifests import ManifestAnswer

VERIFIER = "swebench_pro"
PROBE_TIMEOUT_S = 5.0
MINIATURE = "gym-compose up --benchmark swebench_mini"
DOCKER_HUB = "registry-1.docker.io"


@dataclass(frozen=True)
class PulledImages:
    """A verifier whose images the broker pulls: where its rows should be and how rows name images."""

    instance: str
    repository: str
    template: Optional[str]
    datasets: list[tuple[str, str, Optional[Path]]]  # (agent, jsonl_fpath as written, the file if it exists)
    prepare_scripts: list[str]


def pulled_image_verifiers(data: dict[str, Any], roots: list[Path]) -> list[PulledImages]:
    found = instances(data)
    result = []
    for verifier in found:
        sandbox = verifier.spec.get("sandbox_config") or {}
        if verifier.implementation != VERIFIER or not isinstance(sandbox, dict):
            continue
        if not {**sandbox_defaults(verifier.implementation, verifier.spec, verifier.name), **sandbox}.get("pull"):
            continue
        datasets, scripts = [], []
        for agent in found:
            reference = agent.spec.get("resources_server") or {}
            if agent.server_type != "responses_api_agents" or reference.get("name") != verifier.name:
                continue
            for entry in agent.spec.get("datasets") or []:
                if isinstance(entry, dict) and entry.get("type") == "benchmark" and entry.get("jsonl_fpath"):
                    path = resolve_path(entry["jsonl_fpath"], roots)
                    datasets.append((agent.name, str(entry["jsonl_fpath"]), Path(path) if path else None))
                    if entry.get("prepare_script"):
                        scripts.append(str(entry["prepare_script"]))
        result.append(PulledImages(verifier.name, str(verifier.spec.get("image_repository") or
                                                      "docker.io/jefzda/sweap-images"),
                                   verifier.spec.get("image_template"), datasets, scripts))
    return result


def row_images(files: Iterable[Path], repository: str, template: Optional[str]) -> set[str]:
    from gym_compose.server.swe.swe_row import SWERow, row_image

    images = set()
    for path in files:
        with open(path, encoding="utf-8") as rows:
            for line in rows:
                if line.strip():
                    row = json.loads(line)
                    stub = SWERow.model_construct(instance_id=row.get("instance_id", ""),
                                                  dockerhub_tag=row.get("dockerhub_tag", ""),
                                                  image_digest=row.get("image_digest", ""))
                    images.add(row_image(stub, repository, template))
    return images


def rows_task_images(data: dict[str, Any], roots: list[Path], input_file: Optional[Path] = None) -> list[str]:
    """Every task image the rows of the SWE benchmarks that pull theirs name (`--input`'s rows, else
    the benchmark's prepared datasets)."""
    images: set[str] = set()
    for verifier in pulled_image_verifiers(data, roots):
        files = [input_file] if input_file is not None else [path for _, _, path in verifier.datasets if path]
        images |= row_images(files, verifier.repository, verifier.template)
    return sorted(images)


def registry_host(repository: str) -> str:
    """The host that serves a repository's registry API (Docker Hub's is registry-1.docker.io)."""
    registry = image_registry(f"{repository}/x")
    return DOCKER_HUB if registry == HUB else registry


def probe_registry(host: str) -> Optional[str]:
    """None when the registry answers (any HTTP status), else why not. Over HTTPS, and over plain
    HTTP too where the engine would pull that way (a loopback or `insecure-registries` host)."""
    import httpx

    try:
        httpx.get(f"https://{host}/v2/", timeout=PROBE_TIMEOUT_S, follow_redirects=False)
    except httpx.HTTPError as error:
        why = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        from gym_compose.engine.engine_info import insecure_registry

        if not insecure_registry(host):
            return why
        try:
            httpx.get(f"http://{host}/v2/", timeout=PROBE_TIMEOUT_S, follow_redirects=False)
        except httpx.HTTPError:
            return f"{why}; nor over plain HTTP"
    return None


Manifests = Callable[[list[str]], dict[str, "ManifestAnswer"]]
INSPECT_BATCH = 100  # images asked of the engine in one `docker image inspect`


class _EngineImages:
    """Which images the engine has, asked in batches the first time (one call per 100 rows, not one each)."""

    def __init__(self) -> None:
        self.known: dict[str, bool] = {}

    def ask(self, images: list[str]) -> None:
        from gym_compose.engine.images.image_build import inspect_images

        todo = [image for image in dict.fromkeys(images) if image not in self.known]
        for start in range(0, len(todo), INSPECT_BATCH):
            answers = inspect_images(todo[start:start + INSPECT_BATCH])
            self.known.update({image: answer is not None for image, answer in answers.items()})

    def __call__(self, image: str) -> bool:
        if image not in self.known:
            self.ask([image])
        return self.known[image]


@dataclass
class ImagesToPull:
    """What the preflight found: the images the run leaves out (--skip-missing-images) and the
    compressed bytes of those the broker will pull."""

    skipped: set[str]
    sizes: dict[str, Optional[int]] = field(default_factory=dict)  # image the engine lacks -> compressed bytes

    @property
    def pull_bytes(self) -> int:
        """Of the images whose size the registry told."""
        return sum(size for size in self.sizes.values() if size is not None)

    @property
    def unsized(self) -> int:
        return sum(size is None for size in self.sizes.values())

    @property
    def count(self) -> int:
        return len(self.sizes)


def ask_registries(images: list[str]) -> dict[str, "ManifestAnswer"]:
    """Each image's manifest, asked of its registry with the host's `docker login` (concurrently)."""
    from functools import lru_cache

    from gym_compose.engine.engine_info import insecure_registry
    from gym_compose.engine.registry_login import registry_credentials
    from gym_compose.engine.registry_manifests import ManifestClient

    # once per registry, not per image: a credential helper is a process to start
    return ManifestClient(lru_cache(maxsize=None)(registry_credentials), insecure_registry).ask_all(images)


def check_pulled_images(data: dict[str, Any], roots: list[Path], input_file: Optional[Path] = None,
                        image_present: Optional[Callable[[str], bool]] = None,
                        probe: Callable[[str], Optional[str]] = probe_registry,
                        manifests: Manifests = ask_registries, skip_missing: bool = False) -> ImagesToPull:
    """Raise one UserError naming what is missing (prepared rows, a registry, images in it, a
    login), or return the images the registry does not have that `skip_missing` lets the run leave
    out (their rows go: rows_without_images)."""
    verifiers = pulled_image_verifiers(data, roots)
    result = ImagesToPull(set())
    if not verifiers:
        return result
    present: Callable[[str], bool] = image_present or _EngineImages()
    problems: list[str] = []
    for verifier in verifiers:
        files = [input_file] if input_file is not None else [path for _, _, path in verifier.datasets if path]
        missing = [] if input_file is not None else [(agent, raw) for agent, raw, path in verifier.datasets if not path]
        for agent, raw in missing:
            how = ("make them where the internet is reachable with `gym-compose eval prepare` and the same config "
                   f"arguments (it runs {', '.join(sorted(set(verifier.prepare_scripts)))})" if verifier.prepare_scripts
                   else "prepare them with the benchmark's prepare script")
            problems.append(f"no prepared rows: {raw} (dataset of {agent}) does not exist; {how}")
        images = row_images(files, verifier.repository, verifier.template) if files and not missing else set()
        if isinstance(present, _EngineImages):
            present.ask(sorted(images))
        absent = sorted(image for image in images if not present(image))
        if absent or missing or not files:
            host = registry_host(verifier.repository)
            why = probe(host)
            if why is not None:
                count = f"{len(absent)} of the rows' images are" if absent else "the rows' images are"
                problems.append(f"no container registry: {host} cannot be reached ({why}); {count} not on this "
                                f"Docker engine, and {verifier.instance} pulls each ({verifier.repository}:<tag>) when "
                                "its first rollout starts")
            elif absent:
                found, not_there, sizes = registry_problems(verifier, absent, manifests, skip_missing)
                problems.extend(found)
                result.skipped.update(not_there if skip_missing else ())
                result.sizes.update(sizes)
    if problems:
        raise UserError("this SWE benchmark cannot run here:\n" + "\n".join(f"  - {p}" for p in problems),
                        hint=f"nothing was started. The offline miniature needs neither: {MINIATURE}")
    return result


def registry_problems(verifier: PulledImages, absent: list[str], manifests: Manifests,
                      skip_missing: bool = False) -> tuple[list[str], list[str], dict[str, Optional[int]]]:
    """Ask the registry for each image the engine lacks: (problems, the images it does not have,
    the compressed sizes of those it has).
    A missing image is a problem unless `skip_missing`; a login the registry wants always is."""
    import time

    from gym_compose.console import say

    registries = sorted({image_registry(image) for image in absent})
    say(f"checking {len(absent)} task image(s) not on the engine in {', '.join(registries)} ...")
    began = time.monotonic()
    answers = manifests(absent)
    not_there = sorted(image for image, answer in answers.items() if answer.found is False)
    locked = sorted({image_registry(image) for image, answer in answers.items() if answer.needs_login})
    unknown = [answer for answer in answers.values() if answer.found is None and not answer.needs_login]
    sizes = {image: answer.compressed_bytes for image, answer in answers.items() if answer.found}
    known = [size for size in sizes.values() if size is not None]
    unasked = f"; the size of {len(sizes) - len(known)} not asked" if len(known) < len(sizes) else ""
    say(f"  {len(sizes)} found ({sum(known) / 1e9:.2f} GB to pull{unasked}), {len(not_there)} missing"
        + (f", {len(unknown)} not told" if unknown else "") + f" ({time.monotonic() - began:.1f} s)")
    for answer in unknown[:3]:
        say(f"  warning: {answer.image}: {answer.problem}; its rollouts fail if the broker cannot pull it")
    problems = []
    shown = ", ".join(not_there[:10]) + (f" and {len(not_there) - 10} more" if len(not_there) > 10 else "")
    if not_there and skip_missing:
        say(f"  leaving out the rows of {len(not_there)} image(s) their registry does not have "
            f"(--skip-missing-images): {shown}")
    elif not_there:
        problems.append(f"{len(not_there)} of the rows' images are not in their registry: {shown}; fix the rows' "
                        f"dockerhub_tag or image_digest, or {verifier.instance}'s image_repository, or leave "
                        "those rows out with --skip-missing-images")
    for registry in locked:
        why = next(answer.problem for image, answer in answers.items()
                   if answer.needs_login and image_registry(image) == registry)
        problems.append(f"registry {registry} needs a login: {why}; run `docker login {registry}` on this host "
                        "(gym-compose hands its credentials to the sandbox broker)")
    return problems, not_there, sizes


def rows_without_images(source: Path, target: Path, data: dict[str, Any], roots: list[Path],
                        images: set[str]) -> int:
    """Copy `source`'s rows to `target` but those whose image (under any pulling verifier's naming)
    is in `images`; returns how many were left out."""
    from gym_compose.server.swe.swe_row import SWERow, row_image

    namings = [(v.repository, v.template) for v in pulled_image_verifiers(data, roots)]
    dropped = 0
    with open(source, encoding="utf-8") as rows, open(target, "w", encoding="utf-8") as out:
        for line in rows:
            if not line.strip():
                continue
            row = json.loads(line)
            stub = SWERow.model_construct(instance_id=row.get("instance_id", ""),
                                          dockerhub_tag=row.get("dockerhub_tag", ""),
                                          image_digest=row.get("image_digest", ""))
            if any(row_image(stub, repository, template) in images for repository, template in namings):
                dropped += 1
                continue
            out.write(line if line.endswith("\n") else line + "\n")
    return dropped
