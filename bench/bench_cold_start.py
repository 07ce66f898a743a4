"""Cold starts of example_single_tool_call: `gym-compose up -d` until all healthy, with no images.

    .venv/bin/python -m bench.bench_cold_start [--no-pip-cache]

Two starts under a fresh image prefix (GYM_COMPOSE_IMAGE_PREFIX), so that no gym-compose image of
this prefix exists and other sessions' images are left alone, and a fresh GYM_COMPOSE_CACHE_DIR:
- no images, empty caches: first; with --no-pip-cache pip's own download cache is bypassed too
  (wheels then come from PyPI, Debian packages from the mirror);
- images gone, host caches kept: then, with the prefix's images removed and the cache folder that
  the first start filled (wheelhouses, Debian root filesystems, saved images) kept, as a machine
  whose images were pruned has it.
The images are built offline (GYM_COMPOSE_OFFLINE=1: mmdebstrap, no pull attempt). Each start's
own output is printed with the seconds since it began (one line per build step with its duration),
then the wall times and the load average. The stack and the prefix's images are removed after each.
The engine's layer cache is not emptied (other sessions share it): a step whose parent image and
instruction match a cached layer is reused, as it would be on a machine that built before.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLI = [sys.executable, "-m", "gym_compose"]
PROJECT = "gym-compose-bench-cold"
HEAD_PORT = "11094"
SELECTOR = ["--resources-server", "example_single_tool_call"]
TIMEOUT_S = 1800


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-pip-cache", action="store_true", help="empty caches also bypass pip's download cache")
    args = parser.parse_args()
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="gc-cold-") as scratch:
        prefix = f"gym-compose-bench-cold-{os.getpid()}"
        base_env = {**os.environ, "GYM_COMPOSE_IMAGE_PREFIX": prefix, "GYM_COMPOSE_OFFLINE": "1",
                    "GYM_COMPOSE_CACHE_DIR": str(Path(scratch) / "cache")}
        for label, empty_caches in (("no images, empty caches", True), ("images gone, host caches kept", False)):
            print(f"== cold start: {label} (load average {load()})", flush=True)
            env = {**base_env, "PIP_NO_CACHE_DIR": "1"} if empty_caches and args.no_pip_cache else base_env
            work = Path(scratch) / "work"
            work.mkdir(exist_ok=True)
            try:
                figures[label] = timed_up(work, env)
            finally:
                subprocess.run([*CLI, "down", "-p", PROJECT], cwd=work, capture_output=True, timeout=600, env=env)
                remove_images(prefix)
            print(f"== {label}: {figures[label]:.1f} s to all healthy (load average {load()})", flush=True)
    print()
    for label, seconds in figures.items():
        print(f"cold start, {label}: {seconds:.1f} s")
    return 0


def timed_up(work: Path, env: dict[str, str]) -> float:
    started = time.monotonic()
    process = subprocess.Popen([*CLI, "up", "-d", "-p", PROJECT, "--head-port", HEAD_PORT, *SELECTOR], cwd=work,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    for line in process.stdout:
        print(f"  {time.monotonic() - started:6.1f}s {line.rstrip()}", flush=True)
    if process.wait(timeout=TIMEOUT_S) != 0:
        sys.exit("`gym-compose up` failed (its output is above)")
    return time.monotonic() - started


def remove_images(prefix: str) -> None:
    """Removes the prefix's images: by tag first (by id, a parent with a child image refuses
    removal), then any untagged ones left (a classic build's intermediates)."""
    for listing_format in ("{{.Repository}}:{{.Tag}}", "{{.ID}}"):
        listing = ["docker", "image", "ls", "--filter", f"label=io.gym-compose.image.prefix={prefix}",
                   "--format", listing_format]
        names = [name for name in subprocess.run(listing, capture_output=True, text=True, timeout=60).stdout.split()
                 if "<none>" not in name]
        if names:
            result = subprocess.run(["docker", "image", "rm", *names], capture_output=True, text=True, timeout=600)
            if result.returncode != 0:
                print(f"could not remove every image of {prefix}: {result.stderr.strip()[-500:]}", flush=True)


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


if __name__ == "__main__":
    raise SystemExit(main())
