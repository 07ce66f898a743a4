"""A cold sandbox start, stage by stage, the broker's own way: its container body
(`launch.container_config`), its Engine API client (`DockerBackend`) and its agent channel, run
from the host one sandbox at a time, so each stage is the engine's alone.

    .venv/bin/python -m bench.bench_container_start [--image IMAGE] [--starts 15] [--without-init]

Stages (medians and p95, ms): create (the container and its writable layer), attach (the agent's
stdio stream), start (runc, the storage driver's mount, cgroups: the engine's part), ready (the
sandbox agent's python up and its hello read), remove (`docker rm -f`). `--without-init` drops
Docker's init (`HostConfig.Init`) to show what it costs; the broker keeps it (it reaps orphaned
processes in the sandbox). The default image is the newest local `gym-compose/sandbox` (build a
stack with sandboxes first, e.g. `gym-compose build --benchmark swebench_mini`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time

from gym_compose.sandbox.broker.channel import AgentChannel
from gym_compose.sandbox.broker.docker_backend import DockerBackend
from gym_compose.sandbox.broker.launch import container_config, container_name
from gym_compose.sandbox.policy import SandboxPolicy

PROJECT = "gym-compose-bench-start"
STAGES = ("create", "attach", "start", "ready", "remove")


def newest_sandbox_image() -> str:
    listed = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}", "gym-compose/sandbox"],
                            capture_output=True, text=True, check=True).stdout.split()
    if not listed:
        sys.exit("no gym-compose/sandbox image on the engine: start a stack with sandboxes once, or pass --image")
    return listed[0]


async def one_start(backend: DockerBackend, policy: SandboxPolicy, image: str, without_init: bool,
                    index: int) -> dict[str, float]:
    config = container_config(PROJECT, policy, image, engine_cpus=float(os.cpu_count() or 1))
    if without_init:
        config["HostConfig"]["Init"] = False
    times = [time.monotonic()]
    container = await backend.create(config, container_name(PROJECT, "bench", f"{index:04d}"))
    times.append(time.monotonic())
    reader, writer = await backend.attach(container)
    channel = AgentChannel(reader, writer, container)
    times.append(time.monotonic())
    await backend.start(container)
    times.append(time.monotonic())
    await channel.wait_ready(60)
    times.append(time.monotonic())
    await channel.aclose()
    await backend.remove(container)
    times.append(time.monotonic())
    return {stage: 1000 * (times[i + 1] - times[i]) for i, stage in enumerate(STAGES)}


async def measure(image: str, starts: int, without_init: bool) -> dict[str, list[float]]:
    backend = DockerBackend()
    policy = SandboxPolicy(server="bench", image=image, network="none")
    measured: dict[str, list[float]] = {stage: [] for stage in STAGES}
    await one_start(backend, policy, image, without_init, 9999)  # the image's files in the page cache
    for index in range(starts):
        for stage, ms in (await one_start(backend, policy, image, without_init, index)).items():
            measured[stage].append(ms)
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", help="the sandbox image (default: the newest local gym-compose/sandbox)")
    parser.add_argument("--starts", type=int, default=15)
    parser.add_argument("--without-init", action="store_true", help="HostConfig.Init false (the broker keeps it)")
    args = parser.parse_args()
    image = args.image or newest_sandbox_image()
    load = os.getloadavg()[0]
    measured = asyncio.run(measure(image, args.starts, args.without_init))
    print(f"{image}, {args.starts} starts one at a time{', without init' if args.without_init else ''}; "
          f"load average {load:.2f} before, {os.getloadavg()[0]:.2f} after")
    for stage in (*STAGES, "lease (create .. ready)"):
        values = (measured[stage] if stage in measured else
                  [sum(measured[s][i] for s in STAGES[:4]) for i in range(args.starts)])
        ordered = sorted(values)
        print(f"  {stage:24} p50 {statistics.median(ordered):7.1f} ms   p95 {ordered[int(0.95 * (len(ordered) - 1))]:7.1f} ms")


if __name__ == "__main__":
    main()
