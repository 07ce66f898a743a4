"""Disk of N NeMo Gym-runtime server images against one NeMo Gym server venv (issue 9: within 1.5x).

    .venv/bin/python -m bench.bench_nemo_gym_disk                    # 10 server images on the newest runtime
    .venv/bin/python -m bench.bench_nemo_gym_disk --count 10 --runtime gym-compose/nemo-gym-runtime:TAG

Every NeMo Gym-runtime server image is the shared runtime image plus its own layers (its
requirements and code), so the disk of N of them is the runtime image once plus each server's own
layers: image size minus runtime size, checked by the runtime's layers being a prefix of the
server's. NeMo Gym itself makes one venv per server with nemo-gym and its dependencies; that venv
is measured as the runtime image's /opt/venv (`du -sb`, the same packages pip installs there).
The server images must already exist (built by `gym-compose up`/`build`, e.g. by
bench/bench_nemo_gym_servers.py); this script builds nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

SERVER_SUFFIX = "-nemo-gym"
BASE_LABEL = "io.gym-compose.image.base"


def docker(*args: str) -> str:
    return subprocess.run(["docker", *args], check=True, capture_output=True, text=True, timeout=300).stdout


def inspect(tag: str) -> dict[str, Any]:
    return json.loads(docker("image", "inspect", tag))[0]


def newest_runtime() -> str:
    lines = docker("images", "--format", "{{.CreatedAt}}\t{{.Repository}}:{{.Tag}}",
                   "gym-compose/nemo-gym-runtime").splitlines()
    if not lines:
        sys.exit("no gym-compose/nemo-gym-runtime image: run a NeMo Gym-runtime server first")
    return sorted(lines)[-1].split("\t")[1]


def server_images(runtime: str) -> list[str]:
    """One image per server (its newest) built on `runtime`, by server name."""
    newest: dict[str, str] = {}
    listing = docker("images", "--format", "{{.CreatedAt}}\t{{.Repository}}:{{.Tag}}").splitlines()
    for line in sorted(listing):  # oldest first, so the newest of a server's images wins
        tag = line.split("\t")[1]
        repository = tag.rsplit(":", 1)[0]
        if repository.endswith(SERVER_SUFFIX) and \
                ((inspect(tag).get("Config") or {}).get("Labels") or {}).get(BASE_LABEL) == runtime:
            newest[repository] = tag
    return [newest[name] for name in sorted(newest)]


def gb(size: float) -> str:
    return f"{size / 1e9:.3f} GB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runtime", help="the runtime image (default: the newest gym-compose/nemo-gym-runtime)")
    parser.add_argument("--count", type=int, default=10, help="server images to count")
    options = parser.parse_args()
    runtime = options.runtime or newest_runtime()
    runtime_image = inspect(runtime)
    runtime_layers = runtime_image["RootFS"]["Layers"]
    servers = server_images(runtime)[: options.count]
    if len(servers) < options.count:
        print(f"note: only {len(servers)} server images on {runtime}", file=sys.stderr)
    venv = int(docker("run", "--rm", "--entrypoint", "du", runtime, "-sb", "/opt/venv").split()[0])
    total = runtime_image["Size"]
    print(f"runtime image {runtime}: {gb(runtime_image['Size'])} (its /opt/venv: {gb(venv)})")
    for tag in servers:
        image = inspect(tag)
        if image["RootFS"]["Layers"][: len(runtime_layers)] != runtime_layers:
            sys.exit(f"{tag} is not built on {runtime}'s layers")
        own = image["Size"] - runtime_image["Size"]
        total += own
        print(f"  {tag.split(':')[0]:<60} +{own / 1e6:9.3f} MB")
    print(f"{len(servers)} NeMo Gym-runtime servers: {gb(total)} of image disk (runtime once + own layers)")
    print(f"one NeMo Gym server venv (nemo-gym 0.7 + dependencies): {gb(venv)}; "
          f"ratio {total / venv:.2f}x (target <= 1.5x)")
    print(f"NeMo Gym's own cost for {len(servers)} servers ({len(servers)} venvs): {gb(venv * len(servers))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
