"""Two checkouts side by side (before and after a change), runs interleaved: warm starts and
`eval run --no-serve` (docs/performance.md).

    git worktree add --detach /tmp/before main
    .venv/bin/python -m bench.bench_checkouts /tmp/before . [--starts 4] [--runs 4] [--rows 500]

Each checkout runs its own code with this venv's packages (`python -m gym_compose` from the
checkout's folder) and builds its own images. Per warm start (`up -d`, then `down`, untimed): the
wall time, the CLI's CPU with its docker/compose children, and the containers' CPU when `up`
returns (their start to healthy). Per eval run (each checkout against its own stack, 500 rows at
32): the wall time, when the first rollout was written, and the wall time less the collection
(rows / the collector's rollouts/s). Prints each run and the medians with the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._support.cli_runs import FirstRolloutWatch, cached_bytecode_env, repeated_rows
from bench._support.machine import container_seconds

REPO = Path(__file__).resolve().parents[1]
SELECTOR = ["--resources-server", "example_single_tool_call"]
ROWS = REPO / "server_images" / "example_single_tool_call" / "data" / "example.jsonl"


def tree_env(tree: Path) -> dict[str, str]:
    """The checkout's code with this venv's packages, its bytecode cached as an installed tool's is."""
    return {**cached_bytecode_env(), "PYTHONPATH": str(tree)}


def gym_compose(tree: Path, *args: str, cwd: Path | None = None, check: bool = True) -> None:
    result = subprocess.run([sys.executable, "-m", "gym_compose", *args], cwd=cwd or tree, capture_output=True,
                            text=True, timeout=600, env=tree_env(tree))
    if check and result.returncode != 0:
        sys.exit(f"`gym-compose {' '.join(args)}` in {tree} failed:\n{result.stderr[-3000:]}")


def project_containers(project: str) -> list[str]:
    listing = ["docker", "ps", "-q", "--no-trunc", "--filter", f"label=com.docker.compose.project={project}"]
    return subprocess.run(listing, capture_output=True, text=True, timeout=60).stdout.split()


def warm_start(tree: Path, project: str, port: str) -> tuple[float, float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    gym_compose(tree, "up", "-d", "-p", project, "--head-port", port, *SELECTOR)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    servers = sum(container_seconds(c) or 0.0 for c in project_containers(project))
    gym_compose(tree, "down", "-p", project)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, servers


def eval_run(tree: Path, project: str, port: str, rows: Path, work: Path, name: str) -> tuple[float, float, float]:
    results = work / "results"
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "gym_compose", "eval", "run", "--no-serve", "-p", project, "--head-port", port,
         *SELECTOR, "--input", str(rows), "--run-name", name, "--results-dir", str(results),
         "--num-samples-in-parallel", "32"],
        cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=tree_env(tree))
    first = FirstRolloutWatch(results, f"{name}-*", started)
    while process.poll() is None:
        first.poll()
        time.sleep(0.01)
    wall = time.monotonic() - started
    _, stderr = process.communicate()
    if process.returncode != 0:
        sys.exit(f"eval run in {tree} failed:\n{stderr[-3000:]}")
    (run_dir,) = results.glob(f"{name}-*")
    rate = json.loads((run_dir / "progress.json").read_text())["rollouts_per_second"]
    total = sum(1 for line in rows.read_text().splitlines() if line.strip())
    return wall, float("nan") if first.seconds is None else first.seconds, wall - total / rate


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--starts", type=int, default=4, help="warm starts of each, interleaved")
    parser.add_argument("--runs", type=int, default=4, help="eval runs of each, interleaved")
    parser.add_argument("--rows", type=int, default=500)
    parser.add_argument("--project-prefix", default="gym-compose-bench",
                        help="the compose projects are PREFIX-before and PREFIX-after (one prefix per session)")
    parser.add_argument("--head-port", type=int, default=11096, help="before's head port; after's is the next")
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    ports = {"before": str(args.head_port), "after": str(args.head_port + 1)}
    projects = {name: f"{args.project_prefix}-{name}" for name in trees}
    for name, tree in trees.items():
        gym_compose(tree, "down", "-p", projects[name], check=False)

    starts: dict[str, list[tuple[float, float, float]]] = {name: [] for name in trees}
    for attempt in range(args.starts):
        for name, tree in trees.items():
            starts[name].append(warm_start(tree, projects[name], ports[name]))
            wall, cli, servers = starts[name][-1]
            print(f"warm start {attempt + 1} {name}: {wall:.2f} s, CLI CPU {cli:.2f} s, containers' CPU at healthy "
                  f"{servers:.2f} s; load {load()}", flush=True)

    work = Path(tempfile.mkdtemp(prefix="bench-checkouts-"))
    rows = repeated_rows(ROWS, work / "rows.jsonl", args.rows)
    runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in trees}
    try:
        if args.runs:
            for name, tree in trees.items():
                gym_compose(tree, "up", "-d", "-p", projects[name], "--head-port", ports[name], *SELECTOR)
        for attempt in range(args.runs):
            for name, tree in trees.items():
                runs[name].append(eval_run(tree, projects[name], ports[name], rows, work, f"{name}{attempt}"))
                wall, first, fixed = runs[name][-1]
                print(f"eval run {attempt + 1} {name}: {wall:.2f} s, first rollout {first:.2f} s, less the collection "
                      f"{fixed:.2f} s; load {load()}", flush=True)
    finally:
        for name, tree in trees.items():
            gym_compose(tree, "down", "-p", projects[name], check=False)

    def med(values: list[tuple[float, ...]], index: int) -> str:
        return f"{statistics.median(v[index] for v in values):.2f}" if values else "-"

    print()
    for name in trees:
        print(f"{name}: warm start {med(starts[name], 0)} s (CLI CPU {med(starts[name], 1)} s, containers' CPU "
              f"{med(starts[name], 2)} s); eval run {med(runs[name], 0)} s, first rollout {med(runs[name], 1)} s, "
              f"less the collection {med(runs[name], 2)} s (medians)")
    print(f"load average at the end: {load()}")


if __name__ == "__main__":
    main()
