"""Benchmark the server runtime: the whole chain on loopback, N rollouts at P in parallel.

environment (legacy_agent) -> simple_agent -> resources (example_single_tool_call)
                                           -> policy_model (openai_model proxy) -> mock_model
Every server is started as the containers start it (`python -m gym_compose.server` + env vars).
Prints rollouts/s and CPU milliseconds per rollout for each server (from /proc/<pid>/stat).

    .venv/bin/python bench/bench_runtime.py [--rollouts 500] [--parallel 32] [--timeout 120]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "protocol"))

from gym_compose.server.http_client import HttpClient  # noqa: E402
from gym_compose.engine.local_processes import LocalProcesses, with_local_addresses  # noqa: E402
from stacks import point_proxy_at_mock, seed_verify_stack  # noqa: E402

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rollouts", type=int, default=500)
    parser.add_argument("--parallel", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=120.0, help="bound on the measured run, seconds")
    parser.add_argument("--api-mode", choices=("responses", "chat_completions"), default="responses")
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
        started = time.perf_counter()
        ok, failed = asyncio.run(drive(port, rows, args.rollouts, args.parallel, time.monotonic() + args.timeout))
        elapsed = time.perf_counter() - started
        spent = {name: cpu_seconds(stack.processes[name].pid) - before[name] for name in names}
    done = ok + failed
    print(f"rows: {rows_file}")
    print(f"rollouts: {done} ({ok} reward 1.0, {failed} failed or other) at {args.parallel} in parallel, "
          f"api_mode={args.api_mode}")
    print(f"rollouts/s: {done / elapsed:.1f}  (wall {elapsed:.2f} s)")
    print("server CPU ms per rollout:")
    for name in names:
        print(f"  {name:28s} {1000 * spent[name] / max(done, 1):6.2f}")
    print(f"  {'total':28s} {1000 * sum(spent.values()) / max(done, 1):6.2f}")
    return 0 if failed == 0 and done == args.rollouts else 1


if __name__ == "__main__":
    sys.exit(main())
