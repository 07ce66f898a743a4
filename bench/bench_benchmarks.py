"""The full benchmark sets with the mock model's oracle: every row must score 1.0; prints rows,
wall time of the whole `gym-compose up --benchmark NAME/full` command (images already built) and
rollouts per second of the collection.

    .venv/bin/gym-compose eval prepare --benchmark gsm8k/full --benchmark math-500/full --benchmark human_eval/full
    .venv/bin/python -m bench.bench_benchmarks [--benchmarks gsm8k/full,math-500/full,human_eval/full,blackjack/full]
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--benchmarks", default="gsm8k/full,math-500/full,human_eval/full,blackjack/full")
    args = parser.parse_args()
    print(f"{'benchmark':<18} {'rows':>6} {'reward':>7} {'failed':>6} {'command s':>10} {'rollouts/s':>11}")
    with tempfile.TemporaryDirectory() as results:
        for name in args.benchmarks.split(","):
            started = time.monotonic()
            command = [sys.executable, "-m", "gym_compose", "up", "--benchmark", name, "-p", "bench-benchmarks",
                       "--head-port", str(free_port()), "--results-dir", results]
            done = subprocess.run(command,
                                  capture_output=True, text=True, cwd=REPO, timeout=3600)
            wall = time.monotonic() - started
            run_dirs = sorted(Path(results).glob("*"), key=lambda p: p.stat().st_mtime)
            if done.returncode not in (0, 1) or not run_dirs:
                sys.exit(f"{name}: gym-compose up exited {done.returncode}:\n{done.stderr[-2000:]}")
            progress = json.loads((run_dirs[-1] / "progress.json").read_text())
            print(f"{name:<18} {progress['total']:>6} {progress['mean_reward']:>7.3f} {progress['failed']:>6} "
                  f"{wall:>10.1f} {progress['rollouts_per_second']:>11.2f}", flush=True)


if __name__ == "__main__":
    main()
