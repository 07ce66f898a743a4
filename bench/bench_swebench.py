"""swebench_mini end to end: what one SWE instance costs, and how many instances a minute one stack
does with 1, 4 and 8 in parallel (the 1-in-parallel run is the baseline of the ratios), with the
mock model (oracle: every instance leases a sandbox, runs the agent's tool calls, is verified in a
fresh sandbox).

    .venv/bin/python -m bench.bench_swebench [--parallel 1 4 8] [--repeats 2]

Per instance (median and p95, from the rollout rows): the lease of the agent's sandbox, the agent's
steps (model turns and tool calls in the sandbox), the verification (diff, fresh sandbox, tests),
and the whole rollout. Per parallelism: instances per minute over the collection (the collector's
own rate, from its first request to its last answer) and the peak memory of the project's
containers, sandboxes included (sampled with `docker stats` about once a second).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from gym_compose.contract import PROJECT_LABEL, ROLE_LABEL, SANDBOX_LABEL

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "gym_compose"]
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "kB": 1000, "MB": 1e6, "GB": 1e9}


def run(argv: list[str], timeout: float = 3600, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout, **kwargs)


def quantiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


def memory_bytes(text: str) -> float:
    used = text.split("/")[0].strip()
    number = used.rstrip("KMGiBk")
    return float(number) * UNITS[used[len(number):]]


class MemorySampler(threading.Thread):
    """The project's containers' summed memory (servers, broker, sandboxes) about once a second, and
    its live sandboxes four times a second.

    `docker stats` is given no container ids: with ids, one sandbox that ends between `ps` and
    `stats` fails the whole call, and short-lived sandboxes made every sample empty (the peak read
    0). The project's containers are picked by name (`PROJECT-SERVICE-N`, `PROJECT-sbx-...`)."""

    def __init__(self, project: str):
        super().__init__(daemon=True)
        self.project, self.peak, self.peak_sandboxes = project, 0.0, 0
        self.stopping = threading.Event()

    def run(self) -> None:
        counter = threading.Thread(target=self.count_sandboxes, daemon=True)
        counter.start()
        while not self.stopping.is_set():
            stats = run(["docker", "stats", "--no-stream", "--format", "{{.Name}}\t{{.MemUsage}}"],
                        timeout=60).stdout.splitlines()
            mine = [line for line in stats if line.startswith(f"{self.project}-") and "\t" in line]
            self.peak = max(self.peak, sum(memory_bytes(line.split("\t")[1]) for line in mine))
            self.stopping.wait(1.0)
        counter.join()

    def count_sandboxes(self) -> None:
        while not self.stopping.is_set():
            live = run(["docker", "ps", "-q", "--filter", f"label={PROJECT_LABEL}={self.project}",
                        "--filter", f"label={SANDBOX_LABEL}=1", "--filter", f"label={ROLE_LABEL}=sandbox"],
                       timeout=60).stdout.split()
            self.peak_sandboxes = max(self.peak_sandboxes, len(live))
            self.stopping.wait(0.25)


def collect(project: str, head_port: int, parallel: int, repeats: int, results: Path) -> dict:
    sampler = MemorySampler(project)
    sampler.start()
    began = time.monotonic()
    done = run([*CLI, "eval", "run", "--no-serve", "-p", project, "--head-port", str(head_port), "--benchmark",
                "swebench_mini", "--num-samples-in-parallel", str(parallel), "--num-repeats", str(repeats),
                "--results-dir", str(results), "--run-name", f"p{parallel}"])
    wall = time.monotonic() - began
    sampler.stopping.set()
    sampler.join()
    if done.returncode != 0:
        sys.exit(f"collection with {parallel} in parallel failed:\n{done.stderr[-3000:]}")
    (run_dir,) = results.glob(f"p{parallel}-*")
    rows = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    progress = json.loads((run_dir / "progress.json").read_text())
    if any(row["reward"] != 1.0 for row in rows):
        sys.exit(f"an oracle rollout did not score 1.0 with {parallel} in parallel")
    return {"rows": rows, "rate": progress["rollouts_per_second"] * 60, "wall": wall,
            "peak_memory": sampler.peak, "peak_sandboxes": sampler.peak_sandboxes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parallel", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--repeats", type=int, default=2, help="rollouts per task (8 tasks)")
    parser.add_argument("--head-port", type=int, default=11940)
    args = parser.parse_args()
    project = f"gym-compose-bench-swe-{os.getpid()}"
    began = time.monotonic()
    up = run([*CLI, "up", "-d", "-p", project, "--head-port", str(args.head_port), "--benchmark", "swebench_mini"])
    if up.returncode != 0:
        sys.exit(f"the stack did not start:\n{up.stderr[-3000:]}")
    start_s = time.monotonic() - began
    try:
        with tempfile.TemporaryDirectory() as folder:
            measured = {n: collect(project, args.head_port, n, args.repeats, Path(folder)) for n in args.parallel}
    finally:
        run([*CLI, "down", "-p", project])
    print(f"stack start (images present, 6 services healthy): {start_s:.1f} s")
    print(f"{'':50}" + "".join(f"{f'{n} in parallel':>22}" for n in args.parallel))

    def line(label: str, values) -> None:
        print(f"{label:50}" + "".join(f"{value:>22}" for value in values))

    for label, pick in (("lease of the agent's sandbox", lambda r: r["timings"]["lease_s"]),
                        ("agent steps (4 turns, 3 tools)", lambda r: r["agent_timings"]["agent_s"]),
                        ("  of it: waiting on the model", lambda r: r["cost"]["model_wall_s"]),
                        ("verification", lambda r: r["agent_timings"]["verify_s"]),
                        ("  of it: the agent's diff", lambda r: r["timings"].get("extract_s", 0.0)),
                        ("  of it: fresh sandbox start", lambda r: r["timings"]["eval_sandbox_start_s"]),
                        ("  of it: tests (eval script)", lambda r: r["timings"]["tests_s"]),
                        ("  of it: the rest (give-backs, reads, HTTP)", lambda r: r["agent_timings"]["verify_s"]
                         - r["timings"].get("extract_s", 0.0) - r["timings"]["eval_sandbox_start_s"]
                         - r["timings"]["tests_s"]),
                        ("whole rollout", lambda r: r["agent_timings"]["total_s"])):
        line(f"{label}, p50/p95 s", [f"{p50:.2f} / {p95:.2f}" for p50, p95 in
                                    (quantiles([pick(row) for row in measured[n]["rows"]]) for n in args.parallel)])
    baseline = measured[args.parallel[0]]["rate"]
    line("instances per minute", [f"{measured[n]['rate']:.1f} ({measured[n]['rate'] / baseline:.2f}x)"
                                  for n in args.parallel])
    line("peak memory, all containers", [f"{measured[n]['peak_memory'] / 2**20:.0f} MiB" for n in args.parallel])
    line("peak live sandboxes", [str(measured[n]["peak_sandboxes"]) for n in args.parallel])
    print(f"instances per run: {len(measured[args.parallel[0]]['rows'])}; load average at the end: "
          f"{os.getloadavg()[0]:.1f} (machine shared with other work)")


if __name__ == "__main__":
    main()
