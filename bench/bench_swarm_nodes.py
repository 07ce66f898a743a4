"""A stack spread over a three-node swarm on this one machine; a worker killed mid-run; --resume.

    sudo .venv/bin/python -m bench.bench_swarm_nodes [--nodes 2] [--rows 1200] [--parallel 32]
                                                     [--kill-after 150] [--model-latency 0.2] [--json OUT]

1. scripts/swarm_nodes.py makes the engine a swarm manager and joins --nodes further engines
   (each its own dockerd in its own network namespace) as workers;
2. `up -d --target swarm --node-engine unix:///run/gymnodeN/docker.sock ...` copies the images
   into every node (this machine has no registry) and deploys example_single_tool_call + the mock
   model, the resources server and the agent with 2 replicas each; `ps` shows which node runs what;
3. `eval run --no-serve` of --rows rows at --parallel; after --kill-after rollouts, the worker
   running most server tasks (not the head's) is killed as a machine dies (its link cut, its
   dockerd, containerd and containers SIGKILLed): the run stops, keeping what finished;
4. Swarm marks the node down and reschedules its tasks on the nodes left; once every replica
   runs again, `eval run --resume` completes the run; rollouts.jsonl must hold every row exactly
   once, each with reward 1.0;
5. `down`, then the nodes are removed (also on failure), and the swarm unless this engine was a
   swarm manager before the scenario (a test session's; leaving a swarm breaks name resolution
   on the engine's other networks, so the session leaves it once at its end).
One scenario at a time on a machine: a second waits for the first (a lock under /run), then
removes what a killed one left (its stack, its nodes) before it starts.
Prints each step with its time; --json writes the figures (the e2e test reads them). Root only.
"""

from __future__ import annotations

import argparse
import collections
import fcntl
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "gym_compose"]
NODES = [sys.executable, str(REPO / "scripts/swarm_nodes.py")]
PROJECT = "gcnodes"
HEAD_PORT = "11094"
ROWS = REPO / "server_images/example_single_tool_call/data/example.jsonl"
STACK = ["--target", "swarm", "-p", PROJECT, "--head-port", HEAD_PORT,
         "--resources-server", "example_single_tool_call",
         "++example_single_tool_call.resources_servers.example_single_tool_call.docker.replicas=2",
         "++example_single_tool_call_simple_agent.responses_api_agents.simple_agent.docker.replicas=2"]
RESCHEDULE_TIMEOUT_S = 180
SCENARIO_LOCK = Path("/run/gymnodes-scenario.lock")
NODES_STATE = Path("/run/gymnodes.json")  # scripts/swarm_nodes.py's record of the nodes it made
RUN_TIMEOUT_S = 900


def say(message: str, started: float) -> None:
    print(f"[{time.monotonic() - started:6.1f} s] {message}", flush=True)


