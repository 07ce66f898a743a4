"""Where a warm `up -d` (or an `eval run --no-serve`) spends its seconds: every `docker` call the
command makes, with its start and end from the command's start, and each container's created,
started and first passing healthcheck (images already built; docs/performance.md).

    .venv/bin/python -m bench.bench_trace [--runs 1]                # gym-compose up -d, then down
    .venv/bin/python -m bench.bench_trace --eval [--rows 500]       # eval run --no-serve on a stack it starts

A `docker` wrapper first on the PATH logs each call; the containers' times come from
`docker inspect` (the healthcheck log keeps the last five checks: with --steady, the first
passing one is still there right after the start). Project `gym-compose-trace`, head port 11095
(--project, --head-port).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from bench._support.cli_runs import FirstRolloutWatch, cached_bytecode_env

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "gym_compose"]
PROJECT = "gym-compose-trace"
HEAD_PORT = "11095"
SELECTOR = ["--resources-server", "example_single_tool_call"]
ROWS = REPO / "server_images" / "example_single_tool_call" / "data" / "example.jsonl"
WRAPPER = """#!/bin/sh
start=$(date +%s.%N)
{docker} "$@"
code=$?
echo "$start $(date +%s.%N) $code $(printf '%s' "$*" | tr '\\n' ' ' | cut -c1-200)" >> {log}
exit $code
"""


def traced_env(work: Path) -> tuple[dict[str, str], Path]:
    docker = shutil.which("docker")
    if docker is None:
        sys.exit("no docker on the PATH")
    bin_dir, log = work / "bin", work / "docker-calls.log"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(WRAPPER.format(docker=docker, log=log))
    (bin_dir / "docker").chmod(0o755)
    return {**cached_bytecode_env(), "PATH": f"{bin_dir}:{os.environ['PATH']}"}, log


def timestamp(text: str) -> float:
    whole, _, fraction = text.rstrip("Z").partition(".")
    return datetime.fromisoformat(whole + "+00:00").timestamp() + float("0." + (fraction or "0"))


def print_calls(log: Path, t0: float) -> None:
    """One line per call; a run of the same call (the polls) as one line with its count."""
    lines = log.read_text().splitlines() if log.exists() else []
    calls = sorted(line.split(maxsplit=3) + [""] * (3 - line.count(" ")) for line in lines)  # logged at their end
    index = 0
    while index < len(calls):
        start, end, code, args = calls[index]
        same = index + 1
        while same < len(calls) and calls[same][3] == args:
            same += 1
        end = calls[same - 1][1]
        repeat = f" (x{same - index})" if same - index > 1 else ""
        print(f"  {float(start) - t0:6.2f} - {float(end) - t0:6.2f} s  exit {code}  docker {args[:90]}{repeat}")
        index = same


def print_containers(t0: float) -> None:
    ids = subprocess.run(["docker", "ps", "-q", "--filter", f"label=com.docker.compose.project={PROJECT}"],
                         capture_output=True, text=True, timeout=60).stdout.split()
    if not ids:
        return
    for container in json.loads(subprocess.run(["docker", "inspect", *ids], capture_output=True, text=True,
                                               timeout=60).stdout):
        checks = [c for c in container["State"].get("Health", {}).get("Log", []) if c["ExitCode"] == 0]
        healthy = f"{timestamp(checks[0]['End']) - t0:6.2f} s" if checks else "  -"
        print(f"  {container['Name'].lstrip('/')[:52]:52} created {timestamp(container['Created']) - t0:6.2f} s, "
              f"started {timestamp(container['State']['StartedAt']) - t0:6.2f} s, first check passed {healthy}")


def run(argv: list[str], env: dict[str, str], cwd: Path = REPO, results: Path | None = None) -> float:
    """Runs the command; with `results` (an eval run's --results-dir) also says when its first
    rollout was written."""
    t0 = time.time()
    first = FirstRolloutWatch(results) if results is not None else None
    process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while first is not None and first.seconds is None and process.poll() is None:
        first.poll()
        time.sleep(0.005)
    _, stderr = process.communicate(timeout=600)
    if process.returncode != 0:
        sys.exit(f"`{' '.join(argv[2:])}` failed:\n{stderr[-3000:]}")
    if first is not None and first.seconds is not None:
        print(f"  first rollout written at {first.seconds:.2f} s")
    return t0


def main() -> None:
    global PROJECT, HEAD_PORT
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--eval", action="store_true", help="trace `eval run --no-serve` instead of `up -d`")
    parser.add_argument("--rows", type=int, default=500)
    parser.add_argument("--project", default=PROJECT, help="compose project (one per session on a shared engine)")
    parser.add_argument("--head-port", default=HEAD_PORT)
    args = parser.parse_args()
    PROJECT, HEAD_PORT = args.project, args.head_port
    plain = cached_bytecode_env()
    subprocess.run([*CLI, "down", "-p", PROJECT], cwd=REPO, capture_output=True, timeout=600)
    up = [*CLI, "up", "-d", "-p", PROJECT, "--head-port", HEAD_PORT, *SELECTOR]
    work = Path(tempfile.mkdtemp(prefix="bench-trace-"))
    try:
        if args.eval:
            lines = [line for line in ROWS.read_text().splitlines() if line.strip()]
            rows = work / "rows.jsonl"
            rows.write_text("\n".join(lines[i % len(lines)] for i in range(args.rows)) + "\n")
            run(up, plain)
        for attempt in range(args.runs):
            run_dir = work / f"run{attempt}"
            run_dir.mkdir()
            env, log = traced_env(run_dir)
            if args.eval:
                t0 = run([*CLI, "eval", "run", "--no-serve", "-p", PROJECT, "--head-port", HEAD_PORT, *SELECTOR,
                          "--input", str(rows), "--results-dir", str(run_dir / "results"),
                          "--num-samples-in-parallel", "32"], env, results=run_dir / "results")
            else:
                t0 = run(up, env)
            took = time.time() - t0
            print(f"{'eval run --no-serve' if args.eval else 'up -d'} {attempt + 1}/{args.runs}: {took:.2f} s, "
                  f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
            print_calls(log, t0)
            if not args.eval:
                print_containers(t0)
                subprocess.run([*CLI, "down", "-p", PROJECT], cwd=REPO, capture_output=True, timeout=600)
    finally:
        subprocess.run([*CLI, "down", "-p", PROJECT], cwd=REPO, capture_output=True, timeout=600)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
