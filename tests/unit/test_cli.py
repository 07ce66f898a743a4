import shutil
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from gym_compose.cli.main import app
from tests.support.cli import REPO, run_cli

runner = CliRunner()


def test_help_lists_the_whole_command_tree():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ["resolve", "render", "build", "up", "down", "ps", "logs", "list", "eval"]:
        assert command in result.output


EXAMPLE_ROWS = REPO / "server_images/example_single_tool_call/data/example.jsonl"


@pytest.mark.parametrize("argv, says", [
    (["up", "--limit", "abc", "--benchmark", "example_single_tool_call"], "Invalid value for '--limit'"),
    (["up", "--head-port", "abc"], "Invalid value for '--head-port'"),
    (["eval", "run", "--num-samples-in-parallel"], "Option '--num-samples-in-parallel' requires an argument"),
    (["frobnicate"], "No such command 'frobnicate'"),
    (["eval", "frob"], "No such command 'frob'"),
])
def test_usage_errors_are_one_line_with_the_usage_hint_and_exit_2(tmp_path, argv, says):
    result = run_cli(*argv, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and says in errors[0]
    assert result.stderr.count("\n") <= 4  # Usage + Try ... --help + blank + Error
    assert not (tmp_path / "results").exists()


def test_an_override_without_a_key_is_refused_naming_it(tmp_path):
    result = run_cli("resolve", "++=3", cwd=tmp_path)
    assert result.returncode == 2
    assert "override '++=3' has no key" in result.stderr


@pytest.mark.parametrize("rows, extra, says", [
    ("", [], "holds no rows"),
    ("\n\n", [], "holds no rows"),
    ('{"responses_create_params": {"input": "a"}}\n{"prompt": "no params"}\n', [],
     "line 2: the row has no `responses_create_params` object"),
    (EXAMPLE_ROWS.read_text(), ["--num-samples-in-parallel", "0"], "num_samples_in_parallel must be a positive integer"),
    (EXAMPLE_ROWS.read_text(), ["--limit", "0"], "--limit must be a positive integer"),
    ('{"responses_create_params": {"input": "a"}, "agent_ref": {"name": "nobody"}}\n', [],
     "agent_ref names agent 'nobody'"),
])
def test_rows_and_options_are_checked_before_anything_starts_or_is_written(tmp_path, rows, extra, says):
    (tmp_path / "rows.jsonl").write_text(rows)
    result = run_cli("up", "--resources-server", "example_single_tool_call", "--input", "rows.jsonl", *extra,
                     cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert says in result.stderr, result.stderr
    assert "docker" not in result.stderr.lower()  # refused before the first Docker call
    assert not (tmp_path / "results").exists()


def test_collecting_against_a_running_stack_checks_the_rows_first_too(tmp_path):
    (tmp_path / "rows.jsonl").write_text("")
    result = run_cli("eval", "run", "--no-serve", "--resources-server", "example_single_tool_call",
                     "--input", "rows.jsonl", cwd=tmp_path)
    assert result.returncode == 2 and "holds no rows" in result.stderr, result.stderr


def test_an_install_without_its_checkout_fails_at_once_saying_how_to_install(tmp_path):
    """`pip install .` (not editable) puts the package into site-packages without server_images/ & co."""
    site = tmp_path / "site-packages"
    shutil.copytree(REPO / "gym_compose", site / "gym_compose", ignore=shutil.ignore_patterns("__pycache__"))
    result = subprocess.run([sys.executable, "-m", "gym_compose", "list"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=60, env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 2, result.stderr
    assert "runs from its source checkout" in result.stderr and "pip install -e" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("extra, says", [
    (["--node-engine", "ssh://admin@node2"], "only for --target swarm"),
    (["--target", "swarm", "--node-engine", "node2"], "expected a Docker engine address"),
    (["--target", "swarm", "--registry", "reg.example/gym", "--node-engine", "ssh://admin@node2"],
     "not with --registry"),
])
def test_a_node_engine_is_checked_before_anything_starts(tmp_path, extra, says):
    result = run_cli("up", "-d", "--benchmark", "example_single_tool_call", *extra, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and says in result.stderr


def test_down_match_without_all_is_a_usage_error(tmp_path):
    result = run_cli("down", "--match", "ci-*", cwd=tmp_path)
    assert result.returncode == 2
    assert "--match selects among the projects of --all" in result.stderr


def test_down_all_match_removes_only_the_matching_projects(monkeypatch):
    from gym_compose.stack import lifecycle

    removed: list[str] = []
    monkeypatch.setattr(lifecycle, "labelled_projects", lambda: ["ci-a", "mine", "ci-b"])
    monkeypatch.setattr(lifecycle, "down_command", lambda name, images=False: removed.append((name, images)))
    lifecycle.down_all_command("ci-*")
    assert removed == [("ci-a", False), ("ci-b", False)]
    removed.clear()
    lifecycle.down_all_command("mine", images=True)
    assert removed == [("mine", True)]


def test_exit_codes_tell_usage_errors_from_engine_and_stack_failures(tmp_path, monkeypatch):
    """2: the command line was wrong; 3: the Docker engine failed (here: no `docker` at all);
    4: the stack did not become healthy (docs/cli.md, Exit codes)."""
    usage = run_cli("up", "--head-port", "0", cwd=tmp_path)
    assert usage.returncode == 2 and "--head-port must be a TCP port" in usage.stderr, usage.stderr
    engine = run_cli("ps", "-p", "demo", cwd=tmp_path)
    assert engine.returncode == 3 and "`docker` command was not found" in engine.stderr, engine.stderr

    from gym_compose.cli import main as cli
    from gym_compose.engine.targets.deployed_stack import StackNotHealthy
    from gym_compose.stack import lifecycle

    def unhealthy(project_name: str) -> None:
        raise StackNotHealthy("server policy_model exited during start-up:", "    (its last words)")

    monkeypatch.setattr(lifecycle, "ps_command", unhealthy)
    monkeypatch.setattr(sys, "argv", ["gym-compose", "ps", "-p", "demo"])
    with pytest.raises(SystemExit) as stack:
        cli.main()
    assert stack.value.code == 4
