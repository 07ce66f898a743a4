"""Soak under faults: one long collection while servers are killed and restarted.

    .venv/bin/python -m bench.bench_soak [--rows 100000] [--parallel 256] [--fault-every 60]
    .venv/bin/python -m bench.bench_soak --resources-server python_sandbox --rows 5000 --parallel 64 --kill-broker

Starts a resources server (example_single_tool_call by default; python_sandbox for the sandboxed
path) with its simple agent and the mock model with `gym-compose up -d`, measures an unfaulted
baseline (`--baseline-rows` rows), then collects `--rows` rows with `eval run --no-serve`. Every
`--fault-every` seconds it kills one server (`docker kill`, round-robin over the five kinds; with
`--kill-broker` the sandbox broker once, in the second round); the CLI stops the run naming it;
the server is restarted (`docker start`), and the run is resumed with `--resume`, until every
rollout is done. Prints: completed rollouts, failure rows (and how many name no cause: must be
0), duplicate rollouts (must be 0), each container's memory at the start, its peak (sampled
before each fault) and at the end with its restarts, rollouts/s over the whole faulted run with
its ratio to the baseline, the names the engine lost and the bench gave back (repair_names), and
what `down` left of the project (must be nothing).
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._support.cli_runs import repeated_rows
from gym_compose.plan.planner import service_name

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "gym_compose"]
BROKER = "sandbox-broker"
PROJECT_LABEL = "io.gym-compose.project"


def instances(resources_server: str) -> list[str]:
    """The instances of `--resources-server X` with its simple agent (server_images/X/configs/X.yaml)."""
    return [f"{resources_server}_environment_server", f"{resources_server}_simple_agent", resources_server,
            "policy_model"]


def leftovers(project: str) -> dict[str, list[str]]:
    """The project's containers, networks and volumes that are still there."""
    found = {}
    for kind, listing in (("containers", ["ps", "-aq"]), ("networks", ["network", "ls", "-q"]),
                          ("volumes", ["volume", "ls", "-q"])):
        ids = subprocess.run(["docker", *listing, "--filter", f"label={PROJECT_LABEL}={project}"],
                             capture_output=True, text=True, timeout=120).stdout.split()
        if ids:
            found[kind] = ids
    return found
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "kB": 1e3, "MB": 1e6, "GB": 1e9}


def gym_compose(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=24 * 3600)
    if check and result.returncode != 0:
        sys.exit(f"`gym-compose {' '.join(args)}` failed:\n{result.stderr[-3000:]}")
    return result


def memory_mib(project: str) -> dict[str, float]:
    out = subprocess.run(["docker", "stats", "--no-stream", "--format", "{{.Name}} {{.MemUsage}}"],
                         capture_output=True, text=True, timeout=120).stdout
    usage = {}
    for line in out.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith(f"{project}-") or "-run-" in name:
            continue
        amount = rest.split("/")[0].strip()
        number = amount.rstrip("BKMGikb")
        unit = amount[len(number):]
        usage[name[len(project) + 1:].rsplit("-", 1)[0]] = float(number) * UNITS.get(unit, 1) / (1 << 20)
    return usage


def healthy(container: str) -> bool:
    return subprocess.run(["docker", "inspect", "-f", "{{.State.Health.Status}}", container],
                          capture_output=True, text=True, timeout=60).stdout.strip() == "healthy"


