"""Stack start-up and footprint on the real engine, with images already built.

    .venv/bin/python -m bench.bench_stack [--runs 5]

Measures, for example_single_tool_call + the mock model (head + 4 server containers, the shape of
NeMo Gym's 4-server reference stack):
- warm start: `gym-compose up -d` from the command's start to its return with every service
  healthy (median of --runs, a `down` between runs, not timed);
- idle memory of the whole stack (sum of the containers' memory use) and idle CPU (cgroup CPU
  time over 10 s, healthchecks included);
- each server image's size above the base image.
NeMo Gym 0.7's figures on the same machine size (REFERENCE.md) are printed as the baseline.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench._support.machine import container_seconds

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "gym_compose"]
PROJECT = "gym-compose-bench"
SELECTOR = ["--resources-server", "example_single_tool_call"]
NEMO_GYM_WARM_START_S = 19.6
NEMO_GYM_STACK_MB = 3000
NEMO_GYM_SERVER_ENV_MB = 1100


def run(argv: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def gym_compose(*args: str) -> subprocess.CompletedProcess:
    result = run([*CLI, *args])
    if result.returncode != 0:
        sys.exit(f"`gym-compose {' '.join(args)}` failed:\n{result.stderr}")
    return result


def containers() -> list[str]:
    out = run(["docker", "ps", "-q", "--filter", f"label=io.gym-compose.project={PROJECT}"]).stdout
    return out.split()


def memory_bytes(container_ids: list[str]) -> int:
    out = run(["docker", "stats", "--no-stream", "--format", "{{json .}}", *container_ids]).stdout
    return sum(_parse_size(json.loads(line)["MemUsage"].split("/")[0]) for line in out.splitlines() if line.strip())


def _parse_size(text: str) -> int:
    text = text.strip()
    units = {"KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "kB": 1000, "MB": 1000**2, "GB": 1000**3, "B": 1}
    for unit, factor in units.items():
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * factor)
    return int(float(text))


def image_sizes() -> dict[str, int]:
    out = run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}", "gym-compose/*"]).stdout
    sizes = {}
    for line in out.splitlines():
        tag, image_id = line.split()
        size = run(["docker", "image", "inspect", "-f", "{{.Size}}", image_id]).stdout.strip()
        sizes[tag] = int(size)
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    run([*CLI, "down", "-p", PROJECT])
    print("building images (cached by content hash) ...", flush=True)
    built = gym_compose("build", "-p", PROJECT, *SELECTOR).stdout
    images = dict(line.split() for line in built.splitlines() if line.strip())

    starts = []
    for attempt in range(args.runs):
        started = time.monotonic()
        gym_compose("up", "-d", "-p", PROJECT, "--head-port", "11090", *SELECTOR)
        starts.append(time.monotonic() - started)
        print(f"  warm start {attempt + 1}/{args.runs}: {starts[-1]:.2f} s", flush=True)
        if attempt < args.runs - 1:
            gym_compose("down", "-p", PROJECT)

    time.sleep(5)  # let start-up work settle before measuring idle
    ids = containers()
    memory = memory_bytes(ids)
    full_ids = run(["docker", "inspect", "-f", "{{.Id}}", *ids]).stdout.split()
    before = {cid: container_seconds(cid) for cid in full_ids}
    time.sleep(10)
    after = {cid: container_seconds(cid) for cid in full_ids}
    idle_cpu = (sum(after[c] - before[c] for c in full_ids if before[c] is not None and after[c] is not None) / 10
                * 1e3 if all(v is not None for v in before.values()) else None)
    gym_compose("down", "-p", PROJECT)

    sizes = image_sizes()
    base_tag = images["head"]
    base_size = sizes.get(base_tag, 0)
    median = statistics.median(starts)
    print()
    print(f"warm start to all healthy: median {median:.2f} s over {args.runs} runs "
          f"(min {min(starts):.2f}, max {max(starts):.2f}); NeMo Gym 0.7: {NEMO_GYM_WARM_START_S} s "
          f"-> {NEMO_GYM_WARM_START_S / median:.1f}x faster")
    print(f"idle memory of the stack ({len(ids)} containers): {memory / 1e6:.0f} MB; "
          f"NeMo Gym 0.7: {NEMO_GYM_STACK_MB} MB -> {NEMO_GYM_STACK_MB / (memory / 1e6):.1f}x less")
    if idle_cpu is not None:
        print(f"idle CPU of the stack (healthchecks included): {idle_cpu:.0f} ms per second")
    print(f"base image {base_tag}: {base_size / 1e6:.0f} MB")
    for _service, tag in sorted(images.items()):
        if tag != base_tag and tag in sizes:
            print(f"server image {tag}: {(sizes[tag] - base_size) / 1e3:.1f} kB above the base "
                  f"(NeMo Gym 0.7: {NEMO_GYM_SERVER_ENV_MB} MB per server environment)")


if __name__ == "__main__":
    main()
