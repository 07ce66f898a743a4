"""`gym-compose build --pull`: pull a run's task images before it starts, a few at a time.

Through the Docker CLI (so the host's `docker login` applies), `parallel` pulls at once, each with
its own time limit. Resumable: an image already on the engine is not pulled again, and the engine
keeps the layers of a pull that stopped, so a second `build --pull` goes on where the first ended.
One line per finished image with the bytes so far (the registry's compressed sizes, where known).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from gym_compose.engine import docker_cli

PULL_TIMEOUT_S = 3600.0  # one image of several GB on a slow link


@dataclass
class PullReport:
    pulled: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # image -> the engine's last words


def pull_task_images(images: list[str], sizes: dict[str, int], parallel: int, progress: Callable[[str], None],
                     present: Callable[[str], bool]) -> PullReport:
    """Pull each of `images` the engine lacks; `sizes` (image -> compressed bytes) feed the progress."""
    report = PullReport()
    todo: list[str] = []
    for image in sorted(set(images)):
        (report.present if present(image) else todo).append(image)
    total = sum(sizes.get(image, 0) for image in todo)
    if not todo:
        progress("nothing to pull: every task image the rows name is on the engine")
        return report
    progress(f"pulling {len(todo)} task image(s) ({total / 1e9:.2f} GB compressed), {max(1, parallel)} at a time; "
             f"{len(report.present)} already on the engine")
    lock = threading.Lock()
    done_bytes = [0]
    began = time.monotonic()

    def pull(image: str) -> None:
        started = time.monotonic()
        result = docker_cli.run_docker(["pull", "--quiet", image], timeout=PULL_TIMEOUT_S, retries=2, check=False)
        with lock:
            if result.ok:
                report.pulled.append(image)
                done_bytes[0] += sizes.get(image, 0)
                finished = len(report.pulled) + len(report.failed)
                progress(f"  pulled {image} in {time.monotonic() - started:.1f} s ({finished} of {len(todo)}, "
                         f"{done_bytes[0] / 1e9:.2f} of {total / 1e9:.2f} GB)")
            else:
                why = (result.stderr or result.stdout).strip().splitlines()
                report.failed[image] = why[-1] if why else f"exit code {result.returncode}"
                progress(f"  could not pull {image}: {report.failed[image]}")

    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        list(pool.map(pull, todo))
    progress(f"pulled {len(report.pulled)} of {len(todo)} in {time.monotonic() - began:.1f} s")
    return report
