"""`gym-compose resolve` and `gym-compose list` from the command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gym_compose.cli.main import app

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    monkeypatch.delenv("GYM_COMPOSE_SEARCH_PATH", raising=False)
    monkeypatch.chdir(tmp_path)


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "GYM_COMPOSE_SEARCH_PATH"}
    return subprocess.run([sys.executable, "-m", "gym_compose", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


def test_resolve_prints_only_yaml_on_stdout_and_redacts_secrets(tmp_path):
    result = runner.invoke(app, [
        "resolve", "--resources-server", "example_single_tool_call", "--model-type", "openai_model",
        "--model-url", "http://model:8000/v1", "--model-api-key", "sk-very-secret", "-m", "some-model",
        "++results_token=abc",
    ])
    assert result.exit_code == 0, result.output
    data = yaml.safe_load(result.stdout)
    assert "sk-very-secret" not in result.stdout and "abc" not in result.stdout
    assert data["policy_api_key"] == "****" and data["results_token"] == "****"
    assert data["policy_model"]["responses_api_models"]["openai_model"]["openai_api_key"] == "****"
    assert data["policy_model"]["responses_api_models"]["openai_model"]["openai_base_url"] == "http://model:8000/v1"
    assert data["policy_model_name"] == "some-model"


def test_resolve_with_no_model_uses_the_mock_and_says_so_on_stderr(tmp_path):
    result = runner.invoke(app, ["resolve", "--benchmark", "example_single_tool_call"])
    assert result.exit_code == 0, result.output
    data = yaml.safe_load(result.stdout)
    assert list(data["policy_model"]["responses_api_models"]) == ["mock_model"]
    assert "mock model" in result.stderr and "--model-url" in result.stderr
    assert "mock model" not in result.stdout


def test_benchmark_chains_to_the_resources_server_with_a_benchmark_dataset(tmp_path):
    result = runner.invoke(app, ["resolve", "--benchmark", "example_single_tool_call"])
    data = yaml.safe_load(result.stdout)
    agents = [v["responses_api_agents"] for v in data.values() if isinstance(v, dict) and "responses_api_agents" in v]
    (agent,) = agents
    (dataset,) = agent["simple_agent"]["datasets"]
    assert dataset["type"] == "benchmark"
    assert dataset["jsonl_fpath"] == "benchmarks/example_single_tool_call/data/example_single_tool_call_benchmark.jsonl"
    resources = agent["simple_agent"]["resources_server"]["name"]
    assert data[resources]["resources_servers"]["example_single_tool_call"]["domain"] == "agent"
    # _inherit_from removed the generic instances the benchmark copied
    assert "example_single_tool_call" not in data and "example_single_tool_call_simple_agent" not in data


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--resources-server", "example_single_tool_cal"], "did you mean 'example_single_tool_call'"),
        (["--config", "nowhere.yaml"], "nowhere.yaml"),
        (["--model-type", "openai_model"], "policy_base_url"),
        (["--bogus-flag"], "unknown option"),
    ],
)
def test_bad_input_exits_non_zero_with_one_message_and_no_traceback(tmp_path, args, expected):
    result = run_cli("resolve", *args, cwd=tmp_path)
    assert result.returncode != 0
    assert result.stdout == ""
    assert expected in result.stderr and "Traceback" not in result.stderr
    assert result.stderr.startswith("error:")


def test_yaml_syntax_error_from_the_command_line_names_file_and_line(tmp_path):
    (tmp_path / "broken.yaml").write_text("a:\n  b: 1\n c: 2\n")
    result = run_cli("resolve", "--config", "broken.yaml", cwd=tmp_path)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "broken.yaml" in result.stderr and "line 3" in result.stderr


def test_list_shows_every_selectable_component_with_its_path(tmp_path):
    checkout = tmp_path / "checkout"
    for relative in ["resources_servers/weather/configs/weather.yaml", "resources_servers/weather/configs/hard.yaml",
                     "benchmarks/quiz/config.yaml", "environments/town/config.yaml",
                     "responses_api_agents/walker/configs/walker.yaml"]:
        (checkout / relative).parent.mkdir(parents=True, exist_ok=True)
        (checkout / relative).write_text("{}\n")
    result = runner.invoke(app, ["list", "--search-dir", str(checkout)])
    assert result.exit_code == 0, result.output
    lines = [line.split() for line in result.stdout.splitlines()[1:]]
    rows = [(line[0], line[1], line[-1]) for line in lines]  # a benchmark's ROWS column sits between
    assert ["--benchmark", "quiz", "-", str(checkout / "benchmarks/quiz/config.yaml")] in lines  # declares no dataset
    expected = {
        ("--resources-server", "weather", str(checkout / "resources_servers/weather/configs/weather.yaml")),
        ("--resources-server", "weather/hard", str(checkout / "resources_servers/weather/configs/hard.yaml")),
        ("--benchmark", "quiz", str(checkout / "benchmarks/quiz/config.yaml")),
        ("--environment", "town", str(checkout / "environments/town/config.yaml")),
        ("--agent-type", "walker", str(checkout / "responses_api_agents/walker/configs/walker.yaml")),
        # this project's own components are listed too
        ("--model-type", "mock_model", str(REPO / "configs/mock_model/mock_model.yaml")),
        ("--benchmark", "example_single_tool_call", str(REPO / "benchmarks/example_single_tool_call/config.yaml")),
    }
    assert expected <= {tuple(row) for row in rows}
