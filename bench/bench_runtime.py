"""Benchmark the server runtime: the whole chain on loopback, N rollouts at P in parallel.

environment (legacy_agent) -> simple_agent -> resources (example_single_tool_call)
                                           -> policy_model (openai_model proxy) -> mock_model
Every server is started as the containers start it (`python -m gym_compose.server` + env vars).
Prints rollouts/s and CPU milliseconds per rollout for each server (from /proc/<pid>/stat).
With --collector the rollouts go through the collector (`python -m gym_compose.collect`, as its
container runs it) instead of this script's own client, and its CPU per rollout is printed too:
the difference between a 64-row and a --rollouts-row collection, so its start-up is left out.

With --profile DIR each server is sampled by py-spy (the dev extra installs it) during the
measured run: DIR/<server>.txt holds the collapsed stacks, and the functions with the most samples
(own and including callees) are printed per server. Sampling costs CPU too: compare rates without it.

    .venv/bin/python -m bench.bench_runtime [--rollouts 500] [--parallel 32] [--timeout 120] [--collector]
                                            [--profile DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from gym_compose.engine.targets.local_processes import LocalProcesses, with_local_addresses
from gym_compose.net.http_client import HttpClient
from tests.support.stacks import point_proxy_at_mock, seed_verify_stack

REPO = Path(__file__).resolve().parents[1]

FIXTURE = REPO / "tests" / "fixtures" / "nemo_gym" / "example_single_tool_call" / "example.jsonl"
LOCAL_ROWS = REPO / "server_images" / "example_single_tool_call" / "data" / "example.jsonl"
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


async def drive(port: int, rows: list[dict], total: int, parallel: int, deadline: float) -> tuple[int, int]:
    client = HttpClient(timeout=60)
    next_index, ok, failed = 0, 0, 0

    async def worker():
        nonlocal next_index, ok, failed
        while next_index < total and time.monotonic() < deadline:
            row = rows[next_index % len(rows)]
            next_index += 1
            answer = await client.request("POST", "127.0.0.1", port, "/run", json=row)
            if answer.ok and answer.json().get("reward") == 1.0:
                ok += 1
            else:
                failed += 1

    await asyncio.gather(*(worker() for _ in range(parallel)))
    await client.aclose()
    return ok, failed


def collector_run(config: dict, rows: list[dict], total: int, parallel: int, timeout: float) -> tuple[int, int, float, float]:
    """(rollouts written, failures, collector CPU seconds, collecting rollouts/s) of one collector run."""
    work = Path(tempfile.mkdtemp(prefix="bench-runtime-"))
    rows_file = work / "rows.jsonl"
    rows_file.write_bytes(b"".join(json.dumps(rows[i % len(rows)]).encode() + b"\n" for i in range(total)))
    env = {**os.environ, "NEMO_GYM_CONFIG_DICT": yaml.safe_dump(config)}
    command = [sys.executable, "-m", "gym_compose.collect", "--input", str(rows_file),
               "--output-dir", str(work / "out"), "--num-samples-in-parallel", str(parallel)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, env=env, cwd=REPO, check=True, timeout=timeout, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    written = sum(1 for line in (work / "out" / "rollouts.jsonl").read_bytes().splitlines() if line.strip())
    failed_file = work / "out" / "rollouts_failures.jsonl"
    failed = sum(1 for line in failed_file.read_bytes().splitlines() if line.strip()) if failed_file.exists() else 0
    rate = json.loads((work / "out" / "progress.json").read_bytes())["rollouts_per_second"]
    return written, failed, cpu, rate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rollouts", type=int, default=500)
    parser.add_argument("--parallel", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=120.0, help="bound on the measured run, seconds")
    parser.add_argument("--api-mode", choices=("responses", "chat_completions"), default="responses")
    parser.add_argument("--collector", action="store_true", help="send the rollouts through the collector")
    parser.add_argument("--profile", type=Path, help="sample each server with py-spy into this folder")
    parser.add_argument("--profile-servers", help="comma-separated servers to sample (default: all)")
    parser.add_argument("--native", action="store_true", help="py-spy also unwinds C frames (uvloop, orjson, pydantic)")
    args = parser.parse_args()

    rows_file = FIXTURE if FIXTURE.exists() else LOCAL_ROWS
    rows = [json.loads(line) for line in rows_file.read_text().splitlines() if line.strip()]
    config = point_proxy_at_mock(with_local_addresses(
        seed_verify_stack("example_single_tool_call", proxied=True, api_mode=args.api_mode)))
    stack = LocalProcesses(config, server_dirs={"example_single_tool_call": REPO / "server_images" / "example_single_tool_call"})
    with stack:
        port = stack.port("environment")
        asyncio.run(drive(port, rows, min(64, args.rollouts), args.parallel, time.monotonic() + 30))  # warm-up
        names = [name for name in stack.processes if name != "head_server"]
        before = {name: cpu_seconds(stack.processes[name].pid) for name in names}
        sampled = args.profile_servers.split(",") if args.profile_servers else names
        samplers = start_samplers(args.profile, {name: stack.processes[name].pid for name in sampled},
                                  args.native) if args.profile else {}
        collector_cpu = None
        if args.collector:
            _, _, startup_cpu, _ = collector_run(config, rows, 64, args.parallel, args.timeout)
            before = {name: cpu_seconds(stack.processes[name].pid) for name in names}
            started = time.perf_counter()
            ok, failed, run_cpu, rate = collector_run(config, rows, args.rollouts, args.parallel, args.timeout)
            elapsed = time.perf_counter() - started
            collector_cpu = (run_cpu - startup_cpu) / max(args.rollouts - 64, 1)
        else:
            started = time.perf_counter()
            ok, failed = asyncio.run(drive(port, rows, args.rollouts, args.parallel, time.monotonic() + args.timeout))
            elapsed = time.perf_counter() - started
            rate = (ok + failed) / elapsed
        spent = {name: cpu_seconds(stack.processes[name].pid) - before[name] for name in names}
        stop_samplers(samplers)
    done = ok + failed
    print(f"rows: {rows_file}")
    print(f"rollouts: {done} ({ok} {'written' if args.collector else 'reward 1.0'}, {failed} failed or other) "
          f"at {args.parallel} in parallel, api_mode={args.api_mode}")
    print(f"rollouts/s: {rate:.1f}  (wall {elapsed:.2f} s{', collector start included' if args.collector else ''})")
    print("CPU ms per rollout:")
    for name in names:
        print(f"  {name:28s} {1000 * spent[name] / max(done, 1):6.2f}")
    print(f"  {'total of the servers':28s} {1000 * sum(spent.values()) / max(done, 1):6.2f}")
    if collector_cpu is not None:
        print(f"  {'collector (start-up left out)':28s} {1000 * collector_cpu:6.2f}")
    for name in samplers:
        print_profile(name, args.profile / f"{name}.txt")
    return 0 if failed == 0 and done == args.rollouts else 1


def start_samplers(folder: Path, pids: dict[str, int], native: bool) -> dict[str, subprocess.Popen]:
    """py-spy on each pid; --gil keeps only samples where the server holds the GIL, so the event
    loop's wait for the next event (uvloop releases the GIL in epoll_wait) is left out."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    folder.mkdir(parents=True, exist_ok=True)
    samplers = {name: subprocess.Popen([py_spy, "record", "--pid", str(pid), "--rate", "250", "--gil",
                                        *(["--native"] if native else ["--nonblocking"]),  # native unwinding must pause the process
                                        "--format", "raw", "--output", str(folder / f"{name}.txt")],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                for name, pid in pids.items()}
    time.sleep(1.0)  # attached before the run starts
    return samplers


def stop_samplers(samplers: dict[str, subprocess.Popen]) -> None:
    for sampler in samplers.values():
        sampler.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
    for sampler in samplers.values():
        sampler.wait(timeout=60)


def print_profile(name: str, collapsed: Path, top: int = 12) -> None:
    """From py-spy's collapsed stacks: the share of samples by the package of the innermost frame,
    the functions with the most samples of their own, and those with the most including their
    callees (leaving out the frames under which nearly every sample lies: the event loop's)."""
    own: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    packages: dict[str, int] = {}
    total = 0
    for line in collapsed.read_text().splitlines() if collapsed.exists() else []:
        stack, _, count_text = line.rpartition(" ")
        frames = [frame for frame in stack.split(";") if frame]
        if not frames:
            continue
        count = int(count_text)
        total += count
        names = [_frame_name(frame) for frame in frames]
        own[names[-1]] = own.get(names[-1], 0) + count
        for frame in set(names):
            inclusive[frame] = inclusive.get(frame, 0) + count
        package = _frame_package(frames[-1])
        packages[package] = packages.get(package, 0) + count
    print(f"\nprofile of {name}: {total} samples with the GIL held ({collapsed})")
    below_loop = {frame: count for frame, count in inclusive.items() if count < 0.6 * total}
    for title, table in (("by package of the innermost frame", packages), ("own", own),
                         ("including callees (under 60%)", below_loop)):
        print(f"  {title}:")
        for frame, count in sorted(table.items(), key=lambda item: -item[1])[:top]:
            print(f"    {100 * count / max(total, 1):5.1f}%  {frame}")


def _frame_name(frame: str) -> str:
    """'function (path/file.py:line)' -> 'function file.py'."""
    function, _, where = frame.partition(" (")
    return f"{function} {where.rsplit('/', 1)[-1].split(':', 1)[0].rstrip(')')}"


def _frame_package(frame: str) -> str:
    where = frame.partition(" (")[2]
    path = where.split(":", 1)[0]
    if path.startswith("gym_compose/"):
        return "/".join(path.split("/")[:3])  # gym_compose/server/..., one level deeper
    if path.startswith("<frozen") or "/" not in path:
        return path or "?"
    return path.split("/", 1)[0]

if __name__ == "__main__":
    sys.exit(main())
