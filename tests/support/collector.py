"""The collector as a subprocess: its command line, the config naming fake environment servers,
rows to collect and what it wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support import REPO


def config_yaml(ports: dict[str, int]) -> str:
    """One environment server per agent: env_<agent> fronts <agent>."""
    import yaml

    config = {
        f"env_{agent}": {"environment_servers": {"fake_env": {
            "host": "127.0.0.1", "port": port, "agent_server": {"type": "responses_api_agents", "name": agent}}}}
        for agent, port in ports.items()
    }
    return yaml.safe_dump(config)


def write_rows(path: Path, n: int, agents: list[str] | None = None) -> Path:
    with path.open("w") as f:
        for i in range(n):
            row = {"responses_create_params": {"input": [{"role": "user", "content": f"q{i}"}]}}
            if agents:
                row["agent_ref"] = {"name": agents[i % len(agents)]}
            f.write(json.dumps(row) + "\n")
    return path


def collector_cmd(rows: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "gym_compose.collect", "--input", str(rows), "--output-dir", str(out), *extra]


def run_collector(ports, rows, out, *extra, timeout=120):
    env = {**os.environ, "NEMO_GYM_CONFIG_DICT": config_yaml(ports)}
    return subprocess.run(collector_cmd(rows, out, *extra), env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def keys(rows: list[dict]) -> list[tuple[int, int]]:
    return [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in rows]
