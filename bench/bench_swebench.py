"""swebench_mini end to end: what one SWE instance costs, and how many instances a minute one stack
does with 1, 4 and 8 in parallel (the 1-in-parallel run is the baseline of the ratios), with the
mock model (oracle: every instance leases a sandbox, runs the agent's tool calls, is verified in a
fresh sandbox).

    .venv/bin/python -m bench.bench_swebench [--parallel 1 4 8] [--repeats 2]

Per instance (median and p95, from the rollout rows): the lease of the agent's sandbox, the agent's
steps (model turns and tool calls in the sandbox), the verification (diff, fresh sandbox, tests),
and the whole rollout. Per parallelism: instances per minute over the collection (the collector's
own rate, from its first request to its last answer), the peak memory of the engine's containers
and its peak live sandboxes (read from the cgroups four times a second: run it alone), and the
machine's CPU seconds per instance, split into the containers' (servers, collector, sandboxes)
and the engine's own processes (dockerd, containerd, the shims, fuse-overlayfs;
bench/_support/machine.py's EngineCpu).
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

from bench._support.machine import (
    EngineCpu,
    container_memory_bytes,
    container_seconds,
    live_container_ids,
    runs_command,
)

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "gym_compose"]
SANDBOX_AGENT_MARKER = b"gym-sandbox-agent"  # a sandbox's init: launch.LAUNCHER's $0
CPU_KINDS = ("containers", "  servers, broker, collector", "  sandboxes", "dockerd", "containerd", "containerd-shim", "fuse-overlayfs")


def run(argv: list[str], timeout: float = 3600, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout, **kwargs)


def quantiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


class ContainerSampler(threading.Thread):
    """The engine's containers' summed memory (servers, broker, collector, sandboxes: run the benchmark
    alone) and its live sandboxes, four times a second, from the cgroup folders: no docker client is
    started, which on 2 cores took CPU from the run it measured (`docker stats` every second and
    `docker ps` four times a second did). A sandbox is a container whose init runs the sandbox agent.
    The other containers' CPU (servers, broker, collector) is read from their cgroups too, so the
    sandboxes' is the containers' total less theirs."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak, self.peak_sandboxes = 0.0, 0
        self.stopping = threading.Event()
        self.is_sandbox: dict[str, bool] = {}
        self.others_first: dict[str, float] = {}  # container -> CPU seconds when the window began (0: started in it)
        self.others_last: dict[str, float] = {}
        self.sampled = False

    def run(self) -> None:
        self.sample()
        while not self.stopping.wait(0.25):
            self.sample()
        self.sample()

    def sample(self) -> None:
        live = live_container_ids()
        for container in live - self.is_sandbox.keys():
            found = runs_command(container, SANDBOX_AGENT_MARKER)
            if found is not None:
                self.is_sandbox[container] = found
        for container in live:
            if self.is_sandbox.get(container) is False:
                used = container_seconds(container) or 0.0
                self.others_first.setdefault(container, 0.0 if self.sampled else used)
                self.others_last[container] = max(used, self.others_last.get(container, 0.0))
        self.peak_sandboxes = max(self.peak_sandboxes, sum(self.is_sandbox.get(c, False) for c in live))
        self.peak = max(self.peak, sum(container_memory_bytes(c) for c in live))
        self.sampled = True

    def servers_seconds(self) -> float:
        """CPU seconds of the containers that are not sandboxes, over the sampled window."""
        return sum(self.others_last[c] - self.others_first[c] for c in self.others_last)


def collect(project: str, head_port: int, parallel: int, repeats: int, results: Path) -> dict:
    sampler, cpu = ContainerSampler(), EngineCpu()
    sampler.start()
    cpu.start()
    began = time.monotonic()
    done = run([*CLI, "eval", "run", "--no-serve", "-p", project, "--head-port", str(head_port), "--benchmark",
                "swebench_mini", "--num-samples-in-parallel", str(parallel), "--num-repeats", str(repeats),
                "--results-dir", str(results), "--run-name", f"p{parallel}"])
    wall = time.monotonic() - began
    used = cpu.stop()
    sampler.stopping.set()
    sampler.join()
    used["  servers, broker, collector"] = sampler.servers_seconds()
    used["  sandboxes"] = used["containers"] - used["  servers, broker, collector"]
    if done.returncode != 0:
        sys.exit(f"collection with {parallel} in parallel failed:\n{done.stderr[-3000:]}")
    (run_dir,) = results.glob(f"p{parallel}-*")
    rows = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    progress = json.loads((run_dir / "progress.json").read_text())
    if any(row["reward"] != 1.0 for row in rows):
        sys.exit(f"an oracle rollout did not score 1.0 with {parallel} in parallel")
    return {"rows": rows, "rate": progress["rollouts_per_second"] * 60, "wall": wall, "cpu": used,
            "peak_memory": sampler.peak, "peak_sandboxes": sampler.peak_sandboxes}


def cpu_share(measured: dict, kind: str) -> float:
    """CPU seconds per instance of one kind."""
    return measured["cpu"].get(kind, 0.0) / len(measured["rows"])


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
    print("CPU seconds per instance (the whole machine, and where they went):")
    for kind in ("machine", *CPU_KINDS, "rest of the machine"):
        line(f"  {kind}", [f"{cpu_share(measured[n], kind):.3f}" for n in args.parallel])
    print(f"instances per run: {len(measured[args.parallel[0]]['rows'])}; load average at the end: "
          f"{os.getloadavg()[0]:.1f} (machine shared with other work)")


if __name__ == "__main__":
    main()