def wait_healthy(container: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not healthy(container):
        if time.monotonic() > deadline:
            project = container.rsplit("-", 2)[0]
            for name in subprocess.run(["docker", "ps", "-a", "--filter", f"label={PROJECT_LABEL}={project}",
                                        "--format", "{{.Names}}"], capture_output=True, text=True,
                                       timeout=60).stdout.split():
                state = subprocess.run(["docker", "inspect", "-f", "{{json .State}}", name],
                                       capture_output=True, text=True, timeout=60).stdout
                logs = subprocess.run(["docker", "logs", "--tail", "30", name], capture_output=True, text=True,
                                      timeout=60)
                print(f"--- {name}: {state[-1500:]}\n{(logs.stdout + logs.stderr)[-3000:]}", flush=True)
            sys.exit(f"{container} did not become healthy again within {timeout:.0f} s")
        time.sleep(0.5)


RESOLVE = """import socket,sys
for name in sys.argv[1:]:
    try: socket.getaddrinfo(name, 8000)
    except OSError: print(name)
"""


def repair_names(project: str, services: list[str]) -> list[str]:
    """Engine 20.10 here loses the DNS names of some containers of a network after a few kill + start
    cycles under load (NXDOMAIN from every container while the container is attached with its alias);
    reconnecting the container to its network gives the name back. Returns the services repaired."""
    probe = f"{project}-{services[-1]}-1"
    missing = subprocess.run(["docker", "exec", probe, "python3", "-c", RESOLVE, *services], capture_output=True,
                             text=True, timeout=120).stdout.split()
    for service in missing:
        container = f"{project}-{service}-1"
        networks = json.loads(subprocess.run(["docker", "inspect", "-f", "{{json .NetworkSettings.Networks}}",
                                              container], capture_output=True, text=True, timeout=60).stdout or "{}")
        for network, settings in networks.items():
            aliases = [a for a in settings.get("Aliases") or [] if a not in (container,) and len(a) != 12]
            subprocess.run(["docker", "network", "disconnect", network, container], capture_output=True, timeout=120)
            subprocess.run(["docker", "network", "connect", *[f"--alias={a}" for a in aliases], network, container],
                           capture_output=True, timeout=120)
    return missing


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_bytes().split(b"\n") if line.strip()] if path.exists() else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--parallel", type=int, default=256)
    parser.add_argument("--fault-every", type=float, default=60.0, help="seconds between faults")
    parser.add_argument("--baseline-rows", type=int, default=2000)
    parser.add_argument("--project", default="gym-compose-bench-soak")
    parser.add_argument("--head-port", default="11093")
    parser.add_argument("--max-rounds", type=int, default=10_000)
    parser.add_argument("--resources-server", default="example_single_tool_call",
                        help="a server of server_images/ with a simple agent config (python_sandbox: sandboxes)")
    parser.add_argument("--kill-broker", action="store_true", help="kill the sandbox broker once, in round 2")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    example = REPO / "server_images" / args.resources_server / "data" / "example.jsonl"
    rows = repeated_rows(example, work / "rows.jsonl", args.rows)
    baseline_rows = repeated_rows(example, work / "baseline.jsonl", args.baseline_rows)
    # a long project shortens the long service names (gym_compose/contract.py)
    services = [service_name(instance, args.project) for instance in instances(args.resources_server)] + ["head"]
    stack = ["-p", args.project, "--head-port", args.head_port, "--resources-server", args.resources_server]
    collect = ["eval", "run", "--no-serve", *stack, "--num-samples-in-parallel", str(args.parallel)]

    print("starting the stack ...", flush=True)
    gym_compose("up", "-d", *stack, cwd=work)
    restarts: collections.Counter = collections.Counter()
    repaired: collections.Counter = collections.Counter()  # names the engine lost (repair_names)
    try:
        started = time.monotonic()
        gym_compose(*collect, "--input", str(baseline_rows), "--run-name", "baseline", cwd=work)
        baseline_rate = args.baseline_rows / (time.monotonic() - started)
        print(f"baseline (no faults): {args.baseline_rows} rollouts, {baseline_rate:.1f} rollouts/s "
              "(whole eval run command)", flush=True)

        memory_start = memory_mib(args.project)
        peak = dict(memory_start)
        started = time.monotonic()
        unfaulted_failures = 0
        unprompted_deaths: collections.Counter = collections.Counter()
        for round_number in range(args.max_rounds):
            resume = ["--resume"] if round_number else []
            log = work / f"round-{round_number + 1}.log"
            with open(log, "w") as output:
                cli = subprocess.Popen([*CLI, *collect, "--input", str(rows), "--run-name", "soak", *resume],
                                       cwd=work, stdout=output, stderr=subprocess.STDOUT)
            try:
                cli.wait(timeout=args.fault_every)
            except subprocess.TimeoutExpired:
                for name, mib in memory_mib(args.project).items():
                    peak[name] = max(peak.get(name, 0.0), mib)
                victim = BROKER if args.kill_broker and round_number == 1 else services[round_number % len(services)]
                subprocess.run(["docker", "kill", f"{args.project}-{victim}-1"], capture_output=True, timeout=120)
                cli.wait(timeout=600)
                restarts[victim] += 1
                subprocess.run(["docker", "start", f"{args.project}-{victim}-1"], capture_output=True, timeout=120)
                wait_healthy(f"{args.project}-{victim}-1")
                for service in repair_names(args.project, services):
                    repaired[service] += 1
                    print(f"round {round_number + 1}: the engine had lost the name {service}; reconnected", flush=True)
                print(f"round {round_number + 1}: killed {victim}; the run stopped with exit {cli.returncode}",
                      flush=True)
                continue
            if cli.returncode == 0:
                break
            # a healthcheck that timed out on a loaded machine makes --no-serve refuse the resume:
            # every server healthy again first (the run's own refusal is right, the bench waits)
            for service in services:
                container = f"{args.project}-{service}-1"
                state = subprocess.run(["docker", "inspect", "-f", "{{.State.Running}} {{.State.OOMKilled}}",
                                        container], capture_output=True, text=True, timeout=60).stdout.split()
                if state and state[0] == "false":  # died by itself: said, counted, restarted
                    print(f"round {round_number + 1}: {service} had exited by itself"
                          f"{' (out of memory)' if state[1] == 'true' else ''}", flush=True)
                    unprompted_deaths[service] += 1
                    subprocess.run(["docker", "start", container], capture_output=True, timeout=120)
                wait_healthy(container)
            print(f"round {round_number + 1}: exit {cli.returncode} without a fault:\n"
                  f"{log.read_text(errors='replace')[-2000:]}", flush=True)
            unfaulted_failures += 1
            if unfaulted_failures == 3:
                sys.exit("three rounds failed without a fault: the run does not recover by itself")
        elapsed = time.monotonic() - started
        memory_end = memory_mib(args.project)

        (run_dir,) = [p for p in (work / "results").glob("soak-*") if p.is_dir()]
        rollouts = read_rows(run_dir / "rollouts.jsonl")
        keys = [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in rollouts]
        failures = read_rows(run_dir / "rollouts_failures.jsonl")
        classes = collections.Counter(f.get("_ng_failure_class") for f in failures)
        nameless = sum(1 for f in failures if not f.get("_ng_failure_message"))
        print(f"\nrows {args.rows} at {args.parallel} in parallel, a fault every {args.fault_every:g} s, "
              f"{round_number + 1} rounds")
        print(f"completed      {len(set(keys))} of {args.rows}")
        print(f"duplicates     {len(keys) - len(set(keys))}")
        print(f"failure rows   {len(failures)} ({', '.join(f'{k}: {v}' for k, v in classes.items()) or 'none'}); "
              f"without a cause: {nameless}")
        print(f"rollouts/s     {len(set(keys)) / elapsed:.1f} over {elapsed:.0f} s with faults "
              f"({len(set(keys)) / elapsed / baseline_rate:.2f} x the unfaulted baseline)")
        print(f"died unkilled  {dict(unprompted_deaths) or 'none'}")
        print(f"names repaired {dict(repaired) or 'none'} (the engine lost them; reconnected to the network)")
        print("memory (MiB)   container: start -> peak before a fault -> end (restarts)")
        for name in sorted(set(memory_start) | set(memory_end)):
            print(f"  {name:45} {memory_start.get(name, 0):7.1f} -> {peak.get(name, 0):7.1f} -> "
                  f"{memory_end.get(name, 0):7.1f} ({restarts[name]})")
    finally:
        gym_compose("down", "-p", args.project, cwd=work, check=False)
        print(f"left after down  {leftovers(args.project) or 'nothing'}")


if __name__ == "__main__":
    main()
