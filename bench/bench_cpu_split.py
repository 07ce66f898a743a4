"""gym-compose's CPU for an eval run, split into what every run pays once and what each rollout adds.

    .venv/bin/python -m bench.bench_cpu_split [--small 500] [--large 2000] [--runs 3] [--parallel 32]

One stack, bench_vs_nemo_gym's (example_single_tool_call with the built-in mock model as its model
server); `eval run --no-serve` runs of --small and --large rows alternate, --runs of each. Each run's
CPU is read by where it went: each server's container, the collector's container, the command
itself (the CLI and the docker commands it waits for), the engine's processes (dockerd, containerd,
the shims, fuse-overlayfs) and the rest of the machine (the kernel's threads, anything else running).
For each, the medians at the two sizes give a line: its slope is the CPU each rollout adds, its
intercept what a run costs however few rows it has (the CLI's start, the collector's container
start, the run folder's manifest). bench_vs_nemo_gym's "CPU per rollout" at 500 rows holds both.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._support.cli_runs import cached_bytecode_env, repeated_rows
from bench._support.machine import EngineCpu, container_seconds
from bench.bench_vs_nemo_gym import ROWS, ComposeStack, compose_containers

ENGINE_KINDS = ("dockerd", "containerd", "containerd-shim", "fuse-overlayfs")


def container_names(ids: list[str]) -> dict[str, str]:
    out = subprocess.run(["docker", "inspect", "--format", "{{.Id}} {{index .Config.Labels \"com.docker.compose.service\"}}",
                          *ids], capture_output=True, text=True, timeout=60, check=True).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if line.strip())


def eval_run(work: Path, rows: Path, parallel: int, name: str) -> float:
    """Run `eval run --no-serve` to its end; the CPU seconds of its process and of the children it
    waited for (its docker commands), and nothing else this script runs."""
    with open(work / f"{name}.log", "w") as log:
        process = subprocess.Popen(ComposeStack.eval_command(rows, parallel, name), cwd=work,
                                   env=cached_bytecode_env(), stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        sys.exit(f"`gym-compose eval run` failed:\n{(work / f'{name}.log').read_text()[-3000:]}")
    return usage.ru_utime + usage.ru_stime


def one_run(work: Path, rows: Path, parallel: int, name: str, servers: dict[str, str]) -> dict[str, float]:
    """CPU seconds of one eval run, by where it went."""
    before = {cid: container_seconds(cid) or 0.0 for cid in servers}
    engine = EngineCpu()
    engine.start()
    command = eval_run(work, rows, parallel, name)
    used = engine.stop()
    split = {f"server {service}": (container_seconds(cid) or 0.0) - before[cid] for cid, service in servers.items()}
    split["collector container"] = used["containers"] - sum(split.values())
    split["the command (CLI and its docker calls)"] = command
    for kind in ENGINE_KINDS:
        split[kind] = used.get(kind, 0.0)
    split["rest of the machine"] = used["rest of the machine"] - command
    split["machine"] = used["machine"]
    return split


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", type=int, default=500)
    parser.add_argument("--large", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3, help="eval runs of each size, alternating")
    parser.add_argument("--parallel", type=int, default=32)
    args = parser.parse_args()
    if not 0 < args.small < args.large:
        sys.exit("--small must be at least 1 and below --large")

    work = Path(tempfile.mkdtemp(prefix="bench-cpu-split-"))
    rows = {size: repeated_rows(ROWS, work / f"rows-{size}.jsonl", size) for size in (args.small, args.large)}
    stack = ComposeStack(work)
    print(f"work folder {work}; starting the stack ...", flush=True)
    stack.start()
    runs: dict[int, list[dict[str, float]]] = {args.small: [], args.large: []}
    try:
        time.sleep(5)  # let start-up work settle
        servers = container_names(compose_containers())
        for attempt in range(args.runs):
            for size in (args.small, args.large) if attempt % 2 == 0 else (args.large, args.small):
                runs[size].append(one_run(work, rows[size], args.parallel, f"split-{size}-{attempt}", servers))
                print(f"run {attempt + 1}/{args.runs}, {size} rows: machine {runs[size][-1]['machine']:.2f} CPU s",
                      flush=True)
    finally:
        stack.stop()

    print(f"\nCPU of `eval run --no-serve` at {args.parallel} in parallel, medians of {args.runs} runs of "
          f"{args.small} and of {args.large} rows")
    print(f"{'where':45s} {'per rollout':>12s} {'fixed per run':>14s}")
    for kind in runs[args.small][0]:
        small = statistics.median(run[kind] for run in runs[args.small])
        large = statistics.median(run[kind] for run in runs[args.large])
        slope = (large - small) / (args.large - args.small)
        fixed = small - slope * args.small
        print(f"{kind:45s} {1000 * slope:9.2f} ms {1000 * fixed:11.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
