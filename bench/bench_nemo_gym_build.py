"""Time the NeMo Gym runtime image and two server images on it, built from nothing but their parent.

    .venv/bin/python -m bench.bench_nemo_gym_build
    PYTHONPATH=OTHER_CHECKOUT .venv/bin/python bench/bench_nemo_gym_build.py   # another checkout's image code

The lean base and the Debian trixie parent stay (they are not what is measured), as do the host's
wheelhouse and pip caches; every image of the NeMo Gym runtime (`nemo-gym-runtime*`, the servers'
`*-nemo-gym`) is removed first, and so are dangling images, which Docker's classic builder would
otherwise reuse as its step cache. Then: the runtime, example_tool_call_multireward (NeMo Gym's
code alone) and asr_with_pc (requirements of its own: jiwer, whisper_normalizer), each timed, and
each image's size. Run it alone on the machine and quote `uptime` (the figures are wall seconds).
"""

from __future__ import annotations

import os
import subprocess
import time

from gym_compose.engine.images.lean_images import ensure_base_image, image_size
from gym_compose.engine.images.nemo_gym_images import ensure_nemo_gym_runtime_image, ensure_nemo_gym_server_image
from tests.support.nemo_gym import unpacked_nemo_gym

SERVERS = ("example_tool_call_multireward", "asr_with_pc")


def docker(*args: str) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=600, check=False).stdout


def remove_nemo_gym_images() -> list[str]:
    tags = [line for line in docker("images", "--format", "{{.Repository}}:{{.Tag}}").split()
            if "/nemo-gym-runtime" in line or "-nemo-gym:" in line]
    if tags:
        docker("rmi", "--force", *tags)
    docker("image", "prune", "--force")
    return tags


def main() -> int:
    os.environ.setdefault("GYM_COMPOSE_OFFLINE", "1")
    print(f"uptime before: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    removed = remove_nemo_gym_images()
    print(f"removed {len(removed)} NeMo Gym images and the dangling ones")
    tree = unpacked_nemo_gym()
    base = ensure_base_image(progress=lambda line: None)
    quiet = (lambda line: None) if os.environ.get("BENCH_QUIET") else print
    started = time.monotonic()
    runtime = ensure_nemo_gym_runtime_image(base, progress=quiet)
    figures = [("runtime", runtime, time.monotonic() - started)]
    for server in SERVERS:
        began = time.monotonic()
        tag = ensure_nemo_gym_server_image(tree / "resources_servers" / server, "resources_servers", (), runtime,
                                           progress=quiet)
        figures.append((server, tag, time.monotonic() - began))
    print()
    for what, tag, seconds in figures:
        print(f"{what:<32} {seconds:7.1f} s  {image_size(tag) / 1e9:6.3f} GB  {tag}")
    print(f"total {sum(seconds for _, _, seconds in figures):.1f} s")
    print(f"uptime after: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
