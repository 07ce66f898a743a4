"""The compatibility contract: NeMo Gym 0.7's own configs, resources servers and collector, unchanged.

The released nemo-gym wheel is downloaded from PyPI once (cached under ~/.cache/gym-compose) and
used as a --search-dir, the way a user points gym-compose at a NeMo Gym checkout. Its own
resources servers (app.py importing nemo_gym.*) run in containers against gym-compose's
built-in agents and mock model, on NeMo Gym's recorded fixture rows. NeMo Gym's own collector
(`gym eval run --no-serve`, installed from PyPI into a Python 3.13 venv that the fixture builds
once and caches) collects from a gym-compose stack through the head's host view.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.e2e import BUILDS_NEMO_GYM_RUNTIME, REPO, free_port, gym_compose, labelled
from tests.support.nemo_gym import nemo_gym_venv

pytestmark = [pytest.mark.docker, BUILDS_NEMO_GYM_RUNTIME]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nemo_gym"


@pytest.fixture(scope="module")
def nemo_gym_cli() -> Path:
    """`gym` of nemo-gym 0.7.0 from PyPI, in a venv under the cache folder (built once: a few minutes)."""
    return nemo_gym_venv() / "bin" / "gym"


def fixture_rows(name: str) -> Path:
    return FIXTURES / name / "example.jsonl"


def collect(nemo_gym: Path, project: str, tmp_path: Path, *selector: str, rows: Path) -> list[dict]:
    up = gym_compose("up", "-p", project, "--head-port", str(free_port()), "--search-dir", str(nemo_gym),
                     *selector, "--input", str(rows), cwd=tmp_path)
    assert up.returncode == 0, up.stderr[-4000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    assert labelled("container", project) == []
    return [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]


def test_nemo_gym_example_single_tool_call_server_and_rows(nemo_gym_checkout, project, tmp_path):
    rows = fixture_rows("example_single_tool_call")
    rollouts = collect(nemo_gym_checkout, project, tmp_path, "--resources-server", "example_single_tool_call",
                       rows=rows)
    assert len(rollouts) == len(rows.read_text().splitlines())
    assert all(r["reward"] == 1.0 for r in rollouts)  # the mock model calls get_weather, NeMo Gym's verifier agrees
    assert all(r["agent_ref"]["name"] == "example_single_tool_call_simple_agent" for r in rollouts)


def test_nemo_gym_blackjack_environment_runs_to_a_terminal_state(nemo_gym_checkout, project, tmp_path):
    rows = fixture_rows("blackjack")
    rollouts = collect(nemo_gym_checkout, project, tmp_path, "--environment", "blackjack", rows=rows)
    assert len(rollouts) == len(rows.read_text().splitlines())
    for rollout in rollouts:
        assert rollout["reward"] in (-1.0, 0.0, 1.0)
        assert rollout["terminated"] or rollout["truncated"]


def test_nemo_gyms_own_collector_collects_from_the_head_host_view_and_writes_every_file(
        nemo_gym_cli, project, tmp_path):
    head_port = free_port()
    up = gym_compose("up", "-d", "--publish", "-p", project, "--head-port", str(head_port),
                     "--benchmark", "example_single_tool_call", cwd=tmp_path)
    assert up.returncode == 0, up.stderr[-4000:]
    rows = REPO / "benchmarks" / "example_single_tool_call" / "data" / "example_single_tool_call_benchmark.jsonl"
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0",
           "PATH": f"{nemo_gym_cli.parent}:{os.environ.get('PATH', '')}"}
    ran = subprocess.run(
        [str(nemo_gym_cli), "eval", "run", "--no-serve", "--agent", "example_single_tool_call_benchmark_simple_agent",
         "--input", str(rows), "--output", "results/rollouts.jsonl",
         "+head_server.host=127.0.0.1", f"+head_server.port={head_port}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    output = ran.stdout[-3000:] + ran.stderr[-3000:]
    assert ran.returncode == 0, output
    results = tmp_path / "results"
    rollouts = [json.loads(line) for line in (results / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == len(rows.read_text().splitlines())
    assert all(r["reward"] == 1.0 for r in rollouts)
    assert (results / "rollouts_failures.jsonl").read_text() == ""
    assert len((results / "rollouts_materialized_inputs.jsonl").read_text().splitlines()) == len(rollouts)
    [entry] = json.loads((results / "rollouts_aggregate_metrics.json").read_text())
    assert entry["agent_ref"] == {"name": "example_single_tool_call_benchmark_simple_agent"}
    assert entry["_ng_environment_server"] == "example_single_tool_call_benchmark_environment_server"
    assert entry["key_metrics"]["mean/reward"] == 1.0
    assert [g["_ng_task_index"] for g in entry["group_level_metrics"]] == list(range(len(rollouts)))
