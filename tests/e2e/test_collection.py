"""End-to-end collection: the collector container against a real stack (marked `docker`)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.e2e import free_port, gym_compose, labelled, only_run_dir, read_jsonl
from tests.support.model_gate import calls_held, gated, open_gate

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_ROWS = REPO / "server_images/example_single_tool_call/data/example.jsonl"


def test_up_benchmark_writes_rollouts_and_metrics_and_leaves_nothing_running(project, tmp_path):
    up = gym_compose("up", "--benchmark", "example_single_tool_call", "-p", project,
                     "--head-port", str(free_port()), cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    run_dir = only_run_dir(tmp_path / "results")
    assert str(run_dir.relative_to(tmp_path)) in up.stdout  # the run folder is printed

    rollouts = read_jsonl(run_dir / "rollouts.jsonl")
    assert len(rollouts) == 5
    assert all(row["reward"] == 1.0 for row in rollouts)
    assert sorted(row["_ng_task_index"] for row in rollouts) == list(range(5))
    assert all(row["agent_ref"]["name"] for row in rollouts)
    metrics = json.loads((run_dir / "rollouts_aggregate_metrics.json").read_text())
    assert metrics[0]["agent_metrics"]["mean/reward"] == 1.0
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["collector_exit_code"] == 0
    assert all(entry["id"] for entry in manifest["images"].values())
    assert (run_dir / "compose.yaml").is_file()
    assert labelled("container", project) == []
    assert labelled("network", project) == []


def test_bad_row_stops_the_run_before_any_container_starts(project, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(EXAMPLE_ROWS.read_text().splitlines()[0] + "\n{not json\n")
    up = gym_compose("up", "--input", str(rows), "--resources-server", "example_single_tool_call",
                     "-p", project, cwd=tmp_path)
    assert up.returncode == 2
    assert f"{rows}, line 2" in up.stderr
    assert "Traceback" not in up.stderr
    assert labelled("container", project) == []


def test_killed_collector_resumes_with_every_rollout_exactly_once(project, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(EXAMPLE_ROWS.read_text() * 80)  # 400 rows
    common = ["--input", str(rows), "--resources-server", "example_single_tool_call", "-p", project,
              "--head-port", str(free_port()), "--run-name", "killed", "--num-repeats", "2",
              "--num-samples-in-parallel", "4"]
    # the model answers 120 calls (two a rollout), then holds the rest: the collector is killed mid-run
    first = subprocess.Popen([sys.executable, "-m", "gym_compose", "up", "--keep", *common, gated(120)],
                             cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results = tmp_path / "results"
    deadline = time.monotonic() + 300
    killed = False
    while time.monotonic() < deadline and first.poll() is None:
        runs = list(results.glob("killed-*/rollouts.jsonl")) if results.exists() else []
        if runs and len(runs[0].read_text().splitlines()) >= 50 and calls_held(project):
            collectors = subprocess.run(
                ["docker", "ps", "-q", "--filter", f"label=io.gym-compose.project={project}",
                 "--filter", "label=io.gym-compose.role=collector"], capture_output=True, text=True, timeout=30,
            ).stdout.split()
            if collectors:
                subprocess.run(["docker", "kill", *collectors], capture_output=True, timeout=60)
                killed = True
                break
        time.sleep(0.2)
    out, err = first.communicate(timeout=300)
    assert killed, f"never saw the collector mid-run:\n{err}"
    assert first.returncode != 0
    run_dir = only_run_dir(results)
    before = len(read_jsonl(run_dir / "rollouts.jsonl"))
    assert 0 < before < 800

    open_gate(project, None)
    resumed = gym_compose("eval", "run", "--no-serve", "--resume", *common, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    rollouts = read_jsonl(run_dir / "rollouts.jsonl")
    keys = [(row["_ng_task_index"], row["_ng_rollout_index"]) for row in rollouts]
    assert len(keys) == 800 and len(set(keys)) == 800
    assert labelled("container", project)  # --keep left the servers up for the --no-serve rerun


PROXY_CONFIG = """
mock_upstream:
  responses_api_models:
    mock_model:
      entrypoint: app.py
      required_api_key: {key}
policy_model:
  responses_api_models:
    openai_model:
      entrypoint: app.py
      openai_base_url: http://mock-upstream:8000/v1
      openai_api_key: {key}
      openai_model: mock
      api_mode: chat_completions
      forward_task_header: true
"""


def test_model_proxy_in_chat_completions_mode_gets_its_key_as_a_secret(project, tmp_path):
    """openai_model -> an upstream that demands the key: the key reaches both containers as a
    compose secret (never in compose.yaml), and the Responses <-> Chat Completions path works."""
    key = "sk-e2e-proxy-key-123"
    config = tmp_path / "proxy.yaml"
    config.write_text(PROXY_CONFIG.format(key=key))
    up = gym_compose("up", "--config", str(config), "--resources-server", "example_single_tool_call",
                     "--input", str(EXAMPLE_ROWS), "-p", project, "--head-port", str(free_port()), cwd=tmp_path)
    assert up.returncode == 0, up.stderr[-3000:]
    run_dir = only_run_dir(tmp_path / "results")
    rollouts = read_jsonl(run_dir / "rollouts.jsonl")
    assert len(rollouts) == 5 and all(row["reward"] == 1.0 for row in rollouts)
    for artifact in ("compose.yaml", "manifest.json", "collector.log"):
        assert key not in (run_dir / artifact).read_text()
    assert key not in up.stdout + up.stderr
