"""Swarm against compose, same stack, same machine: deploy-to-healthy and rollouts/s.

    .venv/bin/python -m bench.bench_swarm [--runs 3] [--rows 500] [--parallel 32]

For each run, and each target in turn (compose, then swarm, interleaved so that load drifts hit
both alike): `gym-compose up -d --target T` with example_single_tool_call + the mock model,
timed (the command's wall time, and the "all N services healthy in X s" it reports from the
start of the deploy), then one `eval run --no-serve` of --rows rows at --parallel in flight
(the collector's own rollouts/s from progress.json), then `down` (timed). Prints each figure's
median per target and the ratio swarm/compose. Needs the engine to be a swarm manager already
(`docker swarm init --advertise-addr 127.0.0.1`); images are built once, before the first run.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "gym_compose"]
PROJECT = "gcbench-swarm"
SELECTOR = ["--resources-server", "example_single_tool_call"]
ROWS = REPO / "server_images/example_single_tool_call/data/example.jsonl"
HEAD_PORT = "11093"


def gym_compose(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    result = subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        subprocess.run([*CLI, "down", "-p", PROJECT], cwd=cwd, capture_output=True, timeout=300)
        sys.exit(f"`gym-compose {' '.join(args)}` failed:\n{result.stderr[-3000:]}")
    return result


def one_run(target: str, attempt: int, rows: Path, parallel: int, work: Path) -> dict[str, float]:
    options = ["--target", target, "-p", PROJECT, "--head-port", HEAD_PORT, *SELECTOR]
    started = time.monotonic()
    up = gym_compose("up", "-d", *options, cwd=work)
    up_wall = time.monotonic() - started
    healthy = float(re.search(r"healthy in ([\d.]+)s", up.stderr).group(1))  # type: ignore[union-attr]
    name = f"{target}{attempt}"
    gym_compose("eval", "run", "--no-serve", *options, "--input", str(rows), "--run-name", name,
                "--num-samples-in-parallel", str(parallel), cwd=work)
    (run_dir,) = (work / "results").glob(f"{name}-*")
    progress = json.loads((run_dir / "progress.json").read_text())
    started = time.monotonic()
    gym_compose("down", "-p", PROJECT, cwd=work)
    down_wall = time.monotonic() - started
    return {"up": up_wall, "healthy": healthy, "rollouts_per_s": progress["rollouts_per_second"],
            "mean_reward": progress["mean_reward"], "down": down_wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rows", type=int, default=500)
    parser.add_argument("--parallel", type=int, default=32)
    args = parser.parse_args()
    state = subprocess.run(["docker", "info", "--format", "{{.Swarm.LocalNodeState}}"], capture_output=True,
                           text=True, timeout=60).stdout.strip()
    if state != "active":
        sys.exit("the engine is not a swarm manager: run `docker swarm init --advertise-addr 127.0.0.1` first")

    work = Path(tempfile.mkdtemp(prefix="bench-swarm-"))
    lines = [line for line in ROWS.read_text().splitlines() if line.strip()]
    rows = work / "rows.jsonl"
    rows.write_text("\n".join(lines[i % len(lines)] for i in range(args.rows)) + "\n")
    gym_compose("build", *SELECTOR, cwd=work)

    figures: dict[str, list[dict[str, float]]] = {"compose": [], "swarm": []}
    for attempt in range(args.runs):
        for target in figures:
            result = one_run(target, attempt, rows, args.parallel, work)
            figures[target].append(result)
            print(f"  run {attempt + 1}/{args.runs} {target:8} up {result['up']:.2f} s (healthy in "
                  f"{result['healthy']:.1f} s), {result['rollouts_per_s']:.0f} rollouts/s, mean reward "
                  f"{result['mean_reward']}, down {result['down']:.2f} s", flush=True)

    print()
    print(f"medians over {args.runs} runs ({args.rows} rows at {args.parallel} in parallel):")
    medians = {target: {key: statistics.median(r[key] for r in runs) for key in ("up", "healthy", "rollouts_per_s",
                                                                                  "down")}
               for target, runs in figures.items()}
    for key, label in (("up", "`up -d` wall time, s"), ("healthy", "deploy to all healthy, s"),
                       ("rollouts_per_s", "rollouts/s"), ("down", "`down` wall time, s")):
        compose, swarm = medians["compose"][key], medians["swarm"][key]
        print(f"  {label:28} compose {compose:7.2f}   swarm {swarm:7.2f}   swarm/compose {swarm / compose:.2f}")


if __name__ == "__main__":
    main()
