"""Before a SWE benchmark whose task images come from a registry starts anything: are its rows
prepared, and can its images be had (already on the engine, or a registry that answers)?

Both are checked and reported in one message, so a machine with neither hears about both at
once, with how to get each and the offline miniature that needs neither. Nothing is written and
nothing starts before this passes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from gym_compose.config import instances, resolve_path
from gym_compose.errors import UserError
from gym_compose.plan.sandbox_defaults import sandbox_defaults

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


def registry_host(repository: str) -> str:
    first = repository.split("/", 1)[0]
    if "/" in repository and ("." in first or ":" in first or first == "localhost"):
        return DOCKER_HUB if first in ("docker.io", "index.docker.io") else first
    return DOCKER_HUB


def probe_registry(host: str) -> Optional[str]:
    """None when the registry answers (any HTTP status), else why not."""
    import httpx

    try:
        httpx.get(f"https://{host}/v2/", timeout=PROBE_TIMEOUT_S, follow_redirects=False)
    except httpx.HTTPError as error:
        return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    return None


def check_pulled_images(data: dict[str, Any], roots: list[Path], input_file: Optional[Path] = None,
                        image_present: Optional[Callable[[str], bool]] = None,
                        probe: Callable[[str], Optional[str]] = probe_registry) -> None:
    """Raise one UserError naming what is missing (prepared rows, a registry), or return."""
    verifiers = pulled_image_verifiers(data, roots)
    if not verifiers:
        return
    if image_present is None:
        from gym_compose.engine.images.lean_images import image_exists
        image_present = image_exists
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
        absent = sorted(image for image in images if not image_present(image))
        if absent or missing or not files:
            host = registry_host(verifier.repository)
            why = probe(host)
            if why is not None:
                count = f"{len(absent)} of the rows' images are" if absent else "the rows' images are"
                problems.append(f"no container registry: {host} cannot be reached ({why}); {count} not on this "
                                f"Docker engine, and {verifier.instance} pulls each ({verifier.repository}:<tag>) when "
                                "its first rollout starts")
    if problems:
        raise UserError("this SWE benchmark cannot run here:\n" + "\n".join(f"  - {p}" for p in problems),
                        hint=f"nothing was started. The offline miniature needs neither: {MINIATURE}")
