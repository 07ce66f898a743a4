"""Memory of a resources server answering a whole run's `/aggregate_metrics`.

    .venv/bin/python -m bench.bench_aggregate_memory [--rows 100000]

Builds `--rows` stripped verify responses shaped like example_single_tool_call's (what the
collector posts at the end of a run: server_metrics.stripped), then, in a fresh process each time,
posts them once to a lean SimpleResourcesServer's route and prints the body size and the peak RSS
the call added (ru_maxrss after minus before). The end of a 100,000-row soak OOM-killed a 512 MiB
server on this route (docs/faults.md).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

PROBE = r"""
import asyncio, json, resource, sys
import httpx
from gym_compose.server.resources import BaseResourcesServerConfig, SimpleResourcesServer
rows = int(sys.argv[1])
body = json.dumps({"verify_responses": [
    {"agent_ref": {"name": "example_single_tool_call_simple_agent"}, "_ng_task_index": i, "_ng_rollout_index": 0,
     "reward": 1.0, "mask_sample": False, "failure_kind": None, "failure_reason": None,
     "response": {"usage": {"input_tokens": 160, "output_tokens": 84, "total_tokens": 244,
                            "input_tokens_details": {"cached_tokens": 0},
                            "output_tokens_details": {"reasoning_tokens": 0}}}} for i in range(rows)]}).encode()
app = SimpleResourcesServer(config=BaseResourcesServerConfig(name="res")).setup_webserver()
async def post():
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://res", timeout=900) as client:
        return await client.post("/aggregate_metrics", content=body, headers={"content-type": "application/json"})
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
answer = asyncio.run(post())
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"status": answer.status_code, "body_mb": len(body) / 1e6, "answer_mb": len(answer.content) / 1e6,
                  "peak_added_mib": (after - before) / 1024}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    runs = [json.loads(subprocess.run([sys.executable, "-c", PROBE, str(args.rows)], capture_output=True, text=True,
                                      check=True, timeout=1800).stdout) for _ in range(args.repeats)]
    peaks = sorted(run["peak_added_mib"] for run in runs)
    print(f"rows {args.rows}: body {runs[0]['body_mb']:.1f} MB, answer {runs[0]['answer_mb']:.1f} MB, "
          f"status {runs[0]['status']}; peak RSS added by the call: median {peaks[len(peaks) // 2]:.0f} MiB "
          f"(runs: {', '.join(f'{p:.0f}' for p in peaks)})")


if __name__ == "__main__":
    main()
