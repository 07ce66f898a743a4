"""`build --pull --save DIR` / `build --load DIR`: a run's task images as archives, for machines that
cannot reach the registry (air-gapped sites, CI runners with a cache folder).

One `docker save` archive per image (`<name>-<hash>.tar`) and `index.json` mapping each image
reference to its archive and the engine's image id. Saving is resumable (an archive whose image id
matches is kept) and writes through a temporary file, so a stopped save never leaves a truncated
archive under its final name. Loading skips images the engine already holds with the same id and
checks that each archive gave back the image it was saved from.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from gym_compose.engine import docker_cli
from gym_compose.errors import UserError

INDEX = "index.json"
ARCHIVE_TIMEOUT_S = 3600.0  # one image of several GB on a slow disk


@dataclass
class ArchiveReport:
    done: list[str] = field(default_factory=list)  # saved or loaded now
    kept: list[str] = field(default_factory=list)  # already there with the same image id
    failed: dict[str, str] = field(default_factory=dict)  # image -> why


def image_id(image: str) -> Optional[str]:
    result = docker_cli.run_docker(["image", "inspect", "--format", "{{.Id}}", image], timeout=60, check=False)
    return result.stdout.strip() or None if result.ok else None


def archive_name(image: str) -> str:
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", image.rsplit("/", 1)[-1])[:80]
    return f"{readable}-{hashlib.sha256(image.encode()).hexdigest()[:12]}.tar"


def read_index(folder: Path) -> dict[str, dict]:
    path = folder / INDEX
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise UserError(f"{path} is not an archive index: {error}",
                        hint="`gym-compose build --pull --save DIR` writes it; save into an empty folder") from None
    if not isinstance(index, dict) or not all(isinstance(entry, dict) for entry in index.values()):
        raise UserError(f"{path} is not an archive index (a mapping of image -> archive)",
                        hint="it is written by `gym-compose build --pull --save DIR`")
    return index


def write_index(folder: Path, index: dict[str, dict]) -> None:
    temporary = folder / f".{INDEX}.tmp"
    temporary.write_text(json.dumps(index, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    temporary.replace(folder / INDEX)


def save_task_images(images: list[str], folder: Path, progress: Callable[[str], None]) -> ArchiveReport:
    """Save each of `images` (on the engine) into `folder`, one archive each, and index them."""
    folder.mkdir(parents=True, exist_ok=True)
    index = read_index(folder)
    report = ArchiveReport()
    began = time.monotonic()
    for number, image in enumerate(sorted(set(images)), 1):
        identity = image_id(image)
        if identity is None:
            report.failed[image] = "not on the engine (pull it first: --pull)"
            continue
        entry = index.get(image)
        if entry and entry.get("id") == identity and (folder / entry.get("file", "")).is_file():
            report.kept.append(image)
            continue
        name = archive_name(image)
        temporary = folder / f".{name}.tmp"
        started = time.monotonic()
        result = docker_cli.run_docker(["save", "--output", str(temporary), image], timeout=ARCHIVE_TIMEOUT_S,
                                       check=False)
        if not result.ok:
            temporary.unlink(missing_ok=True)
            said = (result.stderr or result.stdout).strip().splitlines()
            report.failed[image] = said[-1] if said else f"exit code {result.returncode}"
            progress(f"  could not save {image}: {report.failed[image]}")
            continue
        temporary.replace(folder / name)
        index[image] = {"file": name, "id": identity, "bytes": (folder / name).stat().st_size}
        write_index(folder, index)  # after each image: a stopped save keeps what it finished
        report.done.append(image)
        progress(f"  saved {image} in {time.monotonic() - started:.1f} s ({number} of {len(set(images))}, "
                 f"{index[image]['bytes'] / 1e9:.2f} GB) -> {folder / name}")
    progress(f"saved {len(report.done)}, kept {len(report.kept)} already saved, of {len(set(images))} task image(s) "
             f"in {time.monotonic() - began:.1f} s; load them elsewhere with `gym-compose build ... --load {folder}`")
    return report


def load_task_images(folder: Path, progress: Callable[[str], None]) -> ArchiveReport:
    """Load every archive `folder`'s index names that the engine lacks (or holds with another id)."""
    if not folder.is_dir():
        raise UserError(f"--load {folder}: no such folder", hint="give the folder `build --pull --save DIR` wrote")
    index = read_index(folder)
    if not index:
        raise UserError(f"--load {folder}: no {INDEX} there", hint="give the folder `build --pull --save DIR` wrote")
    report = ArchiveReport()
    began = time.monotonic()
    for image, entry in sorted(index.items()):
        if image_id(image) == entry.get("id"):
            report.kept.append(image)
            continue
        archive = folder / str(entry.get("file", ""))
        if not archive.is_file():
            report.failed[image] = f"its archive {archive} is missing"
            continue
        started = time.monotonic()
        result = docker_cli.run_docker(["load", "--quiet", "--input", str(archive)], timeout=ARCHIVE_TIMEOUT_S,
                                       check=False)
        loaded = image_id(image)
        if not result.ok or loaded != entry.get("id"):
            said = (result.stderr or result.stdout).strip().splitlines()
            report.failed[image] = (said[-1] if said and not result.ok
                                    else f"{archive} did not give back {image} (image id {loaded or 'none'})")
            continue
        report.done.append(image)
        progress(f"  loaded {image} in {time.monotonic() - started:.1f} s from {archive.name}")
    progress(f"loaded {len(report.done)}, {len(report.kept)} already on the engine, of {len(index)} task image(s) "
             f"in {time.monotonic() - began:.1f} s")
    return report
