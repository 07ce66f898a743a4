"""Sandboxes: gym-compose's broker and in-sandbox agent side by side with the way NeMo Gym 0.7's
docker provider works (`docker run` to create, one `docker exec` CLI process per command), in one
run, on the same sandbox image and machine.

    .venv/bin/python -m bench.bench_sandboxes [--execs 200] [--leases 20] [--parallel 16] [--max-live N]
    .venv/bin/python -m bench.bench_sandboxes --forks [--group 16]   # fork from seed vs fresh (sandbox_forks.py)

gym-compose (measured inside the python_sandbox server container, through gym_compose.sandbox and
the broker, i.e. what a server pays):
- lease from the warm pool and cold (p50/p95): `await AsyncSandbox().start(spec)`;
- sandbox start (broker: container create .. agent ready, p50/p95);
- exec round trip of `true` (p50/p95) with python_sandbox's shell (/bin/sh; `--shell` for the
  baseline's, which should be the same: bash costs both sides several ms more per command);
- sandboxes started per second: --parallel cold leases at once, with those leases' p50/p95/p99 and
  failures, and the memory per idle sandbox while all of them are held: the cgroup's (`docker stats`)
  and the whole machine's (MemAvailable before the burst less while held, per sandbox: the
  engine's shim and bookkeeping included). --max-live raises the broker's cap (default: derived
  from the machine) so that all of them run at once; --max-starting sets the broker's throttle
  (default: twice the engine's cores, at least 4). --burst-from warm leases them from a warm pool
  of --parallel ready sandboxes instead (the server's `warm_pool`, filled before the burst; max_live
  then leaves room for cold leases beside the pool), i.e. what a server that declares such a
  pool gets.
NeMo Gym 0.7's way (from the host, as its provider runs in the server process there):
- create: `docker run -d --init ... <keep-alive>`, then its start probe and shell detection
  (`docker exec C sh -c 'printf docker-sandbox-ready'`, `docker exec C sh -c 'command -v bash'`);
- exec: `docker exec C sh -c true` (NeMo's provider takes bash when the image has it unless
  `exec_shell` is set; the same shell on both sides keeps the comparison about the transport);
- starts per second: --parallel creates at once.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "gym_compose"]
PROJECT = "gym-compose-bench-sandboxes"
LABEL = "io.gym-compose.bench-baseline"
RELEASE_FILE = "/tmp/bench-release"  # sandbox_bench_probe.py's: it keeps the burst's sandboxes until this exists
TARGETS = {"exec_p50_ms": 10.0, "warm_lease_p50_ms": 50.0, "cold_start_p50_s": 1.0}


def run(argv: list[str], timeout: float = 900, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout, **kwargs)


def gym_compose(*args: str) -> subprocess.CompletedProcess:
    result = run([*CLI, *args])
    if result.returncode != 0:
        sys.exit(f"`gym-compose {' '.join(args)}` failed:\n{result.stderr}")
    return result


def quantiles(values: list[float], scale: float = 1.0) -> tuple[float, float]:
    ordered = sorted(values)
    return (statistics.median(ordered) * scale, ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] * scale)


def ours(args) -> tuple[dict, str]:
    server_key = "++python_sandbox.resources_servers.python_sandbox"
    max_live = max(args.max_live, args.parallel + 16) if args.burst_from == "warm" else args.max_live
    broker = [f"++sandbox.gym_compose.max_live={max_live}"] if max_live else []
    broker += [f"++sandbox.gym_compose.max_starting={args.max_starting}"] if args.max_starting else []
    limits = [f"{server_key}.sandbox_provider=sandbox", *broker] if broker else []
    if args.burst_from == "warm":
        limits.append(f"{server_key}.sandbox_config.warm_pool={args.parallel}")
    gym_compose("up", "-d", "-p", PROJECT, "--head-port", str(args.head_port), "--resources-server", "python_sandbox",
                *limits)
    try:
        server = run(["docker", "compose", "-p", PROJECT, "ps", "-q", "python-sandbox"]).stdout.strip()
        available_before = mem_available_mib()
        probe = subprocess.Popen(["docker", "exec", "-i", server, "python", "-", str(args.execs), str(args.leases),
                                  str(args.parallel), args.burst_from], cwd=REPO, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert probe.stdin is not None and probe.stderr is not None and probe.stdout is not None
        probe.stdin.write((REPO / "bench" / "sandbox_bench_probe.py").read_text())
        probe.stdin.close()
        probe.stdin = None  # communicate() below must not flush it again
        said = []
        for line in probe.stderr:  # until the burst's sandboxes are all held
            said.append(line)
            if line.strip() == "held":
                break
        memory = held_memory(available_before)
        run(["docker", "exec", server, "touch", RELEASE_FILE])
        out, rest = probe.communicate(timeout=900)
        if probe.returncode != 0:
            sys.exit(f"the in-container probe failed:\n{''.join(said)}{rest}")
        return {**json.loads(out), "held_memory": memory}, sandbox_image()
    finally:
        run([*CLI, "down", "-p", PROJECT])


def mem_available_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return 0.0


def held_memory(available_before_mib: float) -> dict:
    """Memory per idle sandbox while the burst holds them: cgroup (docker stats) and whole machine."""
    ids = run(["docker", "ps", "-q", "--filter", f"label=io.gym-compose.project={PROJECT}",
               "--filter", "label=io.gym-compose.sandbox"]).stdout.split()
    usage = run(["docker", "stats", "--no-stream", "--format", "{{.MemUsage}}", *ids]).stdout.split("\n") if ids else []
    cgroup = [to_mib(line.split("/")[0]) for line in usage if line.strip()]
    # every sandbox of the project counts: the server's warm pool (refilling during a warm burst) too
    machine = (available_before_mib - mem_available_mib()) / len(ids) if ids else 0.0
    return {"sandboxes": len(ids), "cgroup_mib_mean": statistics.mean(cgroup) if cgroup else None,
            "machine_mib_per_sandbox": machine}


def to_mib(text: str) -> float:
    number = float("".join(ch for ch in text if ch.isdigit() or ch == "."))
    unit = text.strip().lstrip("0123456789.").strip().lower()
    return number * {"b": 1 / 2**20, "kib": 1 / 1024, "mib": 1, "gib": 1024}.get(unit, 1)


def sandbox_image() -> str:
    """The image the broker started the sandboxes from (its policy is in the rendered compose file)."""
    import yaml

    from gym_compose.stack.state import project_dir

    compose = project_dir(PROJECT) / "compose.yaml"
    broker = yaml.safe_load(compose.read_text())["services"]["sandbox-broker"]
    policy = json.loads(broker["environment"]["GYM_COMPOSE_SANDBOX_POLICY"])
    return policy["servers"]["python_sandbox"]["image"]


def baseline(image: str, args) -> dict:
    def create() -> tuple[float, str]:
        name = f"bench-nemo-{uuid.uuid4().hex[:12]}"
        began = time.perf_counter()
        started = run(["docker", "run", "-d", "--name", name, "--label", f"{LABEL}=1", "--init", "--entrypoint",
                       "/bin/sh", image, "-c", "while :; do sleep 2147483647; done"])
        assert started.returncode == 0, started.stderr
        probe = run(["docker", "exec", name, "sh", "-c", "printf docker-sandbox-ready"])
        assert probe.stdout == "docker-sandbox-ready", probe.stderr
        run(["docker", "exec", name, "sh", "-c", "command -v bash"])
        return time.perf_counter() - began, name

    def remove(name: str) -> None:
        run(["docker", "rm", "-f", name])

    try:
        creates = []
        for _ in range(args.leases):
            seconds, name = create()
            creates.append(seconds)
            remove(name)
        _, name = create()
        execs = []
        for _ in range(args.execs):
            began = time.perf_counter()
            done = run(["docker", "exec", name, args.shell, "-c", "true"])
            execs.append(time.perf_counter() - began)
            assert done.returncode == 0, done.stderr
        remove(name)
        began = time.perf_counter()
        with ThreadPoolExecutor(max_workers=args.parallel) as pool:
            burst = list(pool.map(lambda _: create(), range(args.parallel)))
        burst_s = time.perf_counter() - began
        with ThreadPoolExecutor(max_workers=args.parallel) as pool:
            list(pool.map(remove, [name for _, name in burst]))
        return {"create_s": creates, "exec_s": execs, "burst_n": args.parallel, "burst_s": burst_s}
    finally:
        leftover = run(["docker", "ps", "-aq", "--filter", f"label={LABEL}=1"]).stdout.split()
        if leftover:
            run(["docker", "rm", "-f", *leftover])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--execs", type=int, default=200)
    parser.add_argument("--leases", type=int, default=20)
    parser.add_argument("--parallel", type=int, default=16)
    parser.add_argument("--max-live", type=int, default=0,
                        help="the broker's max_live (sandboxes at once; default: derived from the machine)")
    parser.add_argument("--max-starting", type=int, default=0,
                        help="the broker's max_starting (sandboxes starting at once; default: derived from the machine)")
    parser.add_argument("--burst-from", choices=("cold", "warm"), default="cold",
                        help="the burst's leases: each started for it (cold) or from a warm pool of --parallel")
    parser.add_argument("--head-port", type=int, default=11790)
    parser.add_argument("--shell", default="sh", help="the baseline's exec shell (python_sandbox uses /bin/sh)")
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    parser.add_argument("--forks", action="store_true", help="only fork from seed vs a fresh lease each, for a group")
    parser.add_argument("--group", type=int, default=16, help="with --forks: rollouts in the group")
    args = parser.parse_args()
    if args.forks:
        return forks_table(args)
    gym_compose("build", "--resources-server", "python_sandbox")  # images are not part of the figures
    mine, image = ours(args)
    theirs = baseline(image, args)
    rows = []

    def row(name, value_ours, value_theirs, unit):
        ratio = f"{value_theirs / value_ours:.1f}x" if value_ours and value_theirs else "-"
        rows.append((name, f"{value_ours:.1f} {unit}" if value_ours is not None else "-",
                     f"{value_theirs:.1f} {unit}" if value_theirs is not None else "-", ratio))

    exec_ours, exec_theirs = quantiles(mine["exec_s"], 1000), quantiles(theirs["exec_s"], 1000)
    warm = quantiles(mine["warm_lease_s"], 1000)
    cold, create = quantiles(mine["cold_lease_s"], 1000), quantiles(theirs["create_s"], 1000)
    row("exec round trip `true`, p50", exec_ours[0], exec_theirs[0], "ms")
    row("exec round trip `true`, p95", exec_ours[1], exec_theirs[1], "ms")
    row("lease from the warm pool, p50", warm[0], create[0], "ms")
    row("lease from the warm pool, p95", warm[1], create[1], "ms")
    row("cold lease / create, p50", cold[0], create[0], "ms")
    row("cold lease / create, p95", cold[1], create[1], "ms")
    broker = mine["broker"]
    row("sandbox start (broker: create..agent ready), p50", broker["start_s_p50"] * 1000, None, "ms")
    row("sandbox start (broker), p95", broker["start_s_p95"] * 1000, None, "ms")
    per_s_ours, per_s_theirs = mine["burst_n"] / mine["burst_s"], theirs["burst_n"] / theirs["burst_s"]
    rows.append((f"sandboxes {'leased from the warm pool' if args.burst_from == 'warm' else 'started'} per second "
                 f"({args.parallel} at once)", f"{per_s_ours:.2f}/s", f"{per_s_theirs:.2f}/s",
                 f"{per_s_ours / per_s_theirs:.1f}x"))
    leases = sorted(mine["burst_lease_s"])
    p99 = leases[min(len(leases) - 1, int(0.99 * len(leases)))] * 1000 if leases else None
    burst_quantiles = quantiles(leases, 1000) if leases else (None, None)
    row(f"lease in the burst of {args.parallel}, p50", burst_quantiles[0], None, "ms")
    row(f"lease in the burst of {args.parallel}, p95", burst_quantiles[1], None, "ms")
    row(f"lease in the burst of {args.parallel}, p99", p99, None, "ms")
    rows.append((f"failed leases in the burst of {args.parallel}", str(len(mine["burst_failures"])), "-", "-"))
    if mine.get("refill"):
        refill = mine["refill"]
        rows.append(("warm pool full again after the burst's release",
                     f"{refill['started']} in {refill['seconds']:.1f} s "
                     f"({refill['started'] / max(refill['seconds'], 1e-9):.2f}/s)", "-", "-"))
    held = mine["held_memory"]
    row(f"memory per idle sandbox, cgroup ({held['sandboxes']} held)", held["cgroup_mib_mean"], None, "MiB")
    row("memory per idle sandbox, whole machine", held["machine_mib_per_sandbox"], None, "MiB")
    widths = [max(len(r[i]) for r in rows + [("", "gym-compose", "NeMo Gym 0.7 way", "ratio")]) for i in range(4)]
    print(f"sandbox image {image}; {args.execs} execs, {args.leases} leases each way, {args.parallel} at once "
          f"({'from a warm pool of ' + str(args.parallel) if args.burst_from == 'warm' else 'cold'}); "
          f"max_starting {broker['max_starting']}")
    for line in [("", "gym-compose", "NeMo Gym 0.7 way", "ratio"), *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=False)))
    print(f"targets: exec p50 < {TARGETS['exec_p50_ms']:.0f} ms: {exec_ours[0] < TARGETS['exec_p50_ms']}; "
          f"warm lease p50 < {TARGETS['warm_lease_p50_ms']:.0f} ms: {warm[0] < TARGETS['warm_lease_p50_ms']}; "
          f"cold start p50 < {TARGETS['cold_start_p50_s']:.0f} s: {broker['start_s_p50'] < TARGETS['cold_start_p50_s']}")
    for failure in mine["burst_failures"][:3]:
        print(f"  a failed lease: {failure}")
    if args.json:
        args.json.write_text(json.dumps({"gym_compose": mine, "nemo_gym_way": theirs}, indent=1))


def forks_table(args) -> None:
    from bench.sandbox_forks import SETUP, fork_figures
    from gym_compose.engine.images.lean_images import ensure_base_image
    from gym_compose.engine.images.sandbox_images import ensure_default_sandbox_image

    image = ensure_default_sandbox_image(ensure_base_image(progress=lambda line: None), lambda line: None)
    figures = fork_figures(image, args.group, f"{PROJECT}-forks")
    burst, alone = quantiles(figures["fork_lease_s"], 1000), quantiles(figures["fork_alone_lease_s"], 1000)
    fresh_lease, fresh_setup = quantiles(figures["fresh_lease_s"], 1000), quantiles(figures["fresh_setup_s"])
    print(f"sandbox image {image}; a group of {args.group}; set-up: {SETUP}")
    print(f"  fresh lease each + its own set-up: group ready in {figures['fresh_wall_s']:.1f} s "
          f"(lease p50 {fresh_lease[0]:.0f} ms, p95 {fresh_lease[1]:.0f} ms; set-up p50 {fresh_setup[0]:.1f} s, "
          f"p95 {fresh_setup[1]:.1f} s, {args.group} at once)")
    print(f"  fork from seed: group ready in {figures['fork_wall_s']:.1f} s (the seed's set-up "
          f"{figures['seed_setup_s']:.1f} s, its snapshot {figures['snapshot_s'] * 1000:.0f} ms, "
          f"{args.group - 1} forks at once: lease p50 {burst[0]:.0f} ms, p95 {burst[1]:.0f} ms)")
    print(f"  one fork alone, p50 {alone[0]:.0f} ms, p95 {alone[1]:.0f} ms "
          f"({len(figures['fork_alone_lease_s'])} forks; target < 300 ms: {alone[0] < 300})")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
