"""Rollout throughput through the containers with the mock model.

    .venv/bin/python -m bench.bench_collect [--rows 500] [--parallel 32] [--runs 5]

Starts example_single_tool_call + the mock model with `gym-compose up -d`, then runs
`gym-compose eval run --no-serve` --runs times on the same stack, each over --rows rows
(NeMo Gym's example rows, repeated) at --parallel in flight. The collector runs in its container
on the project network, exactly as `up --benchmark` runs it. Prints, per run, the collector's
own rollouts per second (from its progress.json: rollouts over collection time) and the whole
command's wall time, then the median and the ratio to NeMo Gym 0.7's 105 rollouts/s on this
machine size (REFERENCE.md). Stops the stack at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._support.cli_runs import repeated_rows

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "gym_compose"]
PROJECT = "gym-compose-bench-collect"
SELECTOR = ["--resources-server", "example_single_tool_call"]
ROWS = REPO / "server_images/example_single_tool_call/data/example.jsonl"
NEMO_GYM_ROLLOUTS_PER_S = 105.0


def gym_compose(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    result = subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        sys.exit(f"`gym-compose {' '.join(args)}` failed:\n{result.stderr[-3000:]}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=500)
    parser.add_argument("--parallel", type=int, default=32)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-collect-"))
    rows = repeated_rows(ROWS, work / "rows.jsonl", args.rows)

    print("starting the stack ...", flush=True)
    gym_compose("up", "-d", "-p", PROJECT, "--head-port", "11091", *SELECTOR, cwd=work)
    rates, walls = [], []
    try:
        for attempt in range(args.runs):
            started = time.monotonic()
            gym_compose("eval", "run", "--no-serve", "-p", PROJECT, "--head-port", "11091", *SELECTOR,
                        "--input", str(rows), "--run-name", f"run{attempt}",
                        "--num-samples-in-parallel", str(args.parallel), cwd=work)
            walls.append(time.monotonic() - started)
            (run_dir,) = (work / "results").glob(f"run{attempt}-*")
            progress = json.loads((run_dir / "progress.json").read_text())
            done = sum(1 for line in (run_dir / "rollouts.jsonl").read_text().splitlines() if line.strip())
            if done != args.rows:
                sys.exit(f"run {attempt}: {done} rollouts written, expected {args.rows}")
            rates.append(progress["rollouts_per_second"])
            print(f"  run {attempt + 1}/{args.runs}: {rates[-1]:.0f} rollouts/s while collecting, "
                  f"whole command {walls[-1]:.2f} s, mean reward {progress['mean_reward']}", flush=True)
    finally:
        subprocess.run([*CLI, "down", "-p", PROJECT], cwd=work, capture_output=True, timeout=300)

    median = statistics.median(rates)
    print()
    print(f"{args.rows} rows at {args.parallel} in parallel through the containers: median {median:.0f} rollouts/s "
          f"(min {min(rates):.0f}, max {max(rates):.0f}) over {args.runs} runs; whole `eval run --no-serve` "
          f"command median {statistics.median(walls):.2f} s")
    print(f"NeMo Gym 0.7 on this machine size: {NEMO_GYM_ROLLOUTS_PER_S:.0f} rollouts/s -> "
          f"{median / NEMO_GYM_ROLLOUTS_PER_S:.2f}x")


if __name__ == "__main__":
    main()
