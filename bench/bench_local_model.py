"""Benchmark the local CPU model (local_llama_cpp_model, Gemma 3 270M on llama.cpp) in a real stack.

Starts `gym-compose up -d --publish --resources-server example_single_tool_call` twice, with the
mock model (the baseline, same run) and with the local model, and for each measures:
- start-up: `up -d` until every service is healthy (the local model's is "model loaded"), and the
  model's own load time as it reports it (`GET /v1/models` -> meta.load_seconds);
- rollouts/minute and tokens/s over N rollouts of example_single_tool_call at P in parallel,
  posted to the environment server's /run (tokens from each rollout's usage);
- memory of the model server container (`docker stats`), and the image size.

    .venv/bin/python -m bench.bench_local_model [--rollouts 10] [--parallel 2]

The first run builds the image (timed separately: `build` in the output). Quote the figures with
"machine shared with other work" where it is.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
ROWS = REPO / "server_images" / "example_single_tool_call" / "data" / "example.jsonl"
CLI = [sys.executable, "-m", "gym_compose"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def gym_compose(*args: str, timeout: float = 3600) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO)


def model_container_memory(project: str) -> str:
    out = subprocess.run(["docker", "stats", "--no-stream", "--format", "{{.Name}} {{.MemUsage}}"],
                         capture_output=True, text=True, timeout=60).stdout
    return next((line.split(" ", 1)[1] for line in out.splitlines() if line.startswith(f"{project}-policy-model-")),
                "?")


def image_size_mb(tag_prefix: str) -> str:
    out = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}} {{.Size}}", tag_prefix],
                         capture_output=True, text=True, timeout=60).stdout.split()
    return out[1] if len(out) > 1 else "?"


def run_one(url: str, row: dict) -> dict:
    answer = httpx.post(f"{url}/run", json=row, timeout=600)
    answer.raise_for_status()
    return answer.json()


def measure(model_type: str, rollouts: int, parallel: int) -> dict:
    project = f"bench-models-{model_type.replace('_', '-')}"
    head_port = free_port()
    gym_compose("down", "-p", project, timeout=300)
    args = ["up", "-d", "--publish", "-p", project, "--head-port", str(head_port),
            "--resources-server", "example_single_tool_call", "--model-type", model_type]
    started = time.monotonic()
    up = gym_compose(*args)
    startup = time.monotonic() - started
    if up.returncode != 0:
        raise SystemExit(f"up failed for {model_type}:\n{up.stderr[-3000:]}")
    try:
        instances = httpx.get(f"http://127.0.0.1:{head_port}/server_instances", timeout=10).json()
        environment = next(i for i in instances if i["server_type"] == "environment_servers")["url"]
        model = next(i for i in instances if i["server_type"] == "responses_api_models")["url"]
        meta = {}
        if model_type != "mock_model":
            meta = httpx.get(f"{model}/v1/models", timeout=10).json()["data"][0].get("meta", {})
        rows = [json.loads(line) for line in ROWS.read_text().splitlines() if line.strip()]
        work = [rows[i % len(rows)] for i in range(rollouts)]
        began = time.monotonic()
        with ThreadPoolExecutor(parallel) as pool:
            results = list(pool.map(lambda row: run_one(environment, row), work))
        wall = time.monotonic() - began
        output_tokens = sum(r["response"]["usage"]["output_tokens"] for r in results)
        input_tokens = sum(r["response"]["usage"]["input_tokens"] for r in results)
        memory = model_container_memory(project)
    finally:
        gym_compose("down", "-p", project, timeout=300)
    return {"model_type": model_type, "startup_s": startup, "load_s": meta.get("load_seconds"),
            "rollouts": rollouts, "wall_s": wall, "rollouts_per_min": 60 * rollouts / wall,
            "output_tokens_per_s": output_tokens / wall, "input_tokens": input_tokens,
            "output_tokens": output_tokens, "mean_reward": sum(r["reward"] for r in results) / len(results),
            "model_memory": memory}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rollouts", type=int, default=10)
    parser.add_argument("--parallel", type=int, default=2)
    args = parser.parse_args()
    started = time.monotonic()
    build = gym_compose("build", "--resources-server", "example_single_tool_call", "--model-type",
                        "local_llama_cpp_model")
    if build.returncode != 0:
        raise SystemExit(build.stderr[-3000:])
    print(f"build (or find) the images: {time.monotonic() - started:.1f} s")
    print(f"local_llama_cpp_model image: {image_size_mb('gym-compose/local_llama_cpp_model')}")
    results = [measure("mock_model", args.rollouts, args.parallel),
               measure("local_llama_cpp_model", args.rollouts, args.parallel)]
    for result in results:
        load = f"{result['load_s']:.1f} s" if result["load_s"] is not None else "-"
        print(f"{result['model_type']:24} up -d to healthy {result['startup_s']:6.1f} s  model load {load:>7}  "
              f"{result['rollouts_per_min']:7.1f} rollouts/min  {result['output_tokens_per_s']:6.1f} output tokens/s  "
              f"({result['output_tokens']} out / {result['input_tokens']} in tokens, {result['rollouts']} rollouts "
              f"in {result['wall_s']:.1f} s, mean reward {result['mean_reward']:.2f})  model memory {result['model_memory']}")
    mock, local = results
    print(f"ratios local/mock: start-up {local['startup_s'] / mock['startup_s']:.2f}x, "
          f"rollouts/min {local['rollouts_per_min'] / mock['rollouts_per_min']:.3f}x")


if __name__ == "__main__":
    main()
