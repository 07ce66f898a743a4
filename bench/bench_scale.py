"""Scale, simulated: rollouts/s against concurrency for one stack whose model answers like a real
LLM (the mock model with a latency per call), and from it the replicas a target rate needs.

    .venv/bin/python -m bench.bench_scale [--latency 0.2 2.0] [--parallel 32 128 512 1024 2048]
                                          [--target-per-hour 10000] [--target compose]

One stack (example_single_tool_call: two model calls per rollout, a tool call between them; the
mock model sleeps uniformly LOW..HIGH s per call) is started once with `up -d`; then one
`eval run --no-serve` per concurrency level, of max(300, 3 x level) rows (at most 4096), read from
the collector's progress.json. Prints per level: rollouts/s, the ideal (level / latency of one
rollout, what an infinitely fast machine would do), the efficiency (measured / ideal), mean
reward and the 1-minute load average. The saturation point is the first level where doubling
the concurrency gains under 10 %. The replicas a target rate needs: target / rollouts/s at the
saturation point, rounded up (one replica = one such stack, on a machine like this one).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._support.cli_runs import repeated_rows

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "gym_compose"]
PROJECT = "gcbench-scale"
HEAD_PORT = "11096"
ROWS = REPO / "server_images/example_single_tool_call/data/example.jsonl"
MODEL_CALLS_PER_ROLLOUT = 2  # example_single_tool_call: the tool call, then the answer
SATURATION_GAIN = 1.10


def gym_compose(*args: str, cwd: Path, timeout: float = 1800) -> subprocess.CompletedProcess:
    result = subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        subprocess.run([*CLI, "down", "-p", PROJECT], cwd=cwd, capture_output=True, timeout=300)
        sys.exit(f"`gym-compose {' '.join(args)}` failed:\n{result.stderr[-3000:]}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, nargs=2, default=[0.2, 2.0], metavar=("LOW", "HIGH"))
    parser.add_argument("--parallel", type=int, nargs="+", default=[32, 128, 512, 1024, 2048])
    parser.add_argument("--target-per-hour", type=float, default=10_000)
    parser.add_argument("--target", default="compose", choices=["compose", "swarm"])
    args = parser.parse_args()
    low, high = args.latency
    stack = ["--target", args.target, "-p", PROJECT, "--head-port", HEAD_PORT,
             "--resources-server", "example_single_tool_call",
             f"++policy_model.responses_api_models.mock_model.latency_s={low}",
             f"++policy_model.responses_api_models.mock_model.latency_max_s={high}"]
    work = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    rollout_latency = MODEL_CALLS_PER_ROLLOUT * (low + high) / 2
    print(f"mock model latency {low}..{high} s per call, {rollout_latency:.1f} s of model time per rollout; "
          f"{os.cpu_count()} cores", flush=True)
    gym_compose("up", "-d", *stack, cwd=work)
    results = []
    try:
        for level in args.parallel:
            count = min(4096, max(300, 3 * level))
            rows = repeated_rows(ROWS, work / f"rows-{level}.jsonl", count)
            started = time.monotonic()
            gym_compose("eval", "run", "--no-serve", *stack, "--input", str(rows), "--run-name", f"p{level}",
                        "--num-samples-in-parallel", str(level), cwd=work)
            wall = time.monotonic() - started
            (run_dir,) = (work / "results").glob(f"p{level}-*")
            progress = json.loads((run_dir / "progress.json").read_text())
            rate = float(progress["rollouts_per_second"])
            ideal = level / rollout_latency
            load = os.getloadavg()[0]
            results.append((level, rate))
            print(f"  {level:5d} in parallel, {count:5d} rows: {rate:7.1f} rollouts/s (ideal {ideal:7.1f}, "
                  f"efficiency {rate / ideal:4.0%}), mean reward {progress['mean_reward']}, wall {wall:.0f} s, "
                  f"load {load:.1f}", flush=True)
    finally:
        gym_compose("down", "-p", PROJECT, cwd=work, timeout=600)

    saturation_level, saturation_rate = results[-1]
    for (level, rate), (_, next_rate) in zip(results, results[1:], strict=False):
        if next_rate < rate * SATURATION_GAIN:
            saturation_level, saturation_rate = level, max(rate, next_rate)
            break
    per_hour = saturation_rate * 3600
    replicas = math.ceil(args.target_per_hour / per_hour)
    needed_in_flight = args.target_per_hour / 3600 * rollout_latency
    print(f"\nsaturation: from {saturation_level} in parallel, {saturation_rate:.1f} rollouts/s "
          f"= {per_hour:,.0f} rollouts/hour per stack on this machine")
    print(f"{args.target_per_hour:,.0f} rollouts/hour = {args.target_per_hour / 3600:.2f} rollouts/s: "
          f"{replicas} stack replica(s) of this machine's capacity; about {needed_in_flight:.0f} rollouts in flight "
          f"at {rollout_latency:.1f} s each")


if __name__ == "__main__":
    main()