def run(*args: str, cwd: Path, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess:
    result = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise SystemExit(f"`{' '.join(args)}` failed:\n{(result.stderr or result.stdout)[-3000:]}")
    return result


def tasks() -> list[dict]:
    """The stack's tasks Swarm wants running, with the node each runs on. (A task of a lost node
    stays `Running` in `docker service ls` counts until the node returns; its desired state is
    what tells it is given up.)"""
    listing = run("docker", "stack", "ps", PROJECT, "--format", "{{json .}}", cwd=REPO, check=False)
    rows = [json.loads(line) for line in listing.stdout.splitlines() if line.startswith("{")]
    return [row for row in rows if row.get("DesiredState") == "Running"]


def all_replicas_running(lost_node: str) -> bool:
    wanted = run("docker", "service", "ls", "--filter", f"label=com.docker.stack.namespace={PROJECT}",
                 "--format", "{{.Name}} {{.Replicas}}", cwd=REPO).stdout.splitlines()
    running = collections.Counter(t["Name"].strip(" \\_").rsplit(".", 1)[0] for t in tasks()
                                  if t["Node"] != lost_node and t["CurrentState"].startswith("Running"))
    return bool(wanted) and all(running[name] >= int(replicas.split("/")[1].split(" ")[0])
                                for name, replicas in (line.split(" ", 1) for line in wanted))


def was_a_manager() -> bool:
    info = subprocess.run(["docker", "info", "--format", "{{.Swarm.ControlAvailable}}"], capture_output=True,
                          text=True, timeout=60)
    return info.stdout.strip() == "true"


def node_hosts() -> dict[str, str]:
    """hostname -> node id (the nodes are gymnode1.., the manager keeps the machine's name)."""
    lines = run("docker", "node", "ls", "--format", "{{.Hostname}} {{.ID}}", cwd=REPO).stdout.splitlines()
    return dict(line.split(" ", 1) for line in lines)


@contextmanager
def one_scenario_at_a_time(lock: Path, started: float) -> Iterator[None]:
    """Held for the whole scenario: two at once would share the nodes and the project, and each
    would remove the other's at its end. The kernel drops the lock when its holder dies."""
    with open(lock, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for the swarm-nodes scenario that holds {lock}", started)
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def remove_leftovers(work: Path, started: float) -> None:
    """The stack and the nodes of a scenario that was killed before its own clean-up."""
    nodes = json.loads(NODES_STATE.read_text()).get("nodes") if NODES_STATE.exists() else []
    services = run("docker", "service", "ls", "-q", "--filter", f"label=com.docker.stack.namespace={PROJECT}",
                   cwd=REPO, check=False).stdout.split()
    if not nodes and not services:
        return
    say(f"removing what an interrupted scenario left: {len(services)} services of {PROJECT}, nodes {nodes}", started)
    run(*CLI, "down", "-p", PROJECT, cwd=work, check=False, timeout=300)
    run(*NODES, "down", "--keep-swarm", cwd=REPO, check=False, timeout=600)


def scenario(args: argparse.Namespace, work: Path, started: float) -> dict:
    figures: dict = {}
    run(*NODES, "up", "--nodes", str(args.nodes), cwd=REPO)
    say(f"swarm of {len(node_hosts())} nodes: {', '.join(sorted(node_hosts()))}", started)

    # the mock model's delay per call keeps the run going long enough to lose a node in the middle of it
    stack = [*STACK, f"++policy_model.responses_api_models.mock_model.latency_s={args.model_latency}"]
    engines = [f"--node-engine=unix:///run/gymnode{n}/docker.sock" for n in range(1, args.nodes + 1)]
    deploying = time.monotonic()
    up = run(*CLI, "up", "-d", *stack, *engines, cwd=work)
    figures["deploy_s"] = round(time.monotonic() - deploying, 1)
    copied = [line.strip() for line in (up.stdout + up.stderr).splitlines() if ": loaded " in line]
    if len(copied) != args.nodes:
        raise SystemExit(f"expected `up --node-engine` to load the images into {args.nodes} nodes, it said:\n"
                         f"{(up.stdout + up.stderr)[-2000:]}")
    figures["image_copies"] = copied
    say("images copied by `up --node-engine`: " + "; ".join(copied), started)
    placement = collections.Counter(task["Node"] for task in tasks())
    figures["tasks_per_node"] = dict(placement)
    say(f"stack healthy in {figures['deploy_s']} s; tasks per node: {dict(placement)}", started)
    print(run(*CLI, "ps", "-p", PROJECT, cwd=work).stdout, flush=True)

    lines = [line for line in ROWS.read_text().splitlines() if line.strip()]
    rows = work / "rows.jsonl"
    rows.write_text("\n".join(lines[i % len(lines)] for i in range(args.rows)) + "\n")
    collect = [*CLI, "eval", "run", "--no-serve", *stack, "--input", str(rows), "--run-name", "nodes",
               "--num-samples-in-parallel", str(args.parallel)]
    first = subprocess.Popen(collect, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    progress = None
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while first.poll() is None and time.monotonic() < deadline:
        found = list((work / "results").glob("nodes-*/progress.json"))
        if found:
            progress = json.loads(found[0].read_text() or "{}")
            if progress.get("done", 0) >= args.kill_after:
                break
        time.sleep(0.5)
    if first.poll() is not None:
        raise SystemExit(f"the run ended before the kill (raise --rows):\n{first.stdout.read()[-2000:]}")  # type: ignore[union-attr]

    head_node = next(t["Node"] for t in tasks() if t["Name"].startswith(f"{PROJECT}_head."))
    workers = collections.Counter(t["Node"] for t in tasks() if t["Node"].startswith("gymnode") and
                                  t["Node"] != head_node)
    victim, lost = workers.most_common(1)[0]
    killed_at = time.monotonic()
    run(*NODES, "kill", victim.removeprefix("gymnode"), cwd=REPO)
    figures["killed"] = {"node": victim, "tasks": lost, "rollouts_done_before": progress.get("done") if progress else 0}
    say(f"killed {victim} ({lost} server tasks) after {figures['killed']['rollouts_done_before']} rollouts", started)

    output, _ = first.communicate(timeout=RUN_TIMEOUT_S)
    figures["first_run_exit"] = first.returncode
    say(f"first run ended (exit {first.returncode}):", started)
    print("\n".join(output.strip().splitlines()[-8:]), flush=True)
    while not all_replicas_running(victim):
        if time.monotonic() - killed_at > RESCHEDULE_TIMEOUT_S:
            raise SystemExit(f"the tasks of {victim} were not rescheduled within {RESCHEDULE_TIMEOUT_S} s:\n"
                             + run("docker", "stack", "ps", PROJECT, cwd=REPO).stdout)
        time.sleep(1)
    figures["rescheduled_s"] = round(time.monotonic() - killed_at, 1)
    figures["tasks_per_node_after"] = dict(collections.Counter(t["Node"] for t in tasks()))
    say(f"every replica running again {figures['rescheduled_s']} s after the kill; tasks per node: "
        f"{figures['tasks_per_node_after']}", started)
    print(run(*CLI, "ps", "-p", PROJECT, cwd=work).stdout, flush=True)

    resumed = run(*collect, "--resume", cwd=work, check=False, timeout=RUN_TIMEOUT_S)
    figures["resume_exit"] = resumed.returncode
    (run_dir,) = (work / "results").glob("nodes-*")
    rollouts = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines() if line.strip()]
    keys = collections.Counter((r["_ng_task_index"], r["_ng_rollout_index"]) for r in rollouts)
    figures["rollouts"] = len(rollouts)
    figures["distinct_rows"] = len(keys)
    figures["duplicates"] = sum(count - 1 for count in keys.values())
    figures["rewards"] = dict(collections.Counter(str(r.get("reward")) for r in rollouts))
    say(f"--resume exit {resumed.returncode}: {len(rollouts)} rollouts, {len(keys)} distinct (row, repeat), "
        f"{figures['duplicates']} duplicates, rewards {figures['rewards']}", started)
    if resumed.returncode != 0:
        print(resumed.stderr[-3000:], flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--rows", type=int, default=1200)
    parser.add_argument("--parallel", type=int, default=32)
    parser.add_argument("--kill-after", type=int, default=150)
    parser.add_argument("--model-latency", type=float, default=0.2, metavar="S",
                        help="the mock model's delay per call (two calls a rollout), so that the kill lands mid-run")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-swarm-nodes-"))
    started = time.monotonic()
    with one_scenario_at_a_time(SCENARIO_LOCK, started):
        remove_leftovers(work, started)
        keep_swarm = was_a_manager()
        try:
            figures = scenario(args, work, started)
        finally:
            run(*CLI, "down", "-p", PROJECT, cwd=work, check=False, timeout=300)
            run(*NODES, "down", *(["--keep-swarm"] if keep_swarm else []), cwd=REPO, check=False, timeout=600)
            say("stack and nodes removed" + (", the swarm kept (it was there before)" if keep_swarm
                                             else ", swarm left"), started)
    figures["total_s"] = round(time.monotonic() - started, 1)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
